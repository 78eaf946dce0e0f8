// The three-unit model of the rollback and offload tests: units of 300, 307 and 314 f32
// elements over 1 KiB buckets, so parameters straddle buckets and segments, and a stage-3
// persistent unit 0. Gradients depend on the step, the rank and the parameters, so two runs
// that agree bit for bit took the same steps.
#pragma once

#include <cstddef>
#include <vector>

#include "zrt/zrt.h"

namespace zrt::testing::straddling {

constexpr int kUnits = 3;

size_t unit_numel(int u);

struct Run {
  zrt_comm_t comm = nullptr;
  zrt_partition_t pm = nullptr;
  std::vector<int> params;
  int rank = 0;
};

// `config` with the model's bucket, persistence and alignment fields set; the caller sets the
// rest (stage, step_backup, offload_optimizer).
zrt_partition_config_t model_config();
// Creates run->pm on run->comm, registers the three units, finalizes and loads start values.
void create(Run* run, const zrt_partition_config_t& config);
// Forward (reading every unit) and backward of one step.
void forward_backward(Run* run, int step);
// Every parameter's full data, as the framework sees it (fetching each unit).
std::vector<float> read_params(Run* run);
bool same_bytes(const std::vector<float>& a, const std::vector<float>& b);

}  // namespace zrt::testing::straddling
