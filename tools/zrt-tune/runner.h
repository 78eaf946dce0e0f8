// Runs real training steps of a profile through the partition manager's C API, with each unit's
// compute replaced by a sleep of its profiled time (what a GPU kernel looks like to the host:
// time passes and the CPU stays free for zrt's progress engine), and reports the step time and
// the memory zrt holds for one candidate setting.
//
// Every rank runs the same steps; a step starts after a barrier, the figure of a candidate is
// the median of its timed steps, and every figure is the maximum over ranks (all-reduced on a
// side communicator of its own, so the manager's streams and counters see only ZeRO traffic).
#pragma once

#include <memory>

#include "lib/core/status.h"
#include "tools/zrt-tune/profile.h"
#include "tools/zrt-tune/search.h"
#include "zrt/zrt.h"

namespace zrt::tune {

struct RunSettings {
  int stage = 2;
  zrt_dtype_t param_dtype = ZRT_F32;
  zrt_dtype_t reduce_dtype = ZRT_F32;
  int optimizer_slots = 2;
  size_t persistence_threshold = 100000;
  int warmup = 1;      // untimed steps per candidate (the first records the stage 3 fetch order)
  int steps = 3;       // timed steps per candidate; the confirmation takes twice as many
  double mem_cap = 0;  // bytes per rank of zrt memory; 0 = no cap
};

// The partition config of a candidate: the defaults, the settings, then the candidate.
zrt_partition_config_t make_config(const RunSettings& settings, const Candidate& candidate);

class Runner {
 public:
  ~Runner();
  Runner(const Runner&) = delete;
  Runner& operator=(const Runner&) = delete;

  // Joins the job from the environment (zrt-run, torchrun, Slurm...).
  static Status create(const Profile& profile, const RunSettings& settings,
                       std::unique_ptr<Runner>* runner);

  int rank() const { return rank_; }
  int size() const { return size_; }

  // Finalizes a manager for the candidate; if its memory (max over ranks) is over the cap,
  // reports fits=false without timing, else times warmup + steps (x2 when confirm).
  Status measure(const Candidate& candidate, bool confirm, Measurement* result);
  // The same steps with config as given (a loaded config file), `steps` timed.
  Status measure_config(const zrt_partition_config_t& config, int steps, Measurement* result);
  // The sleeps alone, without zrt: what a step would take if communication hid completely
  // (includes the timer slack of the sleeps, which the step times also carry).
  Status measure_compute(double* ms);

 private:
  Runner(const Profile& profile, const RunSettings& settings);
  Status run_steps(zrt_partition_t pm, const std::vector<std::vector<int>>& params, int steps,
                   double* median_ms);
  Status max_over_ranks(double* value);
  Status barrier();

  Profile profile_;
  RunSettings settings_;
  zrt_comm_t comm_ = nullptr;
  zrt_comm_t side_ = nullptr;
  zrt_stream_t side_stream_ = nullptr;
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace zrt::tune
