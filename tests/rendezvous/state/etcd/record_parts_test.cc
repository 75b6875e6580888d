// A run record in parts (rendezvous/state/etcd/record_parts.h), without etcd:
// the writes that save a record, and a record put together from its parts
// or refused when one is missing. The journal on a real etcd:
// journal_parts_test.cc.
#include <catch2/catch.hpp>

#include "rendezvous/state/etcd/record_parts.h"
#include "rendezvous/state/state.h"

namespace state = ::meshrun::rendezvous::state;
namespace re = ::meshrun::rendezvous::state::etcd;

namespace {

state::RunRecord Record(const std::string& run_id, int64_t seq, int members) {
  state::RunRecord r;
  r.run_id = run_id;
  r.incarnation = 2;
  r.seq = seq;
  r.state = "running";
  for (int i = 0; i < members; ++i) {
    state::MemberRecord m;
    m.node.node_id = "node-" + std::to_string(i);
    r.members.push_back(m);
  }
  return r;
}

}  // namespace

TEST_CASE("record parts: a record over the part size is saved as parts then a head, and put together again",
          "[state][record_parts]") {
  const state::RunRecord rec = Record("job/with a slash", 4, 200);
  const std::string encoded = state::EncodeRunRecord(rec);
  const std::string parts_prefix = "/p/runs.parts/";
  std::vector<std::vector<re::Op>> ops = re::RecordWriteOps("/p/runs/x", parts_prefix, rec, encoded, 1000, false);
  const size_t count = (encoded.size() + 999) / 1000;
  REQUIRE(ops.size() == count + 1);
  // The last write: the head, and the deletion of the run's older parts only.
  REQUIRE(ops.back().size() == 2);
  std::optional<re::PartsHead> head = re::DecodeHead(ops.back()[0].value);
  REQUIRE(head.has_value());
  CHECK(head->count == static_cast<int64_t>(count));
  CHECK(head->bytes == static_cast<int64_t>(encoded.size()));
  CHECK(ops.back()[1].key == re::RunPartsPrefix(parts_prefix, rec.run_id));
  CHECK(ops.back()[1].range_end == re::SeqPartsPrefix(parts_prefix, rec.run_id, 4));
  CHECK(re::DecodeHead(encoded) == std::nullopt);

  // Read back in any order, beside another seq's part (named by no head).
  re::PartsAssembler assembler(parts_prefix);
  for (size_t i = count; i-- > 0;) CHECK(assembler.Add(ops[i][0].key, ops[i][0].value));
  CHECK(assembler.Add(re::PartKey(parts_prefix, rec.run_id, 3, 0), "stale"));
  CHECK_FALSE(assembler.Add("/p/runs.parts/zz/0000000000000004/000000", "not hex"));
  std::vector<state::RunRecord> out = {state::RunRecord()};
  out[0].run_id = rec.run_id;
  out[0].incarnation = 2;
  std::vector<std::pair<size_t, re::PartsHead>> heads = {{0, *head}};
  CHECK(re::AssembleRecords(&assembler, &out, &heads).empty());
  REQUIRE(out.size() == 1);
  CHECK(state::EncodeRunRecord(out[0]) == encoded);
  REQUIRE(assembler.Untaken().size() == 1);
  CHECK(assembler.Untaken()[0] == std::make_pair(rec.run_id, int64_t{3}));
}

TEST_CASE("record parts: a small record is one put, deleting the run's parts only after a record in parts",
          "[state][record_parts]") {
  const state::RunRecord rec = Record("job", 5, 1);
  const std::string encoded = state::EncodeRunRecord(rec);
  auto ops = re::RecordWriteOps("/p/runs/job", "/p/runs.parts/", rec, encoded, 1 << 20, false);
  REQUIRE(ops.size() == 1);
  CHECK(ops[0].size() == 1);
  ops = re::RecordWriteOps("/p/runs/job", "/p/runs.parts/", rec, encoded, 1 << 20, true);
  REQUIRE(ops.size() == 1);
  REQUIRE(ops[0].size() == 2);
  CHECK(ops[0][1].key == re::RunPartsPrefix("/p/runs.parts/", "job"));
}

TEST_CASE("record parts: a record with a part missing, or of another incarnation, is left out, naming why",
          "[state][record_parts]") {
  const std::string pa = "/p/";
  std::vector<std::vector<std::vector<re::Op>>> ops;
  re::PartsAssembler assembler(pa);
  for (const char* id : {"a", "b", "c"}) {
    const state::RunRecord r = Record(id, 1, 100);
    ops.push_back(re::RecordWriteOps(std::string("/r/") + id, pa, r, state::EncodeRunRecord(r), 500, false));
    REQUIRE(ops.back().size() > 3);
    for (size_t i = 0; i + 1 < ops.back().size(); ++i) {
      if (!(ops.size() == 1 && i == 1)) assembler.Add(ops.back()[i][0].key, ops.back()[i][0].value);  // a's part 1 lost.
    }
  }
  auto head_of = [&](size_t run) { return *re::DecodeHead(ops[run].back()[0].value); };
  std::vector<state::RunRecord> out(4);
  out[0].run_id = "a";
  out[1] = Record("plain", 1, 1);
  out[2].run_id = "b";
  out[3].run_id = "c";
  re::PartsHead head_c = head_of(2);
  head_c.incarnation = 7;  // Its parts hold incarnation 2.
  std::vector<std::pair<size_t, re::PartsHead>> heads = {{0, head_of(0)}, {2, head_of(1)}, {3, head_c}};
  std::vector<std::string> errors = re::AssembleRecords(&assembler, &out, &heads);
  REQUIRE(errors.size() == 2);
  CHECK(errors[0].find("part 1 of the") != std::string::npos);
  CHECK(errors[1].find("incarnation 2") != std::string::npos);
  REQUIRE(out.size() == 2);
  CHECK(out[0].run_id == "plain");
  CHECK(out[1].run_id == "b");
  CHECK(out[1].members.size() == 100);
  REQUIRE(heads.size() == 1);
  CHECK(heads[0].first == 1);  // b's head, moved with it.
  // The parts of a record that could not be joined are named for dropping.
  std::vector<std::pair<std::string, int64_t>> untaken = assembler.Untaken();
  REQUIRE(untaken.size() == 1);
  CHECK(untaken[0].first == "a");
}
