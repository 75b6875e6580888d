// End-to-end: the real meshrun binary runs real worker processes.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <signal.h>
#include <unistd.h>

#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "tests/e2e/e2e_util.h"

using namespace meshrun::testing;

TEST_CASE("standalone: every worker gets contiguous ranks and one world", "[e2e]") {
  std::string dir = TempDir();
  std::string script = WriteScript(dir, "env.sh",
      "echo \"W $RANK $LOCAL_RANK $WORLD_SIZE $LOCAL_WORLD_SIZE $GROUP_RANK $MASTER_ADDR:$MASTER_PORT "
      "$TORCHELASTIC_RUN_ID $MESHRUN_ROUND $1\"");
  RunResult r = RunCommand({MeshrunBinary(), "--standalone", "--nproc-per-node=4", script, "arg-${local_rank}"}, {}, 60);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(CountLines(r.out, "W ") == 4);
  std::set<std::string> masters;
  for (int i = 0; i < 4; ++i) {
    std::string prefix = "W " + std::to_string(i) + " " + std::to_string(i) + " 4 4 0 ";
    CHECK(Contains(r.out, prefix));
    CHECK(Contains(r.out, "arg-" + std::to_string(i)));
  }
  CHECK(Contains(r.out, " 127.0.0.1:"));
}

TEST_CASE("a failing worker stops the job with its exit code and a summary", "[e2e]") {
  std::string dir = TempDir();
  std::string script = WriteScript(dir, "fail.sh", "[ \"$LOCAL_RANK\" = 2 ] && exit 3\nexec sleep 30");
  RunResult r = RunCommand({MeshrunBinary(), "--standalone", "--nproc_per_node=4", script}, {}, 60);
  CHECK(r.exit_code == 3);
  CHECK(r.seconds < 10);
  CHECK(Contains(r.err, "rank      : 2 (local_rank: 2)"));
  CHECK(Contains(r.err, "exitcode  : 3"));
}

TEST_CASE("the failure summary counts the other workers as stopped or exited, and no empty log folder is left",
          "[e2e]") {
  std::string dir = TempDir();
  std::string tmp = dir + "/tmp";
  REQUIRE(mkdir(tmp.c_str(), 0700) == 0);
  const std::string mine = tmp + "/meshrun-" + std::to_string(getuid());
  auto folders = [&] {
    int n = 0;
    if (!std::filesystem::exists(mine)) return n;
    for (const auto& e : std::filesystem::directory_iterator(mine)) n += e.is_directory() ? 1 : 0;
    return n;
  };
  SECTION("one worker fails while three run: 3 stopped by meshrun; no error file, no folder left") {
    std::string script = WriteScript(dir, "fail.sh", "[ \"$LOCAL_RANK\" = 2 ] && exit 3\nexec sleep 30");
    RunResult r = RunCommand({MeshrunBinary(), "--standalone", "--nproc_per_node=4", script}, {{"TMPDIR", tmp}}, 60);
    INFO(r.err);
    CHECK(r.exit_code == 3);
    CHECK(Contains(r.err, "): 3 stopped by meshrun\n"));
    CHECK(folders() == 0);
    CHECK_FALSE(std::filesystem::exists(mine));  // Not even the empty per-user folder.
  }
  SECTION("a job that succeeds leaves no folder, not even the per-user one") {
    RunResult r = RunCommand({MeshrunBinary(), "--standalone", "--nproc_per_node=2", "/bin/true"}, {{"TMPDIR", tmp}}, 60);
    INFO(r.err);
    CHECK(r.exit_code == 0);
    CHECK_FALSE(std::filesystem::exists(mine));
  }
  SECTION("the other worker had exited 0: none running; the error file is kept, empty attempts are not") {
    std::string go = dir + "/go";
    std::string script = WriteScript(dir, "fail.sh",
                                     "[ \"$LOCAL_RANK\" = 0 ] && exit 0\n"
                                     "while [ ! -e " + go + " ]; do sleep 0.05; done\n"
                                     "echo '{\"message\": \"boom\"}' > \"$TORCHELASTIC_ERROR_FILE\"; exit 4");
    // Rank 0 exits at once; rank 1 fails once meshrun has seen rank 0 go.
    NodeProc n = StartNode(dir, "n", {"--standalone", "--nproc_per_node=2", "--max_restarts=0", script},
                           {{"TMPDIR", tmp}, {"MESHRUN_LOG_LEVEL", "debug"}});
    REQUIRE(WaitFor([&] { return Contains(n.err(), "local rank 0 (rank 0) exited 0; 1 still running"); }, 30));
    std::ofstream(go) << "1";
    CHECK(WaitCommand(n.pid, 60) == 4);
    INFO(n.err());
    CHECK(Contains(n.err(), "): none running (1 had exited 0)\n"));
    REQUIRE(folders() == 1);
    for (const auto& run : std::filesystem::directory_iterator(mine)) {
      CHECK(std::filesystem::exists(run.path() / "attempt_0" / "rank_1.error.json"));
    }
  }
}

