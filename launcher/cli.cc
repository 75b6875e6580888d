#include "launcher/cli.h"

#include <algorithm>
#include <cstdio>

namespace meshrun::launcher {

std::optional<int> ParseCli(CLI::App& app, int argc, char** argv, const std::string& who) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::string msg = e.what();
    std::replace(msg.begin(), msg.end(), '\n', ' ');
    std::fprintf(stderr, "%s: error: %s (see %s --help)\n", who.c_str(), msg.c_str(), who.c_str());
    return 2;
  }
  return std::nullopt;
}

}  // namespace meshrun::launcher
