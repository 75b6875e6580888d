#include "ft/quorum_plan.h"

#include <algorithm>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace meshrun::mesh::ft {

absl::StatusOr<QuorumPlan> PlanQuorum(const Quorum& quorum, const std::string& me, int64_t world_size) {
  QuorumPlan plan;
  plan.replica_world_size = static_cast<int>(quorum.participants.size());
  int mine = -1;
  for (int i = 0; i < plan.replica_world_size; ++i) {
    const Member& m = quorum.participants[i];
    if (m.replica_id == me) mine = i;
    if (m.world_size != world_size) {
      return absl::FailedPreconditionError(absl::StrCat(
          "quorum ", quorum.quorum_id, ": replica group '", m.replica_id, "' has ", m.world_size,
          " ranks and this one ", world_size, ": every replica group needs the same world size"));
    }
    plan.max_step = i == 0 ? m.step : std::max(plan.max_step, m.step);
  }
  if (mine < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("quorum ", quorum.quorum_id, " does not include replica group '", me, "'"));
  }
  plan.replica_rank = mine;
  for (int i = plan.replica_world_size - 1; i >= 0; --i) {
    const Member& m = quorum.participants[i];
    if (m.step == plan.max_step) plan.heal_source = i;
    if (m.step < plan.max_step) plan.anyone_behind = true;
  }
  plan.behind = quorum.participants[mine].step < plan.max_step;
  return plan;
}

// "ok <quorum id>\n" then "<step> <world size> <escaped replica id>\n" per
// participant; or "error <code>\n<escaped message>".
std::string EncodeQuorum(const absl::StatusOr<Quorum>& quorum) {
  if (!quorum.ok()) {
    return absl::StrCat("error ", static_cast<int>(quorum.status().code()), "\n",
                        absl::CEscape(quorum.status().message()));
  }
  std::string out = absl::StrCat("ok ", quorum->quorum_id, "\n");
  for (const Member& m : quorum->participants) {
    absl::StrAppend(&out, m.step, " ", m.world_size, " ", absl::CEscape(m.replica_id), "\n");
  }
  return out;
}

absl::StatusOr<Quorum> DecodeQuorum(const std::string& text) {
  std::vector<std::string> lines = absl::StrSplit(text, '\n', absl::SkipEmpty());
  auto bad = [&] { return absl::InternalError(absl::StrCat("malformed quorum in the group's store: '",
                                                           absl::CEscape(text.substr(0, 200)), "'")); };
  if (lines.empty()) return bad();
  std::vector<std::string> head = absl::StrSplit(lines[0], ' ');
  if (head.size() == 2 && head[0] == "error") {
    int code = 0;
    std::string message;
    if (!absl::SimpleAtoi(head[1], &code) || code <= 0 || code > 16) return bad();
    if (lines.size() > 1 && !absl::CUnescape(lines[1], &message)) return bad();
    return absl::Status(static_cast<absl::StatusCode>(code), message);
  }
  Quorum q;
  if (head.size() != 2 || head[0] != "ok" || !absl::SimpleAtoi(head[1], &q.quorum_id)) return bad();
  for (size_t i = 1; i < lines.size(); ++i) {
    std::vector<std::string> f = absl::StrSplit(lines[i], absl::MaxSplits(' ', 2));
    Member m;
    if (f.size() != 3 || !absl::SimpleAtoi(f[0], &m.step) || !absl::SimpleAtoi(f[1], &m.world_size) ||
        !absl::CUnescape(f[2], &m.replica_id)) {
      return bad();
    }
    q.participants.push_back(std::move(m));
  }
  return q;
}

}  // namespace meshrun::mesh::ft