TEST_CASE("an elastic job's progress line counts nodes against --nnodes MIN:MAX", "[e2e]") {
  const int port = FreePort();
  RunResult r = RunCommand({MeshrunBinary(), "--nnodes=1:2", "--rdzv_endpoint=127.0.0.1:" + std::to_string(port),
                            "--rdzv_id=elastic", "--rdzv_conf=last_call_timeout=1.5", "/bin/true"},
                           {}, 60);
  INFO(r.err);
  CHECK(r.exit_code == 0);
  CHECK(Contains(r.err, "meshrun: 1 node (of --nnodes=1:2) joined run 'elastic', waiting up to "));
  CHECK_FALSE(Contains(r.err, "1/1:2"));
}

TEST_CASE("a worker killed by SIGSEGV gives exit 139 and names the signal", "[e2e]") {
  std::string dir = TempDir();
  std::string script = WriteScript(dir, "segv.sh", "[ \"$LOCAL_RANK\" = 1 ] && kill -SEGV $$\nexec sleep 30");
  RunResult r = RunCommand({MeshrunBinary(), "--standalone", "--nproc_per_node=2", script}, {}, 60);
  CHECK(r.exit_code == 139);
  CHECK(Contains(r.err, "SIGSEGV"));
  CHECK(Contains(r.err, "exitcode  : 139 (signal SIGSEGV)"));
  CHECK_FALSE(Contains(r.err, "exitcode  : -11"));
}

TEST_CASE("a program that does not exist is a clear error at once", "[e2e]") {
  RunResult r = RunCommand({MeshrunBinary(), "--standalone", "--nproc_per_node=2", "no-such-program-xyz"}, {}, 30);
  CHECK(r.exit_code == 127);
  CHECK(r.seconds < 5);
  CHECK(CountLines(r.err, "no-such-program-xyz") == 1);
  RunResult py = RunCommand({MeshrunBinary(), "--standalone", "missing_script.py"}, {}, 30);
  CHECK(py.exit_code == 127);
  CHECK(Contains(py.err, "missing_script.py"));
}

