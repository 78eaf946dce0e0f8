// The model zrt-mem plans for, in the partition manager's own terms (units of parameters, as
// zrt_partition_add_unit / zrt_partition_add_param register them), built from one of three
// descriptions: a bare parameter count, a transformer shape, or a model profile file.
//
// Model profile (JSON; zrt-tune reads the same file):
//   { "name": "gpt2-small",
//     "units": [ { "name": "embed",  "params": 38597376, "forward_ms": 0.4, "backward_ms": 0.8 },
//                { "name": "block0", "params": [ {"name": "attn.qkv.weight", "numel": 1769472},
//                                                {"name": "ln_1.weight", "numel": 768,
//                                                 "frozen": false} ] } ] }
// "params" is a count (one tensor) or a list of tensors; forward_ms / backward_ms are optional
// here (zrt-tune needs them).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lib/core/status.h"
#include "zero/partition/layout.h"
#include "tools/common/json_file.h"

namespace zrt::mem {

struct TransformerShape {
  int layers = 0;
  int64_t hidden = 0;
  int heads = 0;
  int64_t vocab = 50257;  // GPT-2's
  int64_t seq = 1024;
  int64_t micro_batch = 1;
};

struct ModelSpec {
  std::string description;
  std::vector<UnitSpec> units;
  std::vector<ParamSpec> params;
  bool has_shape = false;
  TransformerShape shape;
  uint64_t total_params() const;
  uint64_t frozen_params() const;
};

// `params` elements split evenly over `units` units of one tensor each.
Status model_from_param_count(uint64_t params, int units, ModelSpec* model);

// A GPT-2-like decoder: token and position embeddings (one unit), `layers` blocks (a unit each:
// two layer norms, qkv and output projections, a 4h MLP, with biases), a final layer norm with
// the output projection tied to the token embedding.
Status model_from_transformer(const TransformerShape& shape, ModelSpec* model);

// A profile file (see the top of this file). Errors name the file, the line and the field.
Status model_from_profile(const tools::JsonFile& file, ModelSpec* model);

// Activation memory per rank for one micro-batch of a transformer, in bytes of 16-bit
// activations (scaled by act_bytes / 2 for other widths). Korthikanti et al., "Reducing
// Activation Recomputation in Large Transformer Models" (2022): a layer keeps
// s·b·h·(34 + 5·a·s/h) bytes; checkpointing every layer keeps only its 2·s·b·h-byte input and
// recomputes one layer at a time. Both add the f32 logits for the loss, 4·s·b·v.
struct ActivationEstimate {
  double without_checkpointing = 0;
  double with_checkpointing = 0;
};
ActivationEstimate estimate_activations(const TransformerShape& shape, size_t act_bytes);

}  // namespace zrt::mem
