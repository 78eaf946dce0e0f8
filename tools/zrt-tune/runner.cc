#include "tools/zrt-tune/runner.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include <fmt/format.h>

namespace zrt::tune {
namespace {

using Clock = std::chrono::steady_clock;

Status check(zrt_status_t status, const char* call) {
  if (status == ZRT_SUCCESS) return Status::ok();
  return Status(status, fmt::format("{}: {}", call, zrt_last_error()));
}

#define TUNE_CHECK(call) ZRT_RETURN_IF_ERROR(check((call), #call))

void compute(double ms) {
  if (ms > 0) std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(ms));
}

double since_ms(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

// Plain SGD on the shard: the optimizer is the framework's, and its cost is the same for every
// candidate; what is tuned is the communication around it.
zrt_status_t sgd(const zrt_optimizer_args_t* args, void*) {
  for (size_t i = 0; i < args->count; ++i) args->master[i] -= 1e-4f * args->grad[i];
  return ZRT_SUCCESS;
}

// Destroys the manager on every path out of a measurement.
struct ManagerGuard {
  zrt_partition_t pm = nullptr;
  ~ManagerGuard() {
    if (pm != nullptr) zrt_partition_destroy(pm);
  }
  Status release() {
    zrt_partition_t p = pm;
    pm = nullptr;
    return check(zrt_partition_destroy(p), "zrt_partition_destroy");
  }
};

}  // namespace

zrt_partition_config_t make_config(const RunSettings& settings, const Candidate& candidate) {
  zrt_partition_config_t config = ZRT_PARTITION_CONFIG_INIT;
  config.stage = settings.stage;
  config.param_dtype = settings.param_dtype;
  config.reduce_dtype = settings.reduce_dtype;
  config.optimizer_slots = settings.optimizer_slots;
  config.persistence_threshold = settings.persistence_threshold;
  config.bucket_bytes = candidate.bucket_bytes;
  config.prefetch_depth = candidate.prefetch_depth;
  config.prefetch_bytes = candidate.prefetch_bytes;
  return config;
}

Runner::Runner(const Profile& profile, const RunSettings& settings)
    : profile_(profile), settings_(settings) {}

Runner::~Runner() {
  if (side_stream_ != nullptr) zrt_stream_destroy(side_stream_);
  if (side_ != nullptr) zrt_comm_destroy(side_);
  if (comm_ != nullptr) zrt_comm_destroy(comm_);
}

Status Runner::create(const Profile& profile, const RunSettings& settings,
                      std::unique_ptr<Runner>* runner) {
  std::unique_ptr<Runner> r(new Runner(profile, settings));
  zrt_comm_config_t config = ZRT_COMM_CONFIG_INIT;
  config.name = "zrt-tune";
  TUNE_CHECK(zrt_comm_init_env(&config, &r->comm_));
  TUNE_CHECK(zrt_comm_rank(r->comm_, &r->rank_));
  TUNE_CHECK(zrt_comm_size(r->comm_, &r->size_));
  TUNE_CHECK(zrt_comm_split(r->comm_, 0, r->rank_, nullptr, &r->side_));
  TUNE_CHECK(zrt_stream_create(r->side_, ZRT_MEM_HOST, &r->side_stream_));
  *runner = std::move(r);
  return Status::ok();
}

Status Runner::barrier() {
  TUNE_CHECK(zrt_barrier(side_, side_stream_));
  TUNE_CHECK(zrt_stream_synchronize(side_stream_));
  return Status::ok();
}

Status Runner::max_over_ranks(double* value) {
  double v = *value;
  TUNE_CHECK(zrt_all_reduce(side_, &v, &v, 1, ZRT_F64, ZRT_MAX, side_stream_));
  TUNE_CHECK(zrt_stream_synchronize(side_stream_));
  *value = v;
  return Status::ok();
}

Status Runner::run_steps(zrt_partition_t pm, const std::vector<std::vector<int>>& params, int steps,
                         double* median_ms) {
  size_t elem = 0;
  TUNE_CHECK(zrt_dtype_size(settings_.param_dtype, &elem));
  const int units = static_cast<int>(profile_.units.size());
  std::vector<double> times;
  for (int s = 0; s < settings_.warmup + steps; ++s) {
    ZRT_RETURN_IF_ERROR(barrier());
    const auto start = Clock::now();
    for (int u = 0; u < units; ++u) {
      TUNE_CHECK(zrt_partition_fetch(pm, u));
      compute(profile_.units[u].forward_ms);
      TUNE_CHECK(zrt_partition_release(pm, u));
    }
    for (int u = units - 1; u >= 0; --u) {
      TUNE_CHECK(zrt_partition_fetch(pm, u));
      compute(profile_.units[u].backward_ms);
      const ProfileUnit& unit = profile_.units[u];
      if (!params[u].empty()) {
        size_t slot = 0;
        for (const ProfileTensor& t : unit.params) {
          if (t.frozen) continue;
          void* grad = nullptr;
          TUNE_CHECK(zrt_partition_grad_data(pm, params[u][slot++], &grad));
          std::memset(grad, 0, t.numel * elem);  // the framework writes its gradients
        }
        TUNE_CHECK(zrt_partition_grad_ready(pm, u));
      }
      TUNE_CHECK(zrt_partition_release(pm, u));
    }
    TUNE_CHECK(zrt_partition_step(pm, sgd, nullptr));
    if (s >= settings_.warmup) times.push_back(since_ms(start));
  }
  double value = median(std::move(times));
  ZRT_RETURN_IF_ERROR(max_over_ranks(&value));
  *median_ms = value;
  return Status::ok();
}

Status Runner::measure_config(const zrt_partition_config_t& config, int steps,
                              Measurement* result) {
  ManagerGuard guard;
  TUNE_CHECK(zrt_partition_create(comm_, &config, &guard.pm));
  // Trainable parameter ids per unit, in the order of the profile's tensors.
  std::vector<std::vector<int>> params(profile_.units.size());
  for (size_t u = 0; u < profile_.units.size(); ++u) {
    const ProfileUnit& unit = profile_.units[u];
    int id = 0;
    TUNE_CHECK(zrt_partition_add_unit(guard.pm, unit.name.c_str(), &id));
    for (const ProfileTensor& t : unit.params) {
      int param = 0;
      TUNE_CHECK(zrt_partition_add_param(guard.pm, id, t.name.c_str(), t.numel,
                                         t.frozen ? ZRT_PARAM_FROZEN : ZRT_PARAM_DEFAULT, &param));
      if (!t.frozen) params[u].push_back(param);
    }
  }
  TUNE_CHECK(zrt_partition_finalize(guard.pm));
  zrt_partition_memory_t memory;
  std::memset(&memory, 0, sizeof(memory));
  memory.size = sizeof(memory);
  TUNE_CHECK(zrt_partition_memory(guard.pm, &memory));
  Measurement m;
  m.memory_bytes = static_cast<double>(memory.total);
  ZRT_RETURN_IF_ERROR(max_over_ranks(&m.memory_bytes));
  m.fits = settings_.mem_cap <= 0 || m.memory_bytes <= settings_.mem_cap;
  if (m.fits && steps > 0) ZRT_RETURN_IF_ERROR(run_steps(guard.pm, params, steps, &m.step_ms));
  ZRT_RETURN_IF_ERROR(guard.release());
  *result = m;
  return Status::ok();
}

Status Runner::measure(const Candidate& candidate, bool confirm, Measurement* result) {
  const int steps = confirm ? 2 * settings_.steps : settings_.steps;
  return measure_config(make_config(settings_, candidate), steps, result);
}

Status Runner::measure_compute(double* ms) {
  std::vector<double> times;
  for (int s = 0; s < settings_.steps; ++s) {
    ZRT_RETURN_IF_ERROR(barrier());
    const auto start = Clock::now();
    for (const ProfileUnit& unit : profile_.units) compute(unit.forward_ms);
    for (auto it = profile_.units.rbegin(); it != profile_.units.rend(); ++it) {
      compute(it->backward_ms);
    }
    times.push_back(since_ms(start));
  }
  double value = median(std::move(times));
  ZRT_RETURN_IF_ERROR(max_over_ranks(&value));
  *ms = value;
  return Status::ok();
}

}  // namespace zrt::tune