TEST_CASE("bad flag values give one line naming flag and value, exit 2", "[e2e]") {
  struct Case { std::vector<std::string> args; std::string needle; };
  std::vector<Case> cases = {
      {{"--nproc_per_node=zero", "/bin/true"}, "--nproc_per_node=zero"},
      {{"--nnodes=3:1", "/bin/true"}, "--nnodes=3:1"},
      {{"--max_restarts=-1", "/bin/true"}, "--max_restarts=-1"},
      {{"--rdzv_backend=etcd", "/bin/true"}, "--rdzv_backend=etcd: meshrun's agents do not use etcd themselves"},
      {{"--rdzv_backend=etcd-v2", "--rdzv_endpoint=e1:2379", "--rdzv_id=j", "--nnodes=2", "/bin/true"},
       "run `meshrun server --state etcd://e1:2379` on 2 or 3 hosts and give every node --rdzv_endpoint="},
      {{"--rdzv_backend=zookeeper", "/bin/true"}, "--rdzv_backend=zookeeper: allowed: meshrun, c10d (synonym), static"},
      {{"--nproc_per=2", "/bin/true"}, "unknown flag '--nproc_per=2' (did you mean --nproc_per_node?)"},
      {{"--nproc-per=2", "/bin/true"}, "unknown flag '--nproc-per=2' (did you mean --nproc-per-node?)"},
      {{"--rdzv_conf=bogus=1", "--nnodes=2", "--rdzv_endpoint=127.0.0.1:1", "/bin/true"}, "bogus"},
      {{"--rdzv_endpoint=fe80::1:29400", "--nnodes=2", "/bin/true"}, "ambiguous"},
      {{"--signals_to_handle=SIGNOPE", "/bin/true"}, "SIGNOPE"},
      {{"--nproc_per_nod=4", "/bin/true"}, "unknown flag '--nproc_per_nod=4' (did you mean --nproc_per_node?)"},
      {{"--rdzv_endpoint=http://h:29400", "--nnodes=2", "/bin/true"}, "a URL scheme ('http://') is not allowed"},
      {{"--rdzv_conf=join_timout=3", "--nnodes=2", "--rdzv_endpoint=127.0.0.1:1", "/bin/true"},
       "did you mean join_timeout?"},
      {{"--max_restarts=abc", "/bin/true"}, "--max_restarts=abc: must be an integer"},
      {{"--max-restarts=1.5", "/bin/true"}, "--max_restarts=1.5: must be an integer"},
      {{"--shutdown_timeout=x", "/bin/true"}, "--shutdown_timeout=x"},
      {{"--monitor-interval=-1", "/bin/true"}, "--monitor_interval=-1: must be a number of seconds > 0"},
      {{"--monitor_interval=soon", "/bin/true"}, "--monitor_interval=soon: must be a number"},
      {{"--nproc_per_node=2", "--local-ranks-filter=a", "/bin/true"},
       "--local_ranks_filter=a: 'a' is not an integer (a comma-separated list of local ranks, 0..1)"},
      {{"--role=", "/bin/echo", "hi"}, "--role=: empty value"},
      {{"--rdzv_backend=static", "--master_port=99999", "--nnodes=2", "/bin/true"}, "--master_port=99999"},
      {{}, "no program"},
  };
  for (const auto& c : cases) {
    std::vector<std::string> argv = {MeshrunBinary()};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    RunResult r = RunCommand(argv, {}, 30);
    INFO(r.err);
    CHECK(r.exit_code == 2);
    CHECK(CountLines(r.err, "") == 1);
    CHECK(Contains(r.err, c.needle));
  }
}

TEST_CASE("flags take PET_ environment defaults, explicit flags win", "[e2e]") {
  std::string dir = TempDir();
  std::string script = WriteScript(dir, "ws.sh", "echo \"WS $WORLD_SIZE\"");
  RunResult r = RunCommand({MeshrunBinary(), "--standalone", script}, {{"PET_NPROC_PER_NODE", "3"}}, 60);
  REQUIRE(r.exit_code == 0);
  CHECK(CountLines(r.out, "WS 3") == 3);
  RunResult r2 = RunCommand({MeshrunBinary(), "--standalone", "--nproc_per_node=2", script},
                            {{"PET_NPROC_PER_NODE", "3"}}, 60);
  REQUIRE(r2.exit_code == 0);
  CHECK(CountLines(r2.out, "WS 2") == 2);
}

TEST_CASE("max_restarts restarts every worker through the server (round 1)", "[e2e]") {
  std::string dir = TempDir();
  std::string script = WriteScript(dir, "flaky.sh",
      "echo \"R $RANK restart=$TORCHELASTIC_RESTART_COUNT round=$MESHRUN_ROUND\"\n"
      "[ \"$LOCAL_RANK\" = 1 ] && [ \"$TORCHELASTIC_RESTART_COUNT\" = 0 ] && exit 4\nexit 0");
  RunResult r = RunCommand({MeshrunBinary(), "--standalone", "--nproc_per_node=4", "--max_restarts=1", script}, {}, 60);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(CountLines(r.out, "restart=1 round=1") == 4);
  RunResult spent = RunCommand({MeshrunBinary(), "--standalone", "--nproc_per_node=2", "--max_restarts=0", script}, {}, 60);
  CHECK(spent.exit_code == 4);
}

TEST_CASE("two standalone jobs started together both succeed on different ports", "[e2e]") {
  std::string dir = TempDir();
  std::string script = WriteScript(dir, "port.sh", "echo \"P $MASTER_PORT $MESHRUN_STORE_ENDPOINT\"; sleep 0.3");
  RunResult a, b;
  std::thread ta([&] { a = RunCommand({MeshrunBinary(), "--standalone", "--nproc_per_node=2", script}, {}, 60); });
  std::thread tb([&] { b = RunCommand({MeshrunBinary(), "--standalone", "--nproc_per_node=2", script}, {}, 60); });
  ta.join();
  tb.join();
  REQUIRE(a.exit_code == 0);
  REQUIRE(b.exit_code == 0);
  std::string la = a.out.substr(0, a.out.find('\n'));
  std::string lb = b.out.substr(0, b.out.find('\n'));
  CHECK(la != lb);
}

