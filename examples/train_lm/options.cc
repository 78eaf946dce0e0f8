#include "options.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace train_lm {
namespace {

bool parse_int(const char* text, long low, long high, long* value) {
  char* end = nullptr;
  errno = 0;
  const long parsed = std::strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || parsed < low || parsed > high) return false;
  *value = parsed;
  return true;
}

bool parse_double(const char* text, double low, double high, double* value) {
  char* end = nullptr;
  errno = 0;
  const double parsed = std::strtod(text, &end);
  if (errno != 0 || end == text || *end != '\0' || !(parsed >= low && parsed <= high)) return false;
  *value = parsed;
  return true;
}

}  // namespace

const char* usage() {
  return "usage: train_lm [options]   (run under zrt-run -n N, torchrun, mpirun or srun)\n"
         "  --stage 0|1|2|3             ZeRO stage (0 = plain data parallel)      [3]\n"
         "  --dtype f32|bf16            parameter dtype                           [f32]\n"
         "  --steps N                   optimizer steps                           [40]\n"
         "  --batch N                   global batch, divisible by ranks*micro    [96]\n"
         "  --micro-batches N           gradient accumulation micro-batches       [1]\n"
         "  --no-sync                   reduce on the last micro-batch only\n"
         "  --shard-group G             stages 1-3: shard in groups of G ranks, replicate\n"
         "                              across groups (-1 = one host, 0 or N =\n"
         "                              flat; ignored at stage 0)                 [0]\n"
         "  --hpz H                     stage 3: a secondary parameter copy in groups\n"
         "                              of H ranks for backward's gathers (-1 = one\n"
         "                              host, 0 = off; ignored at stages 0-2)     [0]\n"
         "  --bucket-mb X               gradient bucket size in MiB               [0.25]\n"
         "  --prefetch N                stage-3 prefetch depth in units           [1]\n"
         "  --persistence-threshold N   stage-3 params below N elements stay gathered [0]\n"
         "  --checkpoint-activations    recompute block activations in backward\n"
         "  --blocks K                  model blocks, each --width wide           [2]\n"
         "  --width W                   block width (neither flag: model.h's two\n"
         "                              blocks, 256x192 and 160x96)               [256]\n"
         "  --lr X                      AdamW learning rate                       [3e-3]\n"
         "  --clip X                    clip the global gradient norm to X        [off]\n"
         "  --optimizer NAME            own (train_lm's AdamW), or zrt's fused zrt-adamw,\n"
         "                              zrt-adam, zrt-sgd (momentum 0.9), zrt-lion   [own]\n"
         "  --optimizer-threads N       threads of the fused optimizer (0 = all CPUs) [1]\n"
         "  --offload                   stages 1-3: master and optimizer state in host\n"
         "                              memory, the step a pipeline over segments\n"
         "                              (ZeRO-Offload; ignored at stage 0)\n"
         "  --optimizer-in-backward     with --offload: each segment's optimizer runs in\n"
         "                              backward as its reduction ends (not with --clip)\n"
         "  --seed N                    data and initialisation seed              [1234]\n"
         "  --print-every N             print the loss every N steps              [5]\n"
         "  --corpus FILE               training text          [/usr/share/dict/words]\n"
         "  --config FILE               zrt partition config JSON (zrt-tune's output)\n"
         "  --save DIR                  save a sharded checkpoint every K steps and at the end\n"
         "  --save-every K              steps between checkpoints (0 = only at the end) [10]\n"
         "  --resume DIR                load DIR's checkpoint (any N, stage) and continue to\n"
         "                              --steps\n"
         "  --check-rss                 print the peak RSS growth from finalize on beside\n"
         "                              zrt's memory total, and fail when more than 5 % off\n"
         "                              (a model of hundreds of MiB: --blocks, --width; no\n"
         "                              --resume)\n";
}

