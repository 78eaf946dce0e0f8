// Built-in model profiles: GPT-2-like decoders of chosen sizes, so that zrt-tune runs without a
// profile file. Compute times come from a FLOP count: forward 2·P·T + 4·s·h·T per block (the
// matrix products and the attention scores), backward twice that, at `tflops` effective per rank
// for T tokens per micro-batch; the embedding unit carries the tied output projection.
#pragma once

#include <string>
#include <vector>

#include "lib/core/status.h"
#include "tools/zrt-tune/profile.h"

namespace zrt::tune {

struct PresetShape {
  std::string name;
  int layers = 0;
  int hidden = 0;
  int vocab = 0;
  int seq = 0;
  // Defaults for the compute model; --tokens and --tflops override them.
  double tokens = 0;
  double tflops = 0;
  std::string note;
};

const std::vector<PresetShape>& preset_shapes();

// The preset `name` with compute times for `tokens` per micro-batch at `tflops` (0 = the
// preset's defaults). Errors name the unknown preset and list the known ones.
Status make_preset(const std::string& name, double tokens, double tflops, Profile* profile);

// "gpt2-tiny, gpt2-mini, ..." for help texts and messages.
std::string preset_names();

}  // namespace zrt::tune
