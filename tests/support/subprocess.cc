#include "tests/support/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>

extern char** environ;

namespace meshrun::testing {
namespace {

std::vector<std::string> MergedEnv(const std::map<std::string, std::string>& extra) {
  std::map<std::string, std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv = *e;
    size_t eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (const auto& [k, v] : extra) {
    if (v == "<unset>") {
      env.erase(k);
    } else {
      env[k] = v;
    }
  }
  std::vector<std::string> out;
  for (const auto& [k, v] : env) out.push_back(k + "=" + v);
  return out;
}

pid_t SpawnWith(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
                int out_fd, int err_fd) {
  std::vector<std::string> envs = MergedEnv(env);
  std::vector<char*> cargv, cenv;
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  for (const auto& e : envs) cenv.push_back(const_cast<char*>(e.c_str()));
  cenv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, out_fd, 1);
  posix_spawn_file_actions_adddup2(&fa, err_fd, 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETPGROUP);
  pid_t pid = -1;
  if (posix_spawn(&pid, cargv[0], &fa, &attr, cargv.data(), cenv.data()) != 0) pid = -1;
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  return pid;
}

int CodeOf(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

}  // namespace

RunResult RunCommand(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
                     double timeout_s) {
  RunResult r;
  int out_pipe[2], err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0) return r;
  auto start = std::chrono::steady_clock::now();
  pid_t pid = SpawnWith(argv, env, out_pipe[1], err_pipe[1]);
  close(out_pipe[1]);
  close(err_pipe[1]);
  if (pid < 0) {
    close(out_pipe[0]);
    close(err_pipe[0]);
    r.err = "spawn failed: " + argv[0];
    return r;
  }
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  int open_fds = 2;
  auto deadline = start + std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  char buf[65536];
  while (open_fds > 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      r.timed_out = true;
      kill(-pid, SIGKILL);
      break;
    }
    int rc = poll(fds, 2, static_cast<int>(left.count()));
    if (rc <= 0) continue;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      ssize_t n = read(fds[i].fd, buf, sizeof(buf));
      if (n <= 0) {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      } else {
        (i == 0 ? r.out : r.err).append(buf, n);
      }
    }
  }
  for (auto& f : fds) {
    if (f.fd >= 0) close(f.fd);
  }
  int status = 0;
  if (r.timed_out) {
    waitpid(pid, &status, 0);
    r.exit_code = -1;
  } else {
    // Output closed; the process may still be exiting.
    for (;;) {
      pid_t w = waitpid(pid, &status, WNOHANG);
      if (w == pid) {
        r.exit_code = CodeOf(status);
        break;
      }
      if (std::chrono::steady_clock::now() > deadline) {
        r.timed_out = true;
        kill(-pid, SIGKILL);
        waitpid(pid, &status, 0);
        break;
      }
      usleep(2000);  // Test helper only: the process closed its output and is exiting.
    }
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

namespace {
// Commands started by StartCommand and not waited for yet.
std::mutex started_mu;
std::set<pid_t> started;

void Forget(pid_t pid) {
  std::lock_guard<std::mutex> lock(started_mu);
  started.erase(pid);
}
}  // namespace

pid_t StartCommand(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
                   const std::string& out_path, const std::string& err_path) {
  int out_fd = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  int err_fd = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  pid_t pid = SpawnWith(argv, env, out_fd, err_fd);
  close(out_fd);
  close(err_fd);
  if (pid > 0) {
    std::lock_guard<std::mutex> lock(started_mu);
    started.insert(pid);
  }
  return pid;
}

int WaitCommand(pid_t pid, double timeout_s) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  int status = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    pid_t w = waitpid(pid, &status, WNOHANG);
    if (w == pid) {
      Forget(pid);
      return CodeOf(status);
    }
    usleep(5000);  // Test helper only.
  }
  kill(-pid, SIGKILL);
  waitpid(pid, &status, 0);
  Forget(pid);
  return -1;
}

int KillStartedCommands() {
  std::set<pid_t> left;
  {
    std::lock_guard<std::mutex> lock(started_mu);
    left.swap(started);
  }
  int killed = 0;
  for (pid_t pid : left) {
    int status = 0;
    // Still our running child: its group goes. Exited: reaped here (its
    // group may live on, but its id may be reused: not killed). Reaped
    // elsewhere (ECHILD): nothing.
    if (waitpid(pid, &status, WNOHANG) != 0) continue;
    kill(-pid, SIGKILL);
    waitpid(pid, &status, 0);
    ++killed;
  }
  return killed;
}

std::string MeshrunBinary() { return MESHRUN_BINARY; }
std::string SourceDir() { return MESHRUN_SOURCE_DIR; }
std::string BinaryDir() { return MESHRUN_BINARY_DIR; }


std::string TorchPython() {
  static const std::string found = [] {
    const char* chosen = std::getenv("MESHRUN_TEST_PYTHON");
    for (const char* py : {chosen != nullptr && *chosen != '\0' ? chosen : "/usr/bin/python3"}) {
      if (access(py, X_OK) != 0) continue;
      RunResult r = RunCommand({py, "-c", "import torch.distributed"}, {}, 120);
      if (r.exit_code == 0) return std::string(py);
    }
    return std::string();
  }();
  return found;
}

std::string TorchMeshApi(const std::string& python) {
  RunResult r = RunCommand({python, "-c", "from torch.distributed.device_mesh import init_device_mesh"}, {}, 120);
  return r.exit_code == 0 ? "device_mesh" : "new_group";
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string>& TempDirs() {
  static std::vector<std::string> dirs;
  return dirs;
}

void RemoveTempDirs() {
  std::error_code ec;
  for (const auto& d : TempDirs()) std::filesystem::remove_all(d, ec);
}

std::string TempDir() {
  // The list must exist before the atexit handler is registered, so that it
  // is destroyed after the handler runs.
  static bool registered = (TempDirs(), std::atexit(RemoveTempDirs), true);
  (void)registered;
  std::string tmpl = (std::filesystem::temp_directory_path() / "meshrun-test-XXXXXX").string();
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  std::string dir = mkdtemp(buf.data());
  TempDirs().push_back(dir);
  return dir;
}

int CountLines(const std::string& text, const std::string& needle) {
  std::istringstream in(text);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) n += line.find(needle) != std::string::npos ? 1 : 0;
  return n;
}

}  // namespace meshrun::testing
