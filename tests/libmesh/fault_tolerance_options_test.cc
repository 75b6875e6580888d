// libmesh's fault-tolerance manager refuses bad options with one line naming
// the value, before any connection (meshrun/fault_tolerance.h).
#include <catch2/catch.hpp>

#include <cstdlib>

#include "absl/strings/match.h"
#include "meshrun/fault_tolerance.h"

using namespace meshrun::mesh;

namespace {

FaultToleranceOptions Valid() {
  FaultToleranceOptions o;
  o.lighthouse = "http://127.0.0.1:1";
  o.shared_run_id = "job";
  o.state_dict = []() -> absl::StatusOr<std::string> { return std::string(); };
  o.load_state_dict = [](absl::string_view) { return absl::OkStatus(); };
  return o;
}

World Group(int size) {
  World w;
  w.world_size = size;
  w.local_world_size = size;
  w.store_endpoint = "127.0.0.1:1";
  w.run_id = "job-group-0";
  return w;
}

absl::Status Refusal(FaultToleranceOptions o, int size = 2) {
  return FaultToleranceManager::Create("cpu", std::move(o), Group(size)).status();
}

}  // namespace

TEST_CASE("fault tolerance: bad options get one line naming the value", "[ft]") {
  FaultToleranceOptions o = Valid();
  o.state_dict = nullptr;
  CHECK(absl::StrContains(Refusal(o).message(), "state_dict and load_state_dict are required"));
  o = Valid();
  o.quorum_timeout = absl::ZeroDuration();
  CHECK(absl::IsInvalidArgument(Refusal(o)));
  CHECK(absl::StrContains(Refusal(o).message(), "quorum_timeout 0: allowed 1ms to 168h"));
  o = Valid();
  o.heartbeat_interval = absl::Hours(2);
  CHECK(absl::StrContains(Refusal(o).message(), "heartbeat_interval 2h: allowed 1ms to 1h"));
  o = Valid();
  o.max_failed_commits = 0;
  CHECK(absl::StrContains(Refusal(o).message(), "max_failed_commits 0: allowed 1 to 1000000"));
  o = Valid();
  o.group_shape = {3};  // Not the group's 2 ranks.
  CHECK(absl::IsInvalidArgument(Refusal(o)));
  CHECK(absl::StrContains(Refusal(o).message(), "3"));
  o = Valid();
  CHECK(absl::IsInvalidArgument(FaultToleranceManager::Create("cuda:0", o, Group(2)).status()));
}

TEST_CASE("fault tolerance: without meshrun's lighthouse or shared run, the variable is named", "[ft]") {
  unsetenv("TORCHFT_LIGHTHOUSE");
  unsetenv("MESHRUN_LIGHTHOUSE_RUN_ID");
  FaultToleranceOptions o = Valid();
  o.lighthouse.clear();
  absl::Status s = Refusal(o);
  CHECK(absl::IsFailedPrecondition(s));
  CHECK(absl::StrContains(s.message(), "TORCHFT_LIGHTHOUSE is not set"));
  o = Valid();
  o.shared_run_id.clear();
  s = Refusal(o);
  CHECK(absl::IsFailedPrecondition(s));
  CHECK(absl::StrContains(s.message(), "MESHRUN_LIGHTHOUSE_RUN_ID is not set"));
}
