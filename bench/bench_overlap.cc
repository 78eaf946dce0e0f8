// Overlap benchmark: how much of the partition manager's communication hides behind compute.
//
// A synthetic model of `units` units of `numel` f32 elements each is trained on 2 forked ranks
// at stage 2 and stage 3. The per-unit compute is a sleep (what a GPU kernel looks like to the
// host: time passes, the CPU is free), the same before and after each unit's gradients. Three
// figures per stage, medians over the timed steps:
//   comm     the step with zero compute: fetch/release, gradient hand-off, reductions, step;
//   compute  the sleeps alone (units x (forward + backward) x per-unit time);
//   step     both together.
// The per-unit compute is set so that compute equals comm (balanced), the hardest case for
// overlap; the target is step <= 1.15 x max(compute, comm).
//
// Usage: bench_overlap [units] [numel] [steps]   (defaults 8, 2097152, 6)
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "zrt/zrt.h"

namespace {

using Clock = std::chrono::steady_clock;

#define CHECK_ZRT(call)                                                                            \
  do {                                                                                             \
    zrt_status_t status_ = (call);                                                                 \
    if (status_ != ZRT_SUCCESS) {                                                                  \
      std::fprintf(stderr, "%s -> %s: %s\n", #call, zrt_status_string(status_), zrt_last_error()); \
      std::exit(1);                                                                                \
    }                                                                                              \
  } while (0)

zrt_status_t sgd(const zrt_optimizer_args_t* args, void*) {
  for (size_t i = 0; i < args->count; ++i) args->master[i] -= 1e-3f * args->grad[i];
  return ZRT_SUCCESS;
}

struct Model {
  zrt_partition_t pm = nullptr;
  std::vector<int> params;
};

Model build(zrt_comm_t comm, int stage, int units, size_t numel) {
  zrt_partition_config_t config = ZRT_PARTITION_CONFIG_INIT;
  config.stage = stage;
  config.prefetch_depth = 2;
  config.persistence_threshold = 0;
  config.bucket_bytes = numel * 4 / 2;  // two buckets per unit
  Model m;
  CHECK_ZRT(zrt_partition_create(comm, &config, &m.pm));
  for (int u = 0; u < units; ++u) {
    int unit = 0, param = 0;
    CHECK_ZRT(zrt_partition_add_unit(m.pm, "layer", &unit));
    CHECK_ZRT(zrt_partition_add_param(m.pm, unit, "w", numel, 0, &param));
    m.params.push_back(param);
  }
  CHECK_ZRT(zrt_partition_finalize(m.pm));
  std::vector<float> init(numel, 0.01f);
  for (int p : m.params) CHECK_ZRT(zrt_partition_load_param(m.pm, p, init.data(), ZRT_F32));
  return m;
}

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

double train_step(Model& m, size_t numel, std::chrono::microseconds compute) {
  const auto start = Clock::now();
  static const bool verbose = std::getenv("BENCH_OVERLAP_VERBOSE") != nullptr;
  const int units = static_cast<int>(m.params.size());
  for (int u = 0; u < units; ++u) {
    CHECK_ZRT(zrt_partition_fetch(m.pm, u));
    std::this_thread::sleep_for(compute);
    CHECK_ZRT(zrt_partition_release(m.pm, u));
  }
  const double forward_ms = ms_since(start);
  for (int u = units - 1; u >= 0; --u) {
    CHECK_ZRT(zrt_partition_fetch(m.pm, u));
    std::this_thread::sleep_for(compute);
    void* grad = nullptr;
    CHECK_ZRT(zrt_partition_grad_data(m.pm, m.params[u], &grad));
    std::fill_n(static_cast<float*>(grad), numel, 1e-3f);
    CHECK_ZRT(zrt_partition_grad_ready(m.pm, u));
    CHECK_ZRT(zrt_partition_release(m.pm, u));
  }
  const double backward_ms = ms_since(start) - forward_ms;
  CHECK_ZRT(zrt_partition_step(m.pm, sgd, nullptr));
  if (verbose) {
    std::printf("  forward %.1f ms, backward %.1f ms, step %.1f ms\n", forward_ms, backward_ms,
                ms_since(start) - forward_ms - backward_ms);
  }
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

double median_step(zrt_comm_t comm, Model& m, size_t numel, std::chrono::microseconds compute,
                   int steps) {
  std::vector<double> times;
  for (int s = 0; s < steps + 2; ++s) {
    CHECK_ZRT(zrt_barrier(comm, nullptr));
    const double t = train_step(m, numel, compute);
    if (s >= 2) times.push_back(t);  // the first steps record the fetch order and warm up
  }
  std::sort(times.begin(), times.end());
  // Every rank reports the slowest rank's median.
  double value = times[times.size() / 2];
  CHECK_ZRT(zrt_all_reduce(comm, &value, &value, 1, ZRT_F64, ZRT_MAX, nullptr));
  return value;
}

void rank_main(int units, size_t numel, int steps) {
  zrt_comm_t comm = nullptr;
  CHECK_ZRT(zrt_comm_init_env(nullptr, &comm));
  int rank = 0;
  CHECK_ZRT(zrt_comm_rank(comm, &rank));
  for (int stage : {2, 3}) {
    Model m = build(comm, stage, units, numel);
    const double comm_ms = median_step(comm, m, numel, std::chrono::microseconds(0), steps);
    // Balanced: the sleeps add up to the communication-only step.
    const auto per_unit =
        std::chrono::microseconds(static_cast<int64_t>(comm_ms * 1000.0 / (2.0 * units)));
    const double compute_ms = 2.0 * units * static_cast<double>(per_unit.count()) / 1000.0;
    const double step_ms = median_step(comm, m, numel, per_unit, steps);
    const double bound = std::max(compute_ms, comm_ms);
    if (rank == 0) {
      std::printf(
          "stage %d, 2 ranks, %d units x %zu f32: comm alone %.1f ms, compute alone "
          "%.1f ms, step %.1f ms, step / max(compute, comm) = %.3f (target <= 1.15), "
          "step / (compute + comm) = %.3f\n",
          stage, units, numel, comm_ms, compute_ms, step_ms, step_ms / bound,
          step_ms / (compute_ms + comm_ms));
      std::fflush(stdout);
    }
    CHECK_ZRT(zrt_partition_destroy(m.pm));
  }
  CHECK_ZRT(zrt_comm_destroy(comm));
}

int free_port() {
  return 20000 + static_cast<int>(getpid() % 20000);
}

}  // namespace

int main(int argc, char** argv) {
  const int units = argc > 1 ? std::atoi(argv[1]) : 8;
  const size_t numel = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : (size_t{1} << 21);
  const int steps = argc > 3 ? std::atoi(argv[3]) : 6;
  const int ranks = 2;
  const std::string port = std::to_string(free_port());
  const std::string token = "bench-overlap-" + std::to_string(getpid());
  std::vector<pid_t> children;
  for (int r = 0; r < ranks; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      setenv("RANK", std::to_string(r).c_str(), 1);
      setenv("WORLD_SIZE", std::to_string(ranks).c_str(), 1);
      setenv("LOCAL_RANK", std::to_string(r).c_str(), 1);
      setenv("LOCAL_WORLD_SIZE", std::to_string(ranks).c_str(), 1);
      setenv("MASTER_ADDR", "127.0.0.1", 1);
      setenv("MASTER_PORT", port.c_str(), 1);
      setenv("ZRT_JOB_TOKEN", token.c_str(), 1);
      rank_main(units, numel, steps);
      std::fflush(stdout);
      _exit(0);
    }
    children.push_back(pid);
  }
  int failed = 0;
  for (pid_t pid : children) {
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failed;
  }
  return failed == 0 ? 0 : 1;
}
