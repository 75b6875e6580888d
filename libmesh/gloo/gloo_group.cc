#include "gloo/gloo_group.h"

#include <atomic>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/gloo_store.h"
#include "gloo/allgather.h"
#include "gloo/allreduce.h"
#include "gloo/barrier.h"
#include "gloo/broadcast.h"
#include "gloo/common/error.h"
#include "gloo/math.h"
#include "gloo/reduce_scatter.h"
#include "gloo/rendezvous/context.h"
#include "gloo/transport/tcp/device.h"

namespace meshrun::mesh::internal {
namespace {

using ReduceFn = void (*)(void*, const void*, const void*, size_t);

template <typename T>
ReduceFn Fn(ReduceOp op) {
  switch (op) {
    case ReduceOp::kMax: return reinterpret_cast<ReduceFn>(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::max<T>));
    case ReduceOp::kMin: return reinterpret_cast<ReduceFn>(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::min<T>));
    default: return reinterpret_cast<ReduceFn>(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<T>));
  }
}

ReduceFn FnFor(DataType t, ReduceOp op) {
  switch (t) {
    case DataType::kFloat32: return Fn<float>(op);
    case DataType::kFloat64: return Fn<double>(op);
    case DataType::kInt32: return Fn<int32_t>(op);
    case DataType::kInt64: return Fn<int64_t>(op);
  }
  return nullptr;
}

template <typename T>
const gloo::ReductionFunction<T>* Legacy(ReduceOp op) {
  switch (op) {
    case ReduceOp::kMax: return gloo::ReductionFunction<T>::max;
    case ReduceOp::kMin: return gloo::ReductionFunction<T>::min;
    default: return gloo::ReductionFunction<T>::sum;
  }
}

class GlooGroup : public ProcessGroup {
 public:
  GlooGroup(GroupSpec spec, std::shared_ptr<gloo::Context> context, std::chrono::milliseconds timeout)
      : spec_(std::move(spec)), context_(std::move(context)), timeout_(timeout) {}

  int rank() const override { return spec_.group_rank; }
  int size() const override { return static_cast<int>(spec_.ranks.size()); }
  const std::vector<int>& ranks() const override { return spec_.ranks; }
  std::string backend() const override { return "gloo"; }
  const std::string& name() const override { return spec_.name; }
  void* native_handle() override { return context_.get(); }
  void Abort() override { aborted_ = true; }

  absl::Status AllReduce(void* buffer, size_t count, DataType type, ReduceOp op, void*) override {
    return Guard("allreduce", [&] {
      if (size() == 1 || count == 0) return;
      gloo::AllreduceOptions opts(context_);
      SetOutput(opts, buffer, count, type);
      opts.setReduceFunction(FnFor(type, op));
      opts.setTimeout(timeout_);
      gloo::allreduce(opts);
    });
  }

  absl::Status AllGather(const void* send, void* recv, size_t count, DataType type, void*) override {
    return Guard("allgather", [&] {
      size_t bytes = count * SizeOf(type);
      if (size() == 1) {
        std::memmove(recv, send, bytes);
        return;
      }
      gloo::AllgatherOptions opts(context_);
      std::vector<char> in(static_cast<const char*>(send), static_cast<const char*>(send) + bytes);
      opts.setInput(in.data(), bytes);
      opts.setOutput(static_cast<char*>(recv), bytes * size());
      opts.setTimeout(timeout_);
      gloo::allgather(opts);
    });
  }

  absl::Status ReduceScatter(const void* send, void* recv, size_t count, DataType type, ReduceOp op, void*) override {
    return Guard("reduce_scatter", [&] {
      switch (type) {
        case DataType::kFloat32: RunReduceScatter<float>(send, recv, count, op); break;
        case DataType::kFloat64: RunReduceScatter<double>(send, recv, count, op); break;
        case DataType::kInt32: RunReduceScatter<int32_t>(send, recv, count, op); break;
        case DataType::kInt64: RunReduceScatter<int64_t>(send, recv, count, op); break;
      }
    });
  }

  absl::Status Broadcast(void* buffer, size_t count, DataType type, int root, void*) override {
    if (root < 0 || root >= size()) {
      return absl::InvalidArgumentError(absl::StrCat("broadcast root ", root, " outside 0..", size() - 1));
    }
    return Guard("broadcast", [&] {
      if (size() == 1 || count == 0) return;
      gloo::BroadcastOptions opts(context_);
      opts.setOutput(static_cast<char*>(buffer), count * SizeOf(type));
      opts.setRoot(root);
      opts.setTimeout(timeout_);
      gloo::broadcast(opts);
    });
  }

  absl::Status Barrier() override {
    return Guard("barrier", [&] {
      if (size() == 1) return;
      gloo::BarrierOptions opts(context_);
      opts.setTimeout(timeout_);
      gloo::barrier(opts);
    });
  }

 private:
  template <typename Opts>
  static void SetOutput(Opts& opts, void* buffer, size_t count, DataType type) {
    switch (type) {
      case DataType::kFloat32: opts.setOutput(static_cast<float*>(buffer), count); break;
      case DataType::kFloat64: opts.setOutput(static_cast<double*>(buffer), count); break;
      case DataType::kInt32: opts.setOutput(static_cast<int32_t*>(buffer), count); break;
      case DataType::kInt64: opts.setOutput(static_cast<int64_t*>(buffer), count); break;
    }
  }

