// train_lm's command line.
#pragma once

#include <cstdint>
#include <string>

#include "zrt/zrt.h"

namespace train_lm {

struct Options {
  int stage = 3;
  zrt_dtype_t dtype = ZRT_F32;
  int steps = 40;
  int batch = 96;  // global batch (all ranks, all micro-batches); divisible by both
  int micro_batches = 1;
  bool no_sync = false;  // reduce only on the last micro-batch of a step
  double bucket_mb = 0.25;
  int prefetch = 1;
  size_t persistence_threshold = 0;
  int shard_group = 0;  // --shard-group G (hybrid sharding): 0 flat, -1 one host's ranks
  int hpz = 0;          // --hpz H (stage 3 secondary copy): 0 off, -1 one host's ranks
  bool checkpoint_activations = false;
  int context = 8;
  // The model's size: --blocks K and --width W make K blocks of W units each (either flag alone
  // takes 2 blocks or width 256 for the other); both 0 keep model.h's two-block default.
  int blocks = 0;
  int width = 0;
  float learning_rate = 3e-3f;
  double clip = 0.0;              // clip the global gradient norm to this (0 = off)
  std::string optimizer = "own";  // or zrt-adamw, zrt-adam, zrt-sgd, zrt-lion (fused_optimizer.h)
  int optimizer_threads = 1;      // the fused optimizer's pool (0 = every CPU of the mask)
  bool offload = false;           // stages 1-3: offload_optimizer (ZeRO-Offload)
  bool in_backward = false;       // with offload: zrt_partition_step_in_backward, no --clip
  uint64_t seed = 1234;
  int print_every = 5;
  std::string corpus = "/usr/share/dict/words";
  std::string config_file;  // a zrt partition config JSON (from zrt-tune), applied first
  // Checkpoints (zrt_partition_save / zrt_partition_load): a run saved at one N and stage
  // resumes at another.
  std::string save_dir;    // --save DIR: save every save_every steps and at the end
  int save_every = 10;     // --save-every K (0: only at the end)
  std::string resume_dir;  // --resume DIR: continue from the checkpoint's step to --steps
  // --check-rss: fail when the measured peak RSS growth from finalize on (rss.h) is more than
  // 5 % off zrt's memory total; meaningful only where zrt's buffers dominate the process (a
  // model of hundreds of MiB).
  bool check_rss = false;
  bool help = false;
};

bool parse_options(int argc, char** argv, Options* options, std::string* error);
const char* usage();

}  // namespace train_lm