TEST_CASE("SIGTERM to meshrun stops every worker and its grandchildren: exit 143", "[e2e]") {
  std::string dir = TempDir();
  std::string marker = dir + "/children";
  // Each worker leaves a grandchild behind in its process group.
  std::string script = WriteScript(dir, "tree.sh",
      "sleep 300 &\necho $! >> " + marker + "\ntrap 'exit 0' TERM\nwhile :; do sleep 0.1; done");
  pid_t pid = StartCommand({MeshrunBinary(), "--standalone", "--nproc_per_node=3", "--shutdown_timeout=2", script},
                           {}, dir + "/out", dir + "/err");
  for (int i = 0; i < 200 && CountLines(ReadFile(marker), "") < 3; ++i) usleep(20000);
  REQUIRE(CountLines(ReadFile(marker), "") == 3);
  kill(pid, SIGTERM);
  CHECK(WaitCommand(pid, 20) == 143);
  usleep(100000);
  std::string pids = ReadFile(marker);
  size_t pos = 0;
  while (pos < pids.size()) {
    size_t nl = pids.find('\n', pos);
    int grandchild = std::stoi(pids.substr(pos, nl - pos));
    // Gone, or a zombie waiting for init to reap it.
    std::string stat = ReadFile("/proc/" + std::to_string(grandchild) + "/stat");
    INFO("grandchild " << grandchild << " stat: " << stat);
    CHECK((stat.empty() || stat.find(") Z ") != std::string::npos));
    pos = nl + 1;
  }
}

TEST_CASE("each worker runs in a session of its own, as torchrun's do", "[e2e]") {
  std::string dir = TempDir();
  // The worker (sh, under meshrun-worker-shim, under meshrun) prints its
  // session and meshrun's, read from /proc (field 6: session; 4: parent).
  std::string script = WriteScript(dir, "sid.sh",
      "shim=$PPID\nm=$(cut -d' ' -f4 /proc/$shim/stat)\n"
      "echo \"sid=$(cut -d' ' -f6 /proc/$$/stat) meshrun_sid=$(cut -d' ' -f6 /proc/$m/stat) end\"");
  RunResult r = RunCommand({MeshrunBinary(), "--standalone", "--nproc_per_node=3", script}, {}, 60);
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  std::set<std::string> sids;
  std::string meshrun_sid;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    const size_t s = line.find(" sid=");
    const size_t m = line.find(" meshrun_sid=");
    if (s == std::string::npos || m == std::string::npos) continue;
    sids.insert(line.substr(s + 5, m - s - 5));
    meshrun_sid = line.substr(m + 13, line.find(" end") - m - 13);
  }
  CHECK(CountLines(r.out, "meshrun_sid=") == 3);
  CHECK(sids.size() == 3);
  CHECK(std::to_string(getsid(0)) == meshrun_sid);
  CHECK(sids.count(meshrun_sid) == 0);
}

TEST_CASE("4 processes build a Gloo full mesh through the store and allreduce", "[e2e][gloo]") {
  RunResult r = RunCommand({MeshrunBinary(), "--standalone", "--nproc_per_node=4", GLOO_WORKER_BINARY}, {}, 120);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(CountLines(r.out, "sum=10 OK") == 4);
}

TEST_CASE("help groups flags and help-env lists every variable", "[e2e]") {
  RunResult h = RunCommand({MeshrunBinary(), "--help"}, {}, 10);
  CHECK(h.exit_code == 0);
  CHECK(Contains(h.out, "Rendezvous"));
  CHECK(Contains(h.out, "--nproc_per_node"));
  RunResult e = RunCommand({MeshrunBinary(), "--help-env"}, {}, 10);
  CHECK(e.exit_code == 0);
  for (const char* v : {"RANK", "LOCAL_RANK", "MASTER_ADDR", "TORCHELASTIC_ERROR_FILE", "MESHRUN_TOKEN",
                        "MESHRUN_STORE_ENDPOINT", "PET_"}) {
    CHECK(Contains(e.out, v));
  }
  RunResult v = RunCommand({MeshrunBinary(), "--version"}, {}, 10);
  CHECK(v.exit_code == 0);
  // The version, then the build: its commit (12 hex digits, "unknown" outside a git checkout) and UTC day.
  INFO(v.out);
  CHECK(std::regex_match(v.out, std::regex("meshrun [0-9]+\\.[0-9]+\\.[0-9]+\n"
                                           "commit ([0-9a-f]{12}(\\+dirty)?|unknown), built 20[0-9]{2}-[01][0-9]-[0-3][0-9]\n")));
}