bool parse_options(int argc, char** argv, Options* options, std::string* error) {
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    auto value = [&](const char** out) {
      if (i + 1 >= argc) {
        *error = flag + " needs a value";
        return false;
      }
      *out = argv[++i];
      return true;
    };
    const char* text = nullptr;
    long integer = 0;
    double real = 0;
    auto bad = [&](const char* what) {
      *error = flag + " " + (text ? text : "") + ": " + what;
      return false;
    };
    if (flag == "--help" || flag == "-h") {
      options->help = true;
    } else if (flag == "--stage") {
      if (!value(&text)) return false;
      if (!parse_int(text, 0, 3, &integer)) return bad("expected 0, 1, 2 or 3");
      options->stage = static_cast<int>(integer);
    } else if (flag == "--dtype") {
      if (!value(&text)) return false;
      if (std::strcmp(text, "f32") == 0) {
        options->dtype = ZRT_F32;
      } else if (std::strcmp(text, "bf16") == 0) {
        options->dtype = ZRT_BF16;
      } else {
        return bad("expected f32 or bf16");
      }
    } else if (flag == "--steps") {
      if (!value(&text)) return false;
      if (!parse_int(text, 1, 1000000, &integer)) return bad("expected 1..1000000");
      options->steps = static_cast<int>(integer);
    } else if (flag == "--batch") {
      if (!value(&text)) return false;
      if (!parse_int(text, 1, 1 << 20, &integer)) return bad("expected a positive integer");
      options->batch = static_cast<int>(integer);
    } else if (flag == "--micro-batches") {
      if (!value(&text)) return false;
      if (!parse_int(text, 1, 1024, &integer)) return bad("expected 1..1024");
      options->micro_batches = static_cast<int>(integer);
    } else if (flag == "--no-sync") {
      options->no_sync = true;
    } else if (flag == "--shard-group") {
      if (!value(&text)) return false;
      if (!parse_int(text, -1, 1 << 20, &integer)) return bad("expected -1..1048576");
      options->shard_group = static_cast<int>(integer);
    } else if (flag == "--hpz") {
      if (!value(&text)) return false;
      if (!parse_int(text, -1, 1 << 20, &integer)) return bad("expected -1..1048576");
      options->hpz = static_cast<int>(integer);
    } else if (flag == "--bucket-mb") {
      if (!value(&text)) return false;
      if (!parse_double(text, 1.0 / 1024, 4096, &real)) return bad("expected MiB in (0, 4096]");
      options->bucket_mb = real;
    } else if (flag == "--prefetch") {
      if (!value(&text)) return false;
      if (!parse_int(text, 0, 64, &integer)) return bad("expected 0..64");
      options->prefetch = static_cast<int>(integer);
    } else if (flag == "--persistence-threshold") {
      if (!value(&text)) return false;
      if (!parse_int(text, 0, 1L << 40, &integer)) return bad("expected elements >= 0");
      options->persistence_threshold = static_cast<size_t>(integer);
    } else if (flag == "--checkpoint-activations") {
      options->checkpoint_activations = true;
    } else if (flag == "--blocks") {
      if (!value(&text)) return false;
      if (!parse_int(text, 1, 256, &integer)) return bad("expected 1..256 blocks");
      options->blocks = static_cast<int>(integer);
    } else if (flag == "--width") {
      if (!value(&text)) return false;
      if (!parse_int(text, 1, 1 << 16, &integer)) return bad("expected a width of 1..65536");
      options->width = static_cast<int>(integer);
    } else if (flag == "--lr") {
      if (!value(&text)) return false;
      if (!parse_double(text, 0, 10, &real)) return bad("expected a learning rate in [0, 10]");
      options->learning_rate = static_cast<float>(real);
    } else if (flag == "--clip") {
      if (!value(&text)) return false;
      if (!parse_double(text, 0, 1e9, &real)) return bad("expected a norm >= 0");
      options->clip = real;
    } else if (flag == "--optimizer") {
      if (!value(&text)) return false;
      const std::string name = text;
      if (name != "own" && name != "zrt-adamw" && name != "zrt-adam" && name != "zrt-sgd" &&
          name != "zrt-lion") {
        return bad("expected own, zrt-adamw, zrt-adam, zrt-sgd or zrt-lion");
      }
      options->optimizer = name;
    } else if (flag == "--optimizer-threads") {
      if (!value(&text)) return false;
      if (!parse_int(text, 0, 1024, &integer)) return bad("expected 0 to 1024 threads");
      options->optimizer_threads = static_cast<int>(integer);
    } else if (flag == "--offload") {
      options->offload = true;
    } else if (flag == "--optimizer-in-backward") {
      options->in_backward = true;
    } else if (flag == "--seed") {
      if (!value(&text)) return false;
      if (!parse_int(text, 0, 1L << 62, &integer)) return bad("expected a non-negative integer");
      options->seed = static_cast<uint64_t>(integer);
    } else if (flag == "--print-every") {
      if (!value(&text)) return false;
      if (!parse_int(text, 1, 1000000, &integer)) return bad("expected a positive integer");
      options->print_every = static_cast<int>(integer);
    } else if (flag == "--corpus") {
      if (!value(&text)) return false;
      options->corpus = text;
    } else if (flag == "--config") {
      if (!value(&text)) return false;
      options->config_file = text;
    } else if (flag == "--save") {
      if (!value(&text)) return false;
      options->save_dir = text;
    } else if (flag == "--save-every") {
      if (!value(&text)) return false;
      if (!parse_int(text, 0, 1000000, &integer)) return bad("expected steps >= 0");
      options->save_every = static_cast<int>(integer);
    } else if (flag == "--resume") {
      if (!value(&text)) return false;
      options->resume_dir = text;
    } else if (flag == "--check-rss") {
      options->check_rss = true;
    } else {
      *error = "unknown option " + flag;
      return false;
    }
  }
  if (options->batch % options->micro_batches != 0) {
    *error = "--batch must be divisible by --micro-batches";
    return false;
  }
  if (options->check_rss && !options->resume_dir.empty()) {
    // zrt_partition_load maps the checkpoint's files while it reads them: their pages would
    // count in the peak as if they were zrt's buffers.
    *error = "--check-rss measures a run from finalize on: not with --resume";
    return false;
  }
  if (options->in_backward && !options->offload) {
    *error = "--optimizer-in-backward needs --offload (the optimizer offloaded to the host)";
    return false;
  }
  if (options->in_backward && options->clip > 0) {
    *error =
        "--optimizer-in-backward runs the optimizer before the global norm is known: drop --clip";
    return false;
  }
  return true;
}

}  // namespace train_lm
