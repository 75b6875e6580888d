#include "bench/rdzv_scale/preload.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "client/grpc_store.h"

namespace meshrun::bench {
namespace {

constexpr int64_t kBatch = 512;
constexpr int kClients = 4;

absl::StatusOr<std::shared_ptr<Store>> Connect(const std::string& endpoint, const std::string& run_id) {
  client::GrpcStoreOptions options;
  options.endpoint = endpoint;
  options.run_id = run_id;
  options.connect_timeout = absl::Seconds(30);
  return client::ConnectGrpcStore(options);
}

}  // namespace

absl::StatusOr<PreloadedKeys> PreloadKeys(const std::string& endpoint, const std::string& run_prefix, int64_t keys,
                                          int64_t keys_per_run, int value_bytes) {
  if (keys < 1 || keys_per_run < 1 || value_bytes < 1) {
    return absl::InvalidArgumentError(absl::StrCat("preload of ", keys, " keys, ", keys_per_run, " per run, ",
                                                   value_bytes, "-byte values: each must be at least 1"));
  }
  PreloadedKeys out;
  out.keys = keys;
  const int64_t runs = (keys + keys_per_run - 1) / keys_per_run;
  for (int64_t r = 0; r < runs; ++r) out.run_ids.push_back(absl::StrCat(run_prefix, "-", r));
  // Batches are numbered over the whole preload; batch b writes keys
  // [b * kBatch, min(keys, (b + 1) * kBatch)) of run (first key / keys_per_run),
  // cut at a run's end.
  struct Batch {
    int64_t run, first, last;  // Keys [first, last) of `run`.
  };
  std::vector<Batch> batches;
  for (int64_t r = 0; r < runs; ++r) {
    const int64_t end = std::min(keys, (r + 1) * keys_per_run) - r * keys_per_run;
    for (int64_t k = 0; k < end; k += kBatch) batches.push_back({r, k, std::min(end, k + kBatch)});
  }
  const std::string value(static_cast<size_t>(value_bytes), 'v');
  std::atomic<size_t> next{0};
  absl::Mutex mu;
  absl::Status first_error;
  const absl::Time t0 = absl::Now();
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&] {
      std::vector<std::shared_ptr<Store>> stores(static_cast<size_t>(runs));
      std::vector<std::string> ks;
      std::vector<std::string> vs;
      for (size_t b = next++; b < batches.size(); b = next++) {
        const Batch& batch = batches[b];
        auto& store = stores[static_cast<size_t>(batch.run)];
        absl::Status s;
        if (store == nullptr) {
          absl::StatusOr<std::shared_ptr<Store>> opened = Connect(endpoint, out.run_ids[batch.run]);
          if (opened.ok()) store = *opened;
          s = opened.status();
        }
        if (s.ok()) {
          ks.clear();
          for (int64_t k = batch.first; k < batch.last; ++k) ks.push_back(absl::StrCat("preload/", k));
          vs.assign(ks.size(), value);
          s = store->MultiSet(ks, vs);
        }
        if (!s.ok()) {
          absl::MutexLock lock(&mu);
          if (first_error.ok()) {
            first_error = absl::Status(s.code(), absl::StrCat("preload: keys ", batch.first, "..", batch.last - 1,
                                                              " of run ", out.run_ids[batch.run], ": ", s.message()));
          }
          next = batches.size();  // The others stop at their next batch.
          return;
        }
      }
    });
  }
  for (std::thread& t : clients) t.join();
  if (!first_error.ok()) return first_error;
  out.seconds = absl::ToDoubleSeconds(absl::Now() - t0);
  return out;
}

absl::StatusOr<int64_t> CountKeys(const std::string& endpoint, const std::vector<std::string>& runs) {
  int64_t total = 0;
  for (const std::string& run : runs) {
    absl::StatusOr<std::shared_ptr<Store>> store = Connect(endpoint, run);
    if (!store.ok()) return store.status();
    absl::StatusOr<Store::KeyList> list = (*store)->Keys("", 0);
    if (!list.ok()) return absl::Status(list.status().code(), absl::StrCat("keys of run ", run, ": ", list.status().message()));
    total += list->count;
  }
  return total;
}

}  // namespace meshrun::bench