TEST_CASE("monitor_interval and start_method are accepted with a note", "[e2e]") {
  RunResult r = RunCommand({MeshrunBinary(), "--standalone", "--monitor-interval=0.05", "--start_method=spawn",
                            "/bin/true"}, {}, 30);
  CHECK(r.exit_code == 0);
  CHECK(CountLines(r.err, "note:") == 2);
}

TEST_CASE("a worker's unfinished line (a prompt or a progress bar) shows before its newline, with its prefix",
          "[e2e]") {
  // torchrun passes such output through as it comes; meshrun writes whole lines, and an
  // unfinished one once its stream has been idle for OutputPump::kShowUnfinishedAfter.
  std::string dir = TempDir();
  auto wait_file = [&](const std::string& f) {  // At most 20 s.
    return "for i in $(seq 1000); do [ -e " + dir + "/" + f + " ] && break; sleep 0.02; done\n";
  };
  std::string script = WriteScript(dir, "p.sh",
      "printf '\\rstep 1'\n" + wait_file("go1") + "printf '\\rstep 2\\nEnter: '\n" + wait_file("go2") +
      "echo done");
  NodeProc n = StartNode(dir, "n", {"--standalone", "--nproc_per_node=1", script});
  auto touch = [&](const std::string& f) { std::ofstream(dir + "/" + f).put('\n'); };
  // The bar's first state before any newline; the prefix again after each '\r'.
  CHECK(WaitFor([&] { return Contains(n.out(), "[n0:r0] \r[n0:r0] step 1"); }, 15));
  touch("go1");
  CHECK(WaitFor([&] { return Contains(n.out(), "step 1\r[n0:r0] step 2\n[n0:r0] Enter: "); }, 15));
  touch("go2");
  n.code = WaitCommand(n.pid, 30);
  CHECK(n.code == 0);
  CHECK(n.out() == "[n0:r0] \r[n0:r0] step 1\r[n0:r0] step 2\n[n0:r0] Enter: done\n");
}

TEST_CASE("permanent failures: the error file's \"permanent\": true stops the job, code 0 turns the exit code off",
          "[e2e]") {
  std::string dir = TempDir();
  std::string by_file = WriteScript(dir, "ef.sh",
      "echo \"attempt $TORCHELASTIC_RESTART_COUNT\"\n"
      "printf '{\"message\": \"bad dataset path\", \"permanent\": true}' > \"$TORCHELASTIC_ERROR_FILE\"\nexit 1");
  RunResult r = RunCommand({MeshrunBinary(), "--standalone", "--max_restarts=2", by_file}, {}, 60);
  INFO(r.err);
  CHECK(r.exit_code == 1);
  CHECK(CountOccurrences(r.out, "attempt ") == 1);
  CHECK(Contains(r.err, "its error file says \"permanent\": true"));
  CHECK(Contains(r.err, "message   : bad dataset path"));

  // With the exit code turned off, 78 is an ordinary failure: restarts are used.
  std::string by_code = WriteScript(dir, "c.sh", "echo \"attempt $TORCHELASTIC_RESTART_COUNT\"\nexit 78");
  RunResult off = RunCommand({MeshrunBinary(), "--standalone", "--max_restarts=1",
                              "--permanent-failure-exit-code=0", by_code}, {}, 60);
  INFO(off.err);
  CHECK(off.exit_code == 78);
  CHECK(CountOccurrences(off.out, "attempt ") == 2);
  CHECK_FALSE(Contains(off.err, "permanent"));

  RunResult bad = RunCommand({MeshrunBinary(), "--permanent_failure_exit_code=300", by_code}, {}, 10);
  CHECK(bad.exit_code == 2);
  CHECK(Contains(bad.err, "--permanent_failure_exit_code=300: must be an exit code 1..255, or 0 for none"));
}
