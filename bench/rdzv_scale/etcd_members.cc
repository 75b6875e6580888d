#include "bench/rdzv_scale/etcd_members.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "agent/process.h"
#include "common/net.h"

extern char** environ;

namespace meshrun::bench {

absl::StatusOr<std::unique_ptr<EtcdMembers>> EtcdMembers::Start(const std::string& member_script,
                                                                const std::string& dir, int count) {
  if (access(member_script.c_str(), R_OK) != 0) {
    return absl::UnavailableError(absl::StrCat("no etcd member script at ", member_script));
  }
  auto m = std::unique_ptr<EtcdMembers>(new EtcdMembers());
  m->members_.resize(static_cast<size_t>(count));
  for (Member& mem : m->members_) {
    absl::StatusOr<int> c = FindFreePort("127.0.0.1");
    absl::StatusOr<int> p = FindFreePort("127.0.0.1");
    if (!c.ok() || !p.ok() || *c == *p) return absl::UnavailableError("no free ports for etcd");
    mem.client_port = *c;
    mem.peer_port = *p;
  }
  std::string cluster;
  for (int i = 0; i < count; ++i) {
    absl::StrAppend(&cluster, i ? "," : "", "m", i, "=http://127.0.0.1:", m->members_[i].peer_port);
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, "ETCD_", 5) != 0 || std::strncmp(*e, "ETCD_BINARY=", 12) == 0) env.emplace_back(*e);
  }
  for (int i = 0; i < count; ++i) {
    Member& mem = m->members_[i];
    const std::string data = absl::StrCat(dir, "/m", i);
    std::filesystem::remove_all(data, ec);
    const std::vector<std::string> argv = {"/bin/bash", member_script, "--name", absl::StrCat("m", i),
                                           "--data-dir", data, "--client", m->ClientAddress(i),
                                           "--peer", absl::StrCat("127.0.0.1:", mem.peer_port), "--cluster", cluster,
                                           "--token", absl::StrCat("rdzv-scale-", getpid()), "--fast",
                                           "--die-with-parent"};
    const std::string log_path = absl::StrCat(dir, "/m", i, ".log");
    int log = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (log < 0) return absl::UnavailableError(absl::StrCat("cannot write ", log_path, ": ", std::strerror(errno)));
    absl::StatusOr<agent::Child> child = agent::Spawn(argv, env, log, log);
    close(log);
    if (!child.ok()) return child.status();
    mem.pid = child->pid;
    if (absl::Status s = agent::CheckExec(*child, argv[0]); !s.ok()) return s;
  }
  return m;
}

EtcdMembers::~EtcdMembers() {
  for (int i = 0; i < size(); ++i) Kill(i);
}

std::string EtcdMembers::ClientAddress(int i) const {
  return absl::StrCat("127.0.0.1:", members_[static_cast<size_t>(i)].client_port);
}

std::string EtcdMembers::Url(int first, const std::string& prefix) const {
  std::string url = absl::StrCat("etcd://", ClientAddress(first));
  for (int i = 0; i < size(); ++i) {
    if (i != first) absl::StrAppend(&url, ",", ClientAddress(i));
  }
  return absl::StrCat(url, prefix);
}

void EtcdMembers::Kill(int i) {
  Member& m = members_[static_cast<size_t>(i)];
  if (m.pid <= 0) return;
  kill(-m.pid, SIGKILL);
  kill(m.pid, SIGKILL);
  int status = 0;
  waitpid(m.pid, &status, 0);
  m.pid = -1;
}

}  // namespace meshrun::bench
