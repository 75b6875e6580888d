// Adapts a meshrun Store to Gloo's rendezvous store interface.
#pragma once

#include <chrono>
#include <map>
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
// Debian Gloo base class drops the timeout. Not thread-safe (Gloo uses one
// adapter from one thread during connectFullMesh).
class GlooStoreAdapter : public gloo::rendezvous::Store {
 public:
  // `default_timeout` bounds get() and wait(keys) (Gloo passes none).
  GlooStoreAdapter(std::shared_ptr<meshrun::Store> store, absl::Duration default_timeout);

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;

  // Declares a group of keys that will all be read (e.g. the peers' "0".."n-1"
  // address keys of connectFullMesh): the first get or wait of any of them
  // fetches the whole group in a single multi-get and answers later reads
  // from that copy, so a full mesh of n members costs each member one set
  // and one multi-get per group instead of n-1 waits and n-1 gets. Only
  // group keys that every member sets before reading any key may be
  // declared. Call before handing the adapter to Gloo; may be called again
  // for further groups.
  void Prefetch(std::vector<std::string> keys);

 private:
  // Fills cache_ with every prefetch key when `key` is one of them.
  void MaybePrefetch(const std::string& key, absl::Duration timeout);

  std::shared_ptr<meshrun::Store> store_;
  absl::Duration default_timeout_;
  std::vector<std::vector<std::string>> prefetch_;
  std::map<std::string, std::string> cache_;
};

}  // namespace meshrun