  // Debian's Gloo offers reduce-scatter only as the legacy halving-doubling
  // algorithm, which works in place on the whole buffer.
  template <typename T>
  void RunReduceScatter(const void* send, void* recv, size_t count, ReduceOp op) {
    const size_t total = count * size();
    std::vector<T> work(static_cast<const T*>(send), static_cast<const T*>(send) + total);
    if (size() > 1) {
      std::vector<int> recv_elems(size(), static_cast<int>(count));
      gloo::ReduceScatterHalvingDoubling<T> algo(context_, std::vector<T*>{work.data()}, static_cast<int>(total),
                                                 recv_elems, Legacy<T>(op));
      algo.run();
    }
    // The algorithm leaves this member's reduced block at the start of the buffer.
    std::memcpy(recv, work.data(), count * sizeof(T));
  }

  template <typename F>
  absl::Status Guard(const char* what, F&& fn) {
    if (aborted_) return absl::AbortedError(absl::StrCat(what, " on ", spec_.name, ": the mesh was aborted"));
    try {
      fn();
    } catch (const gloo::IoException& e) {
      std::string msg = e.what();
      if (msg.find("Timed out") != std::string::npos || msg.find("timed out") != std::string::npos) {
        return absl::DeadlineExceededError(absl::StrCat(what, " on ", spec_.name, ": ", msg));
      }
      return absl::InternalError(absl::StrCat(what, " on ", spec_.name, ": ", msg));
    } catch (const std::exception& e) {
      return absl::InternalError(absl::StrCat(what, " on ", spec_.name, ": ", e.what()));
    }
    return absl::OkStatus();
  }

  GroupSpec spec_;
  std::shared_ptr<gloo::Context> context_;
  std::chrono::milliseconds timeout_;
  std::atomic<bool> aborted_{false};
};

// Connects one row: the members exchange their pair addresses through
// the store (one set and one multi-get each, via the adapter's prefetch).
absl::StatusOr<std::unique_ptr<ProcessGroup>> ConnectRow(const std::shared_ptr<Store>& store,
                                                         const std::shared_ptr<gloo::transport::Device>& device,
                                                         const GroupSpec& spec, absl::Duration timeout) {
  const int n = static_cast<int>(spec.ranks.size());
  auto context = std::make_shared<gloo::rendezvous::Context>(spec.group_rank, n);
  context->setTimeout(absl::ToChronoMilliseconds(timeout));
  if (n > 1) {
    auto prefixed = std::make_shared<PrefixStore>(absl::StrCat(spec.key, "/gloo"), store);
    GlooStoreAdapter adapter(prefixed, timeout);
    // Gloo sets "rank_<r>" (its host) before reading any peer's, and "<r>"
    // (its pair addresses) before reading any peer's addresses: each group
    // can be fetched in one go when it is first read.
    std::vector<std::string> peers, hosts;
    for (int c = 0; c < n; ++c) {
      if (c == spec.group_rank) continue;
      peers.push_back(absl::StrCat(c));
      hosts.push_back(absl::StrCat("rank_", c));
    }
    adapter.Prefetch(peers);
    adapter.Prefetch(hosts);
    try {
      context->connectFullMesh(adapter, const_cast<std::shared_ptr<gloo::transport::Device>&>(device));
    } catch (const std::exception& e) {
      std::string msg = e.what();
      if (msg.find("timed out") != std::string::npos || msg.find("Timed out") != std::string::npos) {
        return absl::DeadlineExceededError(absl::StrCat(
            "mesh dimension '", spec.dim_name, "': ",
            MissingMembers(*prefixed, spec, [](int c) { return absl::StrCat(c); }),
            " did not arrive within ", absl::FormatDuration(timeout)));
      }
      return absl::UnavailableError(absl::StrCat("connecting ", spec.name, ": ", msg));
    }
  }
  return std::unique_ptr<ProcessGroup>(
      std::make_unique<GlooGroup>(spec, std::move(context), absl::ToChronoMilliseconds(timeout)));
}

}  // namespace

absl::StatusOr<GroupFactory> MakeGlooFactory(std::shared_ptr<Store> store, const std::string& address,
                                             absl::Duration timeout) {
  std::shared_ptr<gloo::transport::Device> device;
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = address;
    device = gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("gloo tcp device on ", address, ": ", e.what()));
  }
  return GroupFactory([store, device, timeout](const std::vector<GroupSpec>& rows)
                          -> absl::StatusOr<std::vector<std::unique_ptr<ProcessGroup>>> {
    // Rows of different dimensions connect concurrently.
    std::vector<absl::StatusOr<std::unique_ptr<ProcessGroup>>> results(rows.size());
    std::vector<std::thread> threads;
    for (size_t i = 1; i < rows.size(); ++i) {
      threads.emplace_back([&, i] { results[i] = ConnectRow(store, device, rows[i], timeout); });
    }
    if (!rows.empty()) results[0] = ConnectRow(store, device, rows[0], timeout);
    for (auto& t : threads) t.join();
    std::vector<std::unique_ptr<ProcessGroup>> out;
    for (auto& r : results) {
      if (!r.ok()) return r.status();
      out.push_back(std::move(*r));
    }
    return out;
  });
}

}  // namespace meshrun::mesh::internal
