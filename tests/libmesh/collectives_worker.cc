// Every collective of every dimension of a (2, 4) mesh (or the shape given
// as argv[1], e.g. "2,2,2"), checked against values computed locally.
// Prints "rank=R collectives OK".
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "meshrun/device_mesh.h"

using namespace meshrun::mesh;

#define EXPECT(cond, ...)                                  \
  do {                                                     \
    if (!(cond)) {                                         \
      std::fprintf(stderr, "rank %d: ", rank);             \
      std::fprintf(stderr, __VA_ARGS__);                   \
      std::fprintf(stderr, "\n");                          \
      return 1;                                            \
    }                                                      \
  } while (0)

int main(int argc, char** argv) {
  std::vector<int> shape = {2, 4};
  if (argc > 1) {
    shape.clear();
    for (absl::string_view s : absl::StrSplit(argv[1], ',')) {
      int v = 0;
      if (!absl::SimpleAtoi(s, &v)) return 2;
      shape.push_back(v);
    }
  }
  auto mesh = InitDeviceMesh("cpu", shape);
  if (!mesh.ok()) {
    std::fprintf(stderr, "%s\n", mesh.status().ToString().c_str());
    return 1;
  }
  const int rank = mesh->rank();
  for (int d = 0; d < mesh->ndim(); ++d) {
    ProcessGroup* g = *mesh->GetGroup(d);
    const int n = g->size();
    EXPECT(g->ranks()[g->rank()] == rank, "dim %d: group rank %d is not this rank", d, g->rank());
    EXPECT(g->rank() == *mesh->local_rank(d), "dim %d: group rank is not the coordinate", d);
    // allreduce sum / max / min
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin}) {
      std::vector<int64_t> v = {rank, -rank};
      EXPECT(g->AllReduce(v.data(), v.size(), op).ok(), "allreduce");
      int64_t want0 = op == ReduceOp::kSum ? 0 : op == ReduceOp::kMax ? INT64_MIN : INT64_MAX;
      for (int r : g->ranks()) {
        want0 = op == ReduceOp::kSum ? want0 + r : op == ReduceOp::kMax ? std::max<int64_t>(want0, r)
                                                                        : std::min<int64_t>(want0, r);
      }
      EXPECT(v[0] == want0, "dim %d allreduce op %d: %lld != %lld", d, static_cast<int>(op),
             static_cast<long long>(v[0]), static_cast<long long>(want0));
    }
    // allgather of 3 floats each
    std::vector<float> mine = {rank * 1.f, rank * 2.f, rank * 3.f};
    std::vector<float> all(3 * n);
    EXPECT(g->AllGather(mine.data(), all.data(), 3).ok(), "allgather");
    for (int i = 0; i < n; ++i) {
      EXPECT(all[3 * i + 2] == g->ranks()[i] * 3.f, "dim %d allgather block %d", d, i);
    }
    // reduce-scatter of n blocks of 5 doubles: block b holds member*1000 + b*10 + j
    const int c = 5;
    std::vector<double> send(n * c);
    for (int b = 0; b < n; ++b) {
      for (int j = 0; j < c; ++j) send[b * c + j] = g->rank() * 1000.0 + b * 10 + j;
    }
    std::vector<double> recv(c);
    EXPECT(g->ReduceScatter(send.data(), recv.data(), c).ok(), "reduce_scatter");
    double members = 0;
    for (int m = 0; m < n; ++m) members += m * 1000.0;
    for (int j = 0; j < c; ++j) {
      double want = members + n * (g->rank() * 10.0 + j);
      EXPECT(recv[j] == want, "dim %d reduce_scatter[%d] = %f, want %f", d, j, recv[j], want);
    }
    // broadcast from the last member
    std::vector<int32_t> b = {rank, 7};
    absl::Status bs = g->Broadcast(b.data(), 2, n - 1);
    EXPECT(bs.ok(), "broadcast: %s", bs.ToString().c_str());
    EXPECT(b[0] == g->ranks()[n - 1] && b[1] == 7, "dim %d broadcast", d);
    EXPECT(g->Barrier().ok(), "barrier");
  }
  std::printf("rank=%d collectives OK\n", rank);
  return 0;
}
