// zrt-mem's plan: the partition manager's own memory model (zero/partition/memory_model.h)
// evaluated for each ZeRO stage, plus activations and a fit check against device memory.
// Nothing here runs a collective or allocates the model: it is arithmetic on the layout.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "zero/partition/config.h"
#include "zero/partition/memory_model.h"
#include "tools/zrt-mem/model_spec.h"

namespace zrt::mem {

struct MemRequest {
  PartitionOptions options;  // stage is overridden per planned stage
  int ranks = 1;
  int shard_group = 0;  // hybrid sharding: ranks per shard group (0 = ranks, flat)
  ModelSpec model;
  std::vector<int> stages{0, 1, 2, 3};
  double device_bytes = 0;  // 0: no fit check
};

struct StagePlan {
  int stage = 0;
  MemoryFigures figures;
};

struct MemPlan {
  std::vector<StagePlan> stages;
  bool has_activations = false;
  ActivationEstimate activations;
};

// Errors: the options' own validation (the field is named), a model the layout refuses.
Status plan_memory(const MemRequest& request, MemPlan* plan);

std::string render_mem_plan(const MemRequest& request, const MemPlan& plan);
nlohmann::json mem_plan_to_json(const MemRequest& request, const MemPlan& plan);

}  // namespace zrt::mem
