#include <catch2/catch.hpp>

#include "agent/worker_env.h"

using namespace meshrun::agent;

namespace {
std::map<std::string, std::string> AsMap(const std::vector<std::string>& env) {
  std::map<std::string, std::string> m;
  for (const auto& kv : env) m[kv.substr(0, kv.find('='))] = kv.substr(kv.find('=') + 1);
  return m;
}
}  // namespace

TEST_CASE("worker environment follows torchrun's contract", "[env]") {
  WorkerEnvInput in;
  in.assignment.round = 2;
  in.assignment.node_rank = 1;
  in.assignment.node_count = 2;
  in.assignment.rank_base = 4;
  in.assignment.world_size = 8;
  in.assignment.master_addr = "10.0.0.1";
  in.assignment.master_port = 29500;
  in.assignment.restart_count = 1;
  in.assignment.max_restarts = 3;
  in.assignment.role_rank_base = 4;
  in.assignment.role_world_size = 8;
  in.local_rank = 3;
  in.nproc = 4;
  in.run_id = "job";
  in.store_endpoint = "unix:/tmp/meshrun-store-Ab12Cd/store.sock";
  in.error_file = "/tmp/e.json";
  in.signals_to_handle = "SIGTERM,SIGUSR1";
  auto env = AsMap(BuildWorkerEnv({"PATH=/bin", "RANK=99", "TORCH_NCCL_ASYNC_ERROR_HANDLING=3"}, in));
  CHECK(env["PATH"] == "/bin");
  CHECK(env["RANK"] == "7");
  CHECK(env["LOCAL_RANK"] == "3");
  CHECK(env["WORLD_SIZE"] == "8");
  CHECK(env["LOCAL_WORLD_SIZE"] == "4");
  CHECK(env["GROUP_RANK"] == "1");
  CHECK(env["GROUP_WORLD_SIZE"] == "2");
  CHECK(env["ROLE_RANK"] == "7");
  CHECK(env["ROLE_NAME"] == "default");
  CHECK(env["ROLE_WORLD_SIZE"] == "8");
  CHECK(env["MASTER_ADDR"] == "10.0.0.1");
  CHECK(env["MASTER_PORT"] == "29500");
  CHECK(env["TORCHELASTIC_RESTART_COUNT"] == "1");
  CHECK(env["TORCHELASTIC_MAX_RESTARTS"] == "3");
  CHECK(env["TORCHELASTIC_SIGNALS_TO_HANDLE"] == "SIGTERM,SIGUSR1");
  CHECK(env["TORCHELASTIC_RUN_ID"] == "job");
  CHECK(env["TORCHELASTIC_USE_AGENT_STORE"] == "True");  // torchrun 2.x's agent store.
  CHECK(env["TORCHELASTIC_ERROR_FILE"] == "/tmp/e.json");
  CHECK(env["OMP_NUM_THREADS"] == "1");
  CHECK(env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "3");  // Kept when set.
  CHECK(env["NCCL_ASYNC_ERROR_HANDLING"] == "3");  // Follows the user's TORCH_ value.
  CHECK(env["MESHRUN_ROUND"] == "2");
  CHECK(env["MESHRUN_STORE_ENDPOINT"] == "unix:/tmp/meshrun-store-Ab12Cd/store.sock");
  CHECK(env.count("MESHRUN_TOKEN") == 0);
  CHECK(env.count("TORCHFT_LIGHTHOUSE") == 0);  // None given (rdzv_conf lighthouse=0).
  CHECK(env.count("MESHRUN_LIGHTHOUSE_RUN_ID") == 0);
  in.agent_store = false;  // rdzv_conf agent_store=0: worker rank 0 hosts PyTorch's TCPStore.
  in.torchft_lighthouse = "http://127.0.0.1:40123";
  in.lighthouse_run_id = "job";
  auto off = AsMap(BuildWorkerEnv({}, in));
  CHECK(off["MESHRUN_LIGHTHOUSE_RUN_ID"] == "job");
  CHECK(off["TORCHELASTIC_USE_AGENT_STORE"] == "False");
  CHECK(off["TORCHFT_LIGHTHOUSE"] == "http://127.0.0.1:40123");  // The node's lighthouse endpoint.
}

TEST_CASE("a lone NCCL_ASYNC_ERROR_HANDLING carries over to the TORCH_ name", "[env]") {
  WorkerEnvInput in;
  auto env = AsMap(BuildWorkerEnv({"NCCL_ASYNC_ERROR_HANDLING=0"}, in));
  CHECK(env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "0");
  CHECK(env["NCCL_ASYNC_ERROR_HANDLING"] == "0");
  auto unset = AsMap(BuildWorkerEnv({}, in));
  CHECK(unset["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1");
  CHECK(unset["NCCL_ASYNC_ERROR_HANDLING"] == "1");
}

TEST_CASE("OMP_NUM_THREADS is left alone for one worker or when set", "[env]") {
  WorkerEnvInput in;
  in.nproc = 1;
  CHECK(AsMap(BuildWorkerEnv({}, in)).count("OMP_NUM_THREADS") == 0);
  in.nproc = 8;
  CHECK(AsMap(BuildWorkerEnv({"OMP_NUM_THREADS=4"}, in))["OMP_NUM_THREADS"] == "4");
}

TEST_CASE("${local_rank} is substituted in arguments", "[env]") {
  auto args = SubstituteLocalRank({"--out=/d/${local_rank}.log", "x", "${local_rank}${local_rank}"}, 5);
  CHECK(args == std::vector<std::string>{"--out=/d/5.log", "x", "55"});
}

TEST_CASE("the token, the token file and the TLS files stay with the agent", "[env]") {
  WorkerEnvInput in;
  in.store_endpoint = "unix:/tmp/meshrun-store-Ab12Cd/store.sock";
  auto env = AsMap(BuildWorkerEnv({"MESHRUN_TOKEN=secret", "MESHRUN_TOKEN_FILE=/etc/meshrun/token",
                                   "MESHRUN_TLS_CERT=/c.pem", "MESHRUN_TLS_KEY=/k.pem", "MESHRUN_TLS_CA=/ca.pem",
                                   "HOME=/home/u"},
                                  in));
  for (const char* secret : {"MESHRUN_TOKEN", "MESHRUN_TOKEN_FILE", "MESHRUN_TLS_CERT", "MESHRUN_TLS_KEY",
                             "MESHRUN_TLS_CA"}) {
    INFO(secret);
    CHECK(env.count(secret) == 0);
  }
  CHECK(env["HOME"] == "/home/u");
  CHECK(env["MESHRUN_STORE_ENDPOINT"] == "unix:/tmp/meshrun-store-Ab12Cd/store.sock");
}
