#include "agent/tcpstore/tcpstore_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "agent/tcpstore/connection.h"
#include "agent/tcpstore/store_ops.h"

namespace meshrun::agent::tcpstore {
namespace {

// Binds and listens on addr:port; -1 with `*why` set when it cannot.
int Listen(const std::string& addr, int port, std::string* why) {
  sockaddr_storage ss{};
  socklen_t len = 0;
  int family = AF_INET6;
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&ss);
  auto* v4 = reinterpret_cast<sockaddr_in*>(&ss);
  if (inet_pton(AF_INET6, addr.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(static_cast<uint16_t>(port));
    len = sizeof(sockaddr_in6);
  } else if (inet_pton(AF_INET, addr.c_str(), &v4->sin_addr) == 1) {
    family = AF_INET;
    v4->sin_family = AF_INET;
    v4->sin_port = htons(static_cast<uint16_t>(port));
    len = sizeof(sockaddr_in);
  } else {
    *why = absl::StrCat("'", addr, "' is not a numeric address");
    return -1;
  }
  int fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *why = std::strerror(errno);
    return -1;
  }
  int one = 1, zero = 0;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (family == AF_INET6) ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0 || ::listen(fd, SOMAXCONN) != 0) {
    *why = std::strerror(errno);
    ::close(fd);
    return -1;
  }
  return fd;
}

// The requests that write their keys (a BARRIER's arrival, an ADD, is
// handled apart).
bool Writes(Op op) {
  switch (op) {
    case Op::kSet:
    case Op::kMultiSet:
    case Op::kAdd:
    case Op::kAppend:
    case Op::kCompareSet:
    case Op::kDeleteKey:
      return true;
    default:
      return false;
  }
}

int LocalPort(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return 0;
  if (ss.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
  return ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
}

}  // namespace

std::string PeerName(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "?";
  char host[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (ss.ss_family == AF_INET6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
    port = ntohs(a->sin6_port);
    return absl::StrCat("[", host, "]:", port);
  }
  auto* a = reinterpret_cast<sockaddr_in*>(&ss);
  inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
  return absl::StrCat(host, ":", ntohs(a->sin_port));
}

absl::StatusOr<std::unique_ptr<AgentStore>> AgentStore::Start(AgentStoreOptions options) {
  std::unique_ptr<AgentStore> s(new AgentStore(std::move(options)));
  std::string why;
  if (s->o_.bind_addr.empty()) {
    s->listen_fd_ = Listen("::", s->o_.port, &why);
    if (s->listen_fd_ < 0) s->listen_fd_ = Listen("0.0.0.0", s->o_.port, &why);
  } else {
    s->listen_fd_ = Listen(s->o_.bind_addr, s->o_.port, &why);
  }
  if (s->listen_fd_ < 0) {
    return absl::UnavailableError(absl::StrCat("the agent store cannot listen on ",
                                               s->o_.bind_addr.empty() ? "every address" : s->o_.bind_addr,
                                               " port ", s->o_.port, ": ", why));
  }
  s->port_ = LocalPort(s->listen_fd_);
  if (::pipe2(s->wake_fd_, O_CLOEXEC) != 0) {
    return absl::UnavailableError(absl::StrCat("the agent store: pipe: ", std::strerror(errno)));
  }
  s->accept_thread_ = std::thread([p = s.get()] { p->AcceptLoop(); });
  return s;
}

AgentStore::~AgentStore() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (wake_fd_[1] >= 0) {
    char b = 0;
    (void)!::write(wake_fd_[1], &b, 1);
  }
  if (accept_thread_.joinable()) accept_thread_.join();
  std::list<std::shared_ptr<Conn>> conns;
  {
    absl::MutexLock lock(&mu_);
    conns.swap(conns_);
  }
  for (auto& c : conns) ::shutdown(c->fd, SHUT_RDWR);
  for (auto& c : conns) {
    if (c->reader.joinable()) c->reader.join();
  }
  if (listen_fd_ >= 0) ::close(listen_fd_);
  for (int fd : wake_fd_) {
    if (fd >= 0) ::close(fd);
  }
}

