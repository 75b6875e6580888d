#include "common/gloo_store.h"

#include <algorithm>

#include "gloo/common/error.h"

namespace meshrun {

GlooStoreAdapter::GlooStoreAdapter(std::shared_ptr<meshrun::Store> store,
                                   absl::Duration default_timeout)
    : store_(std::move(store)), default_timeout_(default_timeout) {}

void GlooStoreAdapter::set(const std::string& key, const std::vector<char>& data) {
  absl::Status s = store_->Set(key, absl::string_view(data.data(), data.size()));
  if (!s.ok()) throw ::gloo::IoException(std::string(s.message()));
}

void GlooStoreAdapter::Prefetch(std::vector<std::string> keys) { prefetch_.push_back(std::move(keys)); }

void GlooStoreAdapter::MaybePrefetch(const std::string& key, absl::Duration timeout) {
  if (cache_.count(key)) return;
  for (const auto& group : prefetch_) {
    if (std::find(group.begin(), group.end(), key) == group.end()) continue;
    absl::StatusOr<std::vector<std::string>> values = store_->MultiGet(group, timeout);
    if (!values.ok()) throw ::gloo::IoException(std::string(values.status().message()));
    for (size_t i = 0; i < group.size(); ++i) cache_[group[i]] = std::move((*values)[i]);
    return;
  }
}

std::vector<char> GlooStoreAdapter::get(const std::string& key) {
  MaybePrefetch(key, default_timeout_);
  if (auto it = cache_.find(key); it != cache_.end()) return std::vector<char>(it->second.begin(), it->second.end());
  absl::StatusOr<std::string> v = store_->Get(key, default_timeout_);
  if (!v.ok()) throw ::gloo::IoException(std::string(v.status().message()));
  return std::vector<char>(v->begin(), v->end());
}

void GlooStoreAdapter::wait(const std::vector<std::string>& keys) {
  if (keys.size() == 1) MaybePrefetch(keys[0], default_timeout_);
  if (keys.size() == 1 && cache_.count(keys[0])) return;
  absl::Status s = store_->Wait(keys, default_timeout_);
  if (!s.ok()) throw ::gloo::IoException(std::string(s.message()));
}

void GlooStoreAdapter::wait(const std::vector<std::string>& keys,
                            const std::chrono::milliseconds& timeout) {
  if (keys.size() == 1) MaybePrefetch(keys[0], absl::FromChrono(timeout));
  if (keys.size() == 1 && cache_.count(keys[0])) return;
  absl::Status s = store_->Wait(keys, absl::FromChrono(timeout));
  if (!s.ok()) throw ::gloo::IoException(std::string(s.message()));
}

}  // namespace meshrun
