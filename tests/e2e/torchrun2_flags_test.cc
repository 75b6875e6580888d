// torchrun 2.x's newer flags end to end through the real meshrun binary:
// the log line prefix template, --run-path, --virtual-local-rank, the
// duplicate-output filters, and the flags accepted with a note.
#include <catch2/catch.hpp>

#include <filesystem>

#include "tests/e2e/e2e_util.h"
#include "tests/support/skip.h"

using namespace meshrun::testing;

TEST_CASE("log-line-prefix-template with tee=3 prefixes lines as torchrun: [default-0]:", "[e2e][torchrun2]") {
  std::string dir = TempDir();
  std::string script = WriteScript(dir, "hello.sh", "echo \"hello from $RANK\"\necho \"err from $RANK\" >&2");
  RunResult r = RunCommand({MeshrunBinary(), "--standalone", "--nproc_per_node=2",
                            "--log-line-prefix-template=[${role_name}-${rank}]:", "--tee=3", script}, {}, 30);
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(Contains(r.out, "[default-0]:hello from 0\n"));
  CHECK(Contains(r.out, "[default-1]:hello from 1\n"));
  CHECK(Contains(r.err, "[default-1]:err from 1\n"));
  CHECK_FALSE(Contains(r.out, "[n0:r0]"));

  // The environment variable, as torchrun reads it; ${local_rank} too.
  RunResult e = RunCommand({MeshrunBinary(), "--standalone", "--nproc_per_node=2", "--role=trainer", script},
                           {{"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", "<${role_name}${local_rank}> "}}, 30);
  INFO(e.out << e.err);
  CHECK(Contains(e.out, "<trainer1> hello from 1\n"));

  RunResult bad = RunCommand({MeshrunBinary(), "--log-line-prefix-template=[${host}]", script}, {}, 10);
  CHECK(bad.exit_code == 2);
  CHECK(Contains(bad.err, "unknown macro '${host}'; allowed: ${role_name}, ${rank}, ${local_rank}"));
}

TEST_CASE("run-path runs a file as a Python script whatever its name, even with no-python", "[e2e][torchrun2]") {
  std::string dir = TempDir();
  std::string prog = dir + "/train";  // No .py, not executable.
  std::ofstream(prog) << "import sys\nprint('PY', sys.version_info[0], sys.argv[1:])\n";
  RunResult r = RunCommand({MeshrunBinary(), "--standalone", "--no-python", "--run-path", prog, "--lr=1"},
                           {{"PYTHON_EXEC", "/usr/bin/python3"}}, 30);
  INFO(r.out << r.err);
  CHECK(r.exit_code == 0);
  CHECK(Contains(r.out, "PY 3 ['--lr=1']"));
  // Without it, --no-python runs the file itself, which is not executable.
  RunResult direct = RunCommand({MeshrunBinary(), "--standalone", "--no-python", prog}, {}, 30);
  CHECK(direct.exit_code == 127);
}

TEST_CASE("virtual-local-rank: LOCAL_RANK=0 and one device in CUDA_VISIBLE_DEVICES per worker", "[e2e][torchrun2]") {
  std::string dir = TempDir();
  std::string script = WriteScript(dir, "v.sh", "echo \"V rank=$RANK local=$LOCAL_RANK cvd=$CUDA_VISIBLE_DEVICES\"");
  RunResult r = RunCommand({MeshrunBinary(), "--standalone", "--nproc_per_node=3", "--virtual-local-rank", script},
                           {{"CUDA_VISIBLE_DEVICES", "<unset>"}}, 30);
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(Contains(r.out, "V rank=0 local=0 cvd=0\n"));
  CHECK(Contains(r.out, "V rank=1 local=0 cvd=1\n"));
  CHECK(Contains(r.out, "V rank=2 local=0 cvd=2\n"));

  RunResult listed = RunCommand({MeshrunBinary(), "--standalone", "--nproc_per_node=3", "--virtual_local_rank", script},
                                {{"CUDA_VISIBLE_DEVICES", "4,6,7"}}, 30);
  INFO(listed.out << listed.err);
  CHECK(Contains(listed.out, "V rank=0 local=0 cvd=4\n"));
  CHECK(Contains(listed.out, "V rank=1 local=0 cvd=6\n"));
  CHECK(Contains(listed.out, "V rank=2 local=0 cvd=7\n"));

  RunResult plain = RunCommand({MeshrunBinary(), "--standalone", "--nproc_per_node=2", script},
                               {{"CUDA_VISIBLE_DEVICES", "4,6"}}, 30);
  CHECK(Contains(plain.out, "V rank=1 local=1 cvd=4,6\n"));

  RunResult short_list = RunCommand({MeshrunBinary(), "--nproc_per_node=3", "--virtual-local-rank", script},
                                    {{"CUDA_VISIBLE_DEVICES", "4"}}, 10);
  CHECK(short_list.exit_code == 2);
  CHECK(Contains(short_list.err, "CUDA_VISIBLE_DEVICES=4 lists 1 devices for --nproc_per_node=3"));
}