void AgentStore::SetStore(std::shared_ptr<Store> store, std::shared_ptr<Store> internal, bool read_cache) {
  queues_.SetStore(internal);
  auto cache = std::make_shared<ReadCache>(read_cache ? o_.read_cache_bytes : 0);
  absl::MutexLock lock(&mu_);
  store_ = std::move(store);
  internal_ = std::move(internal);
  cache_ = std::move(cache);
}

void AgentStore::Stop() {
  absl::MutexLock lock(&mu_);
  stopping_ = true;
  for (auto& c : conns_) ::shutdown(c->fd, SHUT_RDWR);
}

void AgentStore::SetLocalKey(std::string key, std::string value) {
  absl::MutexLock lock(&mu_);
  local_keys_[std::move(key)] = std::move(value);
}

std::shared_ptr<Store> AgentStore::CurrentStore() {
  absl::MutexLock lock(&mu_);
  return store_;
}

AgentStore::Round AgentStore::CurrentRound() {
  absl::MutexLock lock(&mu_);
  return Round{store_, cache_};
}

AgentStore::Stats AgentStore::stats() const {
  const int64_t push_waiters = static_cast<int64_t>(queues_.waiters());  // Not under mu_: queues_ has its own.
  absl::MutexLock lock(&mu_);
  Stats s = stats_;
  if (cache_ != nullptr) s.cache = cache_->stats();
  s.push_waiters = push_waiters;
  s.open = open_;
  s.buffered_bytes = buffered_;
  s.folded_bytes = folded_bytes_->load();
  s.waits = waits_;
  return s;
}

void AgentStore::Log(const std::string& line) {
  if (o_.log) o_.log(line);
}

void AgentStore::ReapLocked() {
  for (auto it = conns_.begin(); it != conns_.end();) {
    if ((*it)->done.load()) {
      if ((*it)->reader.joinable()) (*it)->reader.join();
      it = conns_.erase(it);
    } else {
      ++it;
    }
  }
}

void AgentStore::AcceptLoop() {
  for (;;) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_fd_[0], POLLIN, 0}};
    int n = ::poll(fds, 2, 1000);
    absl::MutexLock lock(&mu_);
    ReapLocked();
    if (stopping_) return;
    if (n <= 0 || !(fds[0].revents & POLLIN)) continue;
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    if (open_ >= o_.max_connections) {
      ++stats_.refused;
      std::string peer = PeerName(fd);
      mu_.Unlock();
      Log(absl::StrCat("agent store: closed a connection from ", peer, ": ", o_.max_connections,
                       " are open (agent_store_max_connections)"));
      ::close(fd);  // After the log line: whoever sees the close finds it logged.
      mu_.Lock();
      continue;
    }
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    ++stats_.accepted;
    ++open_;
    auto c = std::make_shared<Conn>(fd);
    conns_.push_back(c);
    c->reader = std::thread([this, c] { Serve(c); });
  }
}

