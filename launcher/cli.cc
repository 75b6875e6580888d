#include "launcher/cli.h"

#include <algorithm>
#include <cstdio>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace meshrun::launcher {
namespace {

// Levenshtein distance (insertions, deletions, substitutions), one row.
size_t EditDistance(absl::string_view a, absl::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// The first flag among the words CLI11 reports as unexpected ("The
// following arguments were not expected: x --tls-caa"); "" when none.
std::string FirstUnexpectedFlag(const std::string& what) {
  const std::string marker = "were not expected: ";
  size_t at = what.find(marker);
  if (at == std::string::npos) return "";
  for (absl::string_view word : absl::StrSplit(absl::string_view(what).substr(at + marker.size()), ' ')) {
    if (absl::StartsWith(word, "-")) return std::string(word);
  }
  return "";
}

}  // namespace

std::vector<std::string> NearestNames(absl::string_view name, const std::vector<std::string>& candidates, int max) {
  const size_t limit = std::max<size_t>(2, name.size() / 3);
  std::vector<std::pair<size_t, size_t>> scored;  // (distance, index)
  for (size_t i = 0; i < candidates.size(); ++i) {
    const size_t d = EditDistance(name, candidates[i]);
    if (d <= limit) scored.emplace_back(d, i);
  }
  std::stable_sort(scored.begin(), scored.end());
  std::vector<std::string> out;
  for (const auto& [d, i] : scored) {
    if (static_cast<int>(out.size()) >= max) break;
    if (std::find(out.begin(), out.end(), candidates[i]) == out.end()) out.push_back(candidates[i]);
  }
  return out;
}

std::string DidYouMeanFlag(const CLI::App& app, absl::string_view unknown) {
  absl::string_view name = unknown.substr(0, unknown.find('='));
  while (absl::ConsumePrefix(&name, "-")) {
  }
  // Each flag once, spelled as the user spells ("--a-b" or "--a_b").
  const bool dashes = absl::StrContains(name, '-') && !absl::StrContains(name, '_');
  std::vector<std::string> flags;
  for (const CLI::Option* opt : app.get_options()) {
    for (std::string l : opt->get_lnames()) {
      std::replace(l.begin(), l.end(), dashes ? '_' : '-', dashes ? '-' : '_');
      if (std::find(flags.begin(), flags.end(), l) == flags.end()) flags.push_back(l);
    }
  }
  // A prefix first, as torchrun's argparse reads `--nproc_per` as
  // `--nproc_per_node` (meshrun asks for the whole name: a prefix that
  // another flag shares later would change its meaning); else misspellings.
  std::vector<std::string> near;
  if (!name.empty()) {
    for (const std::string& f : flags) {
      if (near.size() < 3 && f.size() > name.size() && absl::StartsWith(f, name)) near.push_back(f);
    }
  }
  if (near.empty()) near = NearestNames(name, flags);
  if (near.empty()) return "";
  for (std::string& n : near) n = absl::StrCat("--", n);
  return absl::StrCat(" (did you mean ", absl::StrJoin(near, " or "), "?)");
}

namespace {

// CLI11's "Could not convert: --max_restarts = abc" in this launcher's
// words: "--max_restarts=abc: must be an integer". "" when `e` is another
// conversion error or names no option of `app`.
std::string ConversionMessage(const CLI::App& app, const CLI::ConversionError& e) {
  constexpr absl::string_view kPrefix = "Could not convert: ";
  absl::string_view what = e.what();
  if (!absl::ConsumePrefix(&what, kPrefix)) return "";
  const size_t eq = what.find(" = ");
  if (eq == absl::string_view::npos) return "";
  const std::string name(what.substr(0, eq));
  const CLI::Option* opt = app.get_option_no_throw(name);
  if (opt == nullptr) return "";
  const std::string type = opt->get_type_name();
  const char* kind = type == "INT"                      ? "an integer"
                     : type == "UINT"                   ? "a non-negative integer"
                     : type == "FLOAT" || type == "NUMBER" ? "a number"
                                                        : nullptr;
  if (kind == nullptr) return "";
  return absl::StrCat(name, "=", what.substr(eq + 3), ": must be ", kind);
}

}  // namespace

std::optional<int> ParseCli(CLI::App& app, int argc, char** argv, const std::string& who) {
  // The last of a repeated flag wins; collecting options keep every value.
  for (CLI::Option* opt : app.get_options()) {
    if (opt->get_items_expected_max() <= 1) opt->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::string msg = e.what();
    if (const auto* conversion = dynamic_cast<const CLI::ConversionError*>(&e)) {
      if (std::string m = ConversionMessage(app, *conversion); !m.empty()) msg = std::move(m);
    }
    std::replace(msg.begin(), msg.end(), '\n', ' ');
    const std::string unexpected = FirstUnexpectedFlag(msg);
    const std::string hint = unexpected.empty() ? "" : DidYouMeanFlag(app, unexpected);
    std::fprintf(stderr, "%s: error: %s%s (see %s --help)\n", who.c_str(), msg.c_str(), hint.c_str(), who.c_str());
    return 2;
  }
  return std::nullopt;
}

}  // namespace meshrun::launcher
