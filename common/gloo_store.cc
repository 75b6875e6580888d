#include "common/gloo_store.h"

#include "gloo/common/error.h"

namespace meshrun {

GlooStoreAdapter::GlooStoreAdapter(std::shared_ptr<meshrun::Store> store,
                                   absl::Duration default_timeout)
    : store_(std::move(store)), default_timeout_(default_timeout) {}

void GlooStoreAdapter::set(const std::string& key, const std::vector<char>& data) {
  absl::Status s = store_->Set(key, absl::string_view(data.data(), data.size()));
  if (!s.ok()) throw ::gloo::IoException(std::string(s.message()));
}

std::vector<char> GlooStoreAdapter::get(const std::string& key) {
  absl::StatusOr<std::string> v = store_->Get(key, default_timeout_);
  if (!v.ok()) throw ::gloo::IoException(std::string(v.status().message()));
  return std::vector<char>(v->begin(), v->end());
}

void GlooStoreAdapter::wait(const std::vector<std::string>& keys) {
  absl::Status s = store_->Wait(keys, default_timeout_);
  if (!s.ok()) throw ::gloo::IoException(std::string(s.message()));
}

void GlooStoreAdapter::wait(const std::vector<std::string>& keys,
                            const std::chrono::milliseconds& timeout) {
  absl::Status s = store_->Wait(keys, absl::FromChrono(timeout));
  if (!s.ok()) throw ::gloo::IoException(std::string(s.message()));
}

}  // namespace meshrun
