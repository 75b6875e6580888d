#include "ft/quorum_plan.h"

#include <algorithm>
#include <map>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace meshrun::mesh::ft {

absl::StatusOr<QuorumPlan> PlanQuorum(const Quorum& quorum, const std::string& me) {
  const std::vector<Member>& all = quorum.participants;
  int mine = -1;
  std::map<int64_t, int> sizes;  // World size -> participants of it.
  for (int i = 0; i < static_cast<int>(all.size()); ++i) {
    if (all[i].replica_id == me) mine = i;
    ++sizes[all[i].world_size];
  }
  if (mine < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("quorum ", quorum.quorum_id, " does not include replica group '", me, "'"));
  }
  int64_t taken = all[0].world_size;
  for (const auto& [size, n] : sizes) {
    if (n > sizes[taken]) taken = size;
  }
  if (all[mine].world_size != taken) {
    return absl::FailedPreconditionError(absl::StrCat(
        "quorum ", quorum.quorum_id, ": this replica group ('", me, "') has ", all[mine].world_size,
        " ranks, and ", sizes[taken], " of the quorum's ", all.size(), " groups have ", taken,
        ": every replica group needs the same world size"));
  }
  QuorumPlan plan;
  for (int i = 0; i < static_cast<int>(all.size()); ++i) {
    if (all[i].world_size != taken) {
      plan.left_out.push_back(all[i].replica_id);
      continue;
    }
    if (i == mine) plan.replica_rank = static_cast<int>(plan.members.size());
    plan.max_step = plan.members.empty() ? all[i].step : std::max(plan.max_step, all[i].step);
    plan.row_epoch += all[i].commit_failures;
    plan.members.push_back(i);
  }
  plan.replica_world_size = static_cast<int>(plan.members.size());
  for (int r = plan.replica_world_size - 1; r >= 0; --r) {
    const Member& m = all[plan.members[r]];
    if (m.step == plan.max_step) plan.heal_source = r;
    if (m.step < plan.max_step) plan.anyone_behind = true;
  }
  plan.behind = all[mine].step < plan.max_step;
  return plan;
}

// "ok <quorum id>\n" then "<step> <world size> <commit failures> <escaped
// replica id>\n" per
// participant; or "error <code>\n<escaped message>".
std::string EncodeQuorum(const absl::StatusOr<Quorum>& quorum) {
  if (!quorum.ok()) {
    return absl::StrCat("error ", static_cast<int>(quorum.status().code()), "\n",
                        absl::CEscape(quorum.status().message()));
  }
  std::string out = absl::StrCat("ok ", quorum->quorum_id, "\n");
  for (const Member& m : quorum->participants) {
    absl::StrAppend(&out, m.step, " ", m.world_size, " ", m.commit_failures, " ", absl::CEscape(m.replica_id), "\n");
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
    std::vector<std::string> f = absl::StrSplit(lines[i], absl::MaxSplits(' ', 3));
    Member m;
    if (f.size() != 4 || !absl::SimpleAtoi(f[0], &m.step) || !absl::SimpleAtoi(f[1], &m.world_size) ||
        !absl::SimpleAtoi(f[2], &m.commit_failures) || !absl::CUnescape(f[3], &m.replica_id)) {
      return bad();
    }
    q.participants.push_back(std::move(m));
  }
  return q;
}

}  // namespace meshrun::mesh::ft