void AgentStore::Serve(const std::shared_ptr<Conn>& c) {
  RequestParser parser(o_.limits);
  std::string buf(64 * 1024, '\0');
  bool open = true;
  int64_t held = 0;  // This connection's share of buffered_.
  auto hold = [&](int64_t now) {
    absl::MutexLock lock(&mu_);
    buffered_ += now - held;
    held = now;
  };
  while (open) {
    absl::StatusOr<std::optional<Request>> next = parser.Next();
    hold(static_cast<int64_t>(parser.buffered()));
    if (!next.ok()) {
      Log(absl::StrCat("agent store: closed the connection from ", c->peer, ": ", next.status().message()));
      absl::MutexLock lock(&mu_);
      ++stats_.closed_on_error;
      break;
    }
    if (next->has_value()) {
      open = Handle(c, std::move(**next));
      continue;
    }
    ssize_t n = ::recv(c->fd, buf.data(), buf.size(), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    {
      absl::MutexLock lock(&mu_);
      if (buffered_ + n > o_.max_buffered_bytes) {
        ++stats_.closed_on_error;
        mu_.Unlock();
        Log(absl::StrCat("agent store: closed the connection from ", c->peer, ": the requests buffered on all ",
                         "connections would pass ", o_.max_buffered_bytes,
                         " bytes (agent_store_max_buffered_bytes)"));
        mu_.Lock();
        break;
      }
    }
    parser.Feed(absl::string_view(buf.data(), static_cast<size_t>(n)));
    hold(static_cast<int64_t>(parser.buffered()));
  }
  hold(0);
  {
    absl::MutexLock lock(&c->write_mu);
    c->closed = true;
  }
  {
    absl::MutexLock lock(&mu_);
    --open_;
  }
  ::shutdown(c->fd, SHUT_RDWR);
  for (Conn::Waiter& w : c->waiters) {
    w.canceled->store(true);
    if (w.thread.joinable()) w.thread.join();
  }
  c->waiters.clear();
  c->done.store(true);
}

absl::StatusOr<std::string> AgentStore::QueueRequest(const Request& r) {
  std::string reply;
  switch (r.op) {
    case Op::kQueuePush:
      if (absl::Status s = queues_.Push(r.keys[0], r.values[0]); !s.ok()) return s;
      return reply;
    case Op::kQueuePop: {
      absl::StatusOr<std::pair<int64_t, std::optional<std::string>>> popped = queues_.Pop(r.keys[0]);
      if (!popped.ok()) return popped.status();
      AppendI64(&reply, popped->first);
      if (popped->second) AppendBytes(&reply, *popped->second);
      return reply;
    }
    case Op::kQueueLen: {
      absl::StatusOr<int64_t> n = queues_.Length(r.keys[0]);
      if (!n.ok()) return n.status();
      AppendI64(&reply, *n);
      return reply;
    }
    default: {  // CHECK: a key is ready when set or when its queue holds an item.
      absl::StatusOr<std::vector<std::string>> rest = queues_.NotHolding(r.keys);
      if (!rest.ok()) return rest.status();
      Request check = r;
      check.keys = std::move(*rest);
      return Execute(*CurrentStore(), check);
    }
  }
}

ReadCache::Value AgentStore::ReadThrough(Store& store, ReadCache& cache, const std::string& key) {
  return cache.Read(key, [&]() -> ReadCache::Value {
    absl::StatusOr<std::string> v = store.Get(key, absl::ZeroDuration());
    if (v.ok()) return std::optional<std::string>(std::move(*v));
    if (absl::IsNotFound(v.status())) return std::optional<std::string>();
    return v.status();
  });
}

std::optional<bool> AgentStore::AnswerCached(const std::shared_ptr<Conn>& c, const Request& r, ReadCache& cache) {
  std::string reply;
  switch (r.op) {
    case Op::kGet: {
      std::optional<std::string> v = cache.Get(r.keys[0]);
      if (!v) return std::nullopt;
      AppendBytes(&reply, *v);
      break;
    }
    case Op::kMultiGet:
    case Op::kCheck:
    case Op::kWait: {
      // A key held is set (a queue of its name makes no difference to a
      // CHECK or a WAIT then).
      if (r.keys.empty()) return std::nullopt;
      std::optional<std::vector<std::string>> all = cache.GetAll(r.keys);
      if (!all) return std::nullopt;
      if (r.op == Op::kMultiGet) {
        for (const std::string& v : *all) AppendBytes(&reply, v);
      } else {
        AppendU8(&reply, r.op == Op::kCheck ? kReady : kStopWaiting);
      }
      break;
    }
    default:
      return std::nullopt;
  }
  {
    absl::MutexLock lock(&mu_);
    ++stats_.cached_reads;
  }
  return c->Write(reply);
}

std::optional<bool> AgentStore::AnswerFolded(const std::shared_ptr<Conn>& c, const Request& r) {
  std::optional<Conn::Folded> folded;
  {
    absl::MutexLock lock(&c->write_mu);
    folded.swap(c->folded);
  }
  const Round round = CurrentRound();
  if (!folded || r.op != Op::kGet || folded->key != r.keys[0] || folded->store != round.store ||
      folded->cache != round.cache || folded->cache->Generation(r.keys[0]) != folded->generation) {
    return std::nullopt;
  }
  {
    absl::MutexLock lock(&mu_);
    ++stats_.folded_gets;
  }
  std::string reply;
  AppendBytes(&reply, folded->value);
  return c->Write(reply);
}

bool AgentStore::Handle(const std::shared_ptr<Conn>& c, Request r) {
  {
    absl::MutexLock lock(&mu_);
    ++stats_.requests;
  }
  if (std::optional<bool> open = AnswerFolded(c, r)) return *open;
  switch (r.op) {
    case Op::kValidate: return true;
    case Op::kBarrier: return Barrier(c, r);
    case Op::kCancelWait: {
      absl::MutexLock lock(&c->write_mu);
      for (Conn::Waiter& w : c->waiters) w.canceled->store(true);
      std::string reply;
      AppendU8(&reply, kWaitCanceled);
      return c->WriteLocked(reply);
    }
    default: break;
  }
  if (r.op == Op::kGet) {
    std::optional<std::string> local;
    {
      absl::MutexLock lock(&mu_);
      auto it = local_keys_.find(r.keys[0]);
      if (it != local_keys_.end()) local = it->second;
    }
    if (local) {
      std::string reply;
      AppendBytes(&reply, *local);
      return c->Write(reply);
    }
  }
  const Round round = CurrentRound();
  if (r.op == Op::kWait) {
    if (!AdmitWait(c, "WAIT")) return false;  // Cancels the connection's WAIT in progress, if any.
    if (round.cache != nullptr) {
      if (std::optional<bool> open = AnswerCached(c, r, *round.cache)) {
        EndWait();
        return *open;
      }
    }
    return StartWait(c, round, std::move(r.keys));
  }
  if (round.cache != nullptr) {
    if (std::optional<bool> open = AnswerCached(c, r, *round.cache)) return *open;
  }
  absl::StatusOr<std::string> reply = Reply(r, round);
  if (!reply.ok()) {
    Log(absl::StrCat("agent store: ", OpName(r.op), r.keys.empty() ? "" : absl::StrCat(" '", r.keys[0].substr(0, 128), "'"),
                     " from ", c->peer, ": ", reply.status().message(), "; closing the connection"));
    absl::MutexLock lock(&mu_);
    ++stats_.closed_on_error;
    return false;
  }
  return reply->empty() || c->Write(*reply);
}

absl::StatusOr<std::string> AgentStore::Reply(const Request& r, const Round& round) {
  const std::shared_ptr<Store>& store = round.store;
  const bool queue_request = r.op == Op::kQueuePush || r.op == Op::kQueuePop || r.op == Op::kQueueLen ||
                             (r.op == Op::kCheck && queues_.AnyQueue(r.keys));
  std::string reply;
  if (queue_request) {
    if (store == nullptr) return absl::UnavailableError("no round has started on this node yet");
    return QueueRequest(r);
  }
  if (!Executes(r.op)) return NotServed(r.op);
  if (r.op == Op::kPing) {
    AppendU32(&reply, r.nonce);
    return reply;
  }
  if (store == nullptr) return absl::UnavailableError("no round has started on this node yet");
  if (r.op == Op::kGet) {
    ReadCache::Value v = ReadThrough(*store, *round.cache, r.keys[0]);
    if (!v.ok()) return v.status();
    AppendBytes(&reply, v->value_or(std::string()));  // c10d: an absent key's GET (its client waited first) is empty.
    return reply;
  }
  // A write drops its keys' values from the read cache when it is sent and
  // when it is answered (read_cache.h).
  const bool write = Writes(r.op);
  if (write) round.cache->WriteSent(r.keys);
  absl::StatusOr<std::string> executed = Execute(*store, r, o_.max_listed_keys);
  if (write) round.cache->WriteAnswered(r.keys, executed.ok());
  if (executed.ok() && (r.op == Op::kSet || r.op == Op::kMultiSet || r.op == Op::kAdd || r.op == Op::kAppend)) {
    queues_.KeysSet(r.keys);  // A WAIT on a queue's name is also one on the key.
  }
  return executed;
}

}  // namespace meshrun::agent::tcpstore
