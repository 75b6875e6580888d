// Adapts a meshrun Store to Gloo's rendezvous store interface.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/store.h"
#include "gloo/rendezvous/store.h"

namespace meshrun {

// Lets gloo::rendezvous::Context::connectFullMesh exchange addresses through
// a meshrun Store. Gloo's interface throws on failure, so errors become
// gloo::IoException carrying the Store's message (callers at the backend
// boundary catch it). Both `wait` overloads are overridden because the
// Debian Gloo base class drops the timeout. Thread-safe when the store is.
class GlooStoreAdapter : public gloo::rendezvous::Store {
 public:
  // `default_timeout` bounds get() and wait(keys) (Gloo passes none).
  GlooStoreAdapter(std::shared_ptr<meshrun::Store> store, absl::Duration default_timeout);

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;

 private:
  std::shared_ptr<meshrun::Store> store_;
  absl::Duration default_timeout_;
};

}  // namespace meshrun