TEST_CASE("duplicate-std*-filters copy matching lines to filtered_std*.log of the attempt", "[e2e][torchrun2]") {
  std::string dir = TempDir();
  std::string logs = dir + "/logs";
  std::string script = WriteScript(dir, "d.sh", "echo \"loss 0.5 at $RANK\"\necho \"other\"\necho 'WARN x,y' >&2");
  RunResult r = RunCommand({MeshrunBinary(), "--standalone", "--nproc_per_node=2", "--log_dir=" + logs,
                            "--duplicate-stdout-filters=loss,nothing", "--duplicate_stderr_filters=x,,y", script},
                           {}, 30);
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  std::string attempt;
  for (const auto& e : std::filesystem::recursive_directory_iterator(logs)) {
    if (e.path().filename() == "attempt_0") attempt = e.path().string();
  }
  REQUIRE_FALSE(attempt.empty());
  std::string out = ReadFile(attempt + "/filtered_stdout.log");
  CHECK(Contains(out, "[n0:r0] loss 0.5 at 0\n"));
  CHECK(Contains(out, "[n0:r1] loss 0.5 at 1\n"));
  CHECK_FALSE(Contains(out, "other"));
  CHECK(CountOccurrences(ReadFile(attempt + "/filtered_stderr.log"), "WARN x,y") == 2);
}

TEST_CASE("logs-specs and event-log-handler are accepted with a one-line note", "[e2e][torchrun2]") {
  RunResult r = RunCommand({MeshrunBinary(), "--standalone", "--logs-specs=my.Specs", "--event_log_handler=console",
                            "/bin/true"}, {}, 30);
  INFO(r.err);
  CHECK(r.exit_code == 0);
  CHECK(Contains(r.err, "meshrun: note: --logs_specs=my.Specs is ignored"));
  CHECK(Contains(r.err, "meshrun: note: --event_log_handler=console is ignored"));
}

TEST_CASE("numa-binding: a bad mode exits 2", "[e2e][torchrun2]") {
  RunResult bad = RunCommand({MeshrunBinary(), "--numa-binding=numa", "/bin/true"}, {}, 10);
  CHECK(bad.exit_code == 2);
  CHECK(Contains(bad.err, "meshrun: error: --numa_binding=numa: must be node, socket, exclusive or core-complex"));
}

TEST_CASE("numa-binding: a machine without GPUs gets a clear error", "[e2e][torchrun2]") {
  if (std::filesystem::exists("/proc/driver/nvidia/gpus")) MESHRUN_SKIP("this machine has NVIDIA GPUs");
  RunResult r = RunCommand({MeshrunBinary(), "--standalone", "--nproc_per_node=2", "--numa_binding=socket", "/bin/true"},
                           {}, 10);
  CHECK(r.exit_code == 2);
  CHECK(Contains(r.err, "meshrun: error: --numa_binding=socket: no NVIDIA GPU on this machine"));
  CHECK(CountLines(r.err, "") == 1);
}
