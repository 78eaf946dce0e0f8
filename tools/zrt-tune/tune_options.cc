#include "tools/zrt-tune/tune_options.h"

#include <algorithm>
#include <cstdlib>
#include <sstream>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "lib/core/dtype.h"
#include "tools/common/units.h"
#include "tools/zrt-tune/presets.h"

namespace zrt::tune {
namespace {

Status parse_dtype(const std::string& text, const char* flag, zrt_dtype_t* dtype) {
  zrt_dtype_t d = ZRT_F32;
  if (!dtype_from_name(text.c_str(), &d) || (d != ZRT_F32 && d != ZRT_F16 && d != ZRT_BF16)) {
    return Status::invalid_argument("{}: unknown data type '{}' (choose f32, f16 or bf16)", flag,
                                    text);
  }
  *dtype = d;
  return Status::ok();
}

}  // namespace

Status parse_tune_command(int argc, const char* const* argv, TuneOptions* options) {
  CLI::App app{
      "zrt-tune: finds the bucket size (stages 0-2) or prefetch depth and budget (stage 3) that\n"
      "give the fastest training step for a model, by running real steps through the partition\n"
      "manager on every rank, with each unit's compute replaced by a sleep of its profiled time.\n"
      "Run it under the launcher with the rank count you train with."};
  app.footer(fmt::format(
      "Model: --preset NAME ({}) or --profile FILE:\n"
      "  {{\"name\": \"m\", \"units\": [{{\"name\": \"embed\", \"params\": 38597376,\n"
      "    \"forward_ms\": 0.4, \"backward_ms\": 0.8}}, {{\"name\": \"block0\", \"forward_ms\": "
      "1.1,\n"
      "    \"backward_ms\": 2.2, \"params\": [{{\"name\": \"qkv.weight\", \"numel\": "
      "1769472}}]}}]}}\n"
      "Presets take their compute times from a FLOP count (6 x params x tokens) at --tflops.\n"
      "\n"
      "Output: a table of every candidate (step time, exposed communication = step - compute,\n"
      "peak zrt memory per rank), the recommendation (fastest that fits --mem-cap, measured a\n"
      "second time), and the partition config file (-o) that zrt_partition_config_load reads.\n"
      "\n"
      "Examples:\n"
      "  zrt-run -n 2 zrt-tune --preset gpt2-tiny --stage 3\n"
      "  zrt-run -n 2 zrt-tune --preset gpt2-mini --stage 2 --dtype bf16 --mem-cap 200MiB\n"
      "  zrt-run -n 8 zrt-tune --profile model.json --stage 3 -o zrt.json --report tune.json\n"
      "  zrt-run -n 2 zrt-tune --preset gpt2-tiny --stage 2 --include-bucket 4KiB\n"
      "  zrt-run -n 2 zrt-tune --preset gpt2-tiny --measure zrt.json   (rerun one setting)\n"
      "  zrt-tune --preset gpt2-small --print-profile > gpt2-small.json\n"
      "  zrt-tune --algorithms --ranks 2,4 -b 4K -e 4M -o zrt-algo.table   (not under zrt-run)\n"
      "\n"
      "--algorithms measures the crossovers of the reduce-scatter, all-gather and all-reduce\n"
      "algorithms on this machine (each candidate run by zrt-bench under zrt-run, interleaved,\n"
      "--rounds times, medians) and writes the algorithm table (-o) that ZRT_ALGO_TABLE loads.\n"
      "\n"
      "Exit codes: 0 ok, 1 a run failed, 2 bad command line or input file, 3 nothing fits\n"
      "--mem-cap.",
      preset_names()));

  std::string preset, profile, dtype = "f32", reduce_dtype, mem_cap;
  std::vector<std::string> buckets;
  double tokens = 0, tflops = 0, scale = 1.0;
  int steps = 3, warmup = 1, slots = 2;
  long long persistence = 100000;
  RunSettings& s = options->settings;
  app.add_option("--preset", preset, "built-in model: " + preset_names());
  app.add_option("--profile", profile, "model profile JSON file (units, params, compute times)");
  app.add_option("--stage", s.stage, "ZeRO stage 0-3 (default 2)")->check(CLI::Range(0, 3));
  app.add_option("--dtype", dtype, "parameter dtype: f32 (default), bf16, f16");
  app.add_option("--reduce-dtype", reduce_dtype, "gradient reduction dtype (default: --dtype)");
  app.add_option("--optimizer-slots", slots, "f32 optimizer state arrays (default 2, Adam)")
      ->check(CLI::Range(0, 16));
  app.add_option("--persistence-threshold", persistence,
                 "stage 3: parameters with fewer elements stay gathered (default 100000)")
      ->check(CLI::Range(0LL, 1LL << 40));
  app.add_option("--mem-cap", mem_cap, "zrt memory per rank that a setting may use (200MiB, 8GB)");
  app.add_option("--tokens", tokens, "presets: tokens per micro-batch per rank");
  app.add_option("--tflops", tflops, "presets: effective TFLOP/s per rank the compute models");
  app.add_option("--compute-scale", scale, "multiply every compute time (default 1)")
      ->check(CLI::Range(0.0, 1e6));
  app.add_option("--steps", steps, "timed steps per candidate (default 3; confirmation 2x)")
      ->check(CLI::Range(1, 1000));
  app.add_option("--warmup", warmup, "untimed steps per candidate (default 1)")
      ->check(CLI::Range(1, 100));
  app.add_option("--confirm", options->confirm, "fastest candidates measured again (default 3)")
      ->check(CLI::Range(1, 20));
  app.add_option("--include-bucket", buckets, "also measure this bucket size (repeatable)");
  app.add_option("--include-depth", options->extra_depths,
                 "also measure this prefetch depth (repeatable)")
      ->check(CLI::Range(0, 64));
  app.add_option("-o,--output", options->output,
                 "partition config to write (default zrt-tune.json)");
  app.add_option("--report", options->report, "write every measurement as JSON here");
  app.add_option("--measure", options->measure_config,
                 "time the setting of this partition config file instead of tuning");
  app.add_flag("--print-profile", options->print_profile,
               "print the model profile as JSON and exit (a preset as a starting file)");

  AlgorithmTuneOptions& a = options->algorithm_tune;
  std::string ranks = "2,4", min_bytes = "4K", max_bytes = "4M";
  app.add_flag("--algorithms", options->algorithms,
               "measure the algorithm crossovers and write an algorithm table (no model)");
  app.add_option("--ranks", ranks, "--algorithms: rank counts to measure (default 2,4)");
  app.add_option("-b,--min-bytes", min_bytes, "--algorithms: smallest size (default 4K)");
  app.add_option("-e,--max-bytes", max_bytes, "--algorithms: largest size (default 4M)");
  app.add_option("-f,--step-factor", a.factor, "--algorithms: size factor (default 2)")
      ->check(CLI::Range(1.01, 1024.0));
  app.add_option("--rounds", a.rounds, "--algorithms: interleaved rounds (default 3)")
      ->check(CLI::Range(1, 100));
  app.add_option("--iters", a.iters, "--algorithms: timed calls per size (default 20)")
      ->check(CLI::Range(1, 100000));
  app.add_option("--zrt-run", a.zrt_run, "--algorithms: zrt-run to use (default: found)");
  app.add_option("--zrt-bench", a.zrt_bench, "--algorithms: zrt-bench to use (default: found)");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    options->show_help = true;
    options->help = app.help();
    return Status::ok();
  } catch (const CLI::ParseError& e) {
    return Status::invalid_argument("{} (see --help)", e.what());
  }

  if (options->algorithms) {
    if (!preset.empty() || !profile.empty() || !options->measure_config.empty()) {
      return Status::invalid_argument(
          "--algorithms measures the collectives, not a model: drop --preset, --profile and "
          "--measure");
    }
    if (app.count("-o") == 0) options->output = "zrt-algo.table";
    if (options->output.empty()) return Status::invalid_argument("-o: empty file name");
    a.ranks.clear();
    std::stringstream list(ranks);
    for (std::string item; std::getline(list, item, ',');) {
      char* end = nullptr;
      const long n = std::strtol(item.c_str(), &end, 10);
      if (item.empty() || *end != '\0' || n < 2 || n > 1024) {
        return Status::invalid_argument(
            "--ranks '{}': give rank counts from 2 to 1024, comma-separated (2,4)", ranks);
      }
      a.ranks.push_back(static_cast<int>(n));
    }
    std::sort(a.ranks.begin(), a.ranks.end());
    a.ranks.erase(std::unique(a.ranks.begin(), a.ranks.end()), a.ranks.end());
    ZRT_RETURN_IF_ERROR(tools::parse_size(min_bytes, "-b", &a.min_bytes));
    ZRT_RETURN_IF_ERROR(tools::parse_size(max_bytes, "-e", &a.max_bytes));
    if (a.min_bytes == 0 || a.min_bytes > a.max_bytes) {
      return Status::invalid_argument("-b {} -e {}: give 0 < -b <= -e", min_bytes, max_bytes);
    }
    return Status::ok();
  }
  if (preset.empty() == profile.empty()) {
    return Status::invalid_argument("give exactly one model: --preset NAME ({}) or --profile FILE",
                                    preset_names());
  }
  if (!preset.empty()) {
    ZRT_RETURN_IF_ERROR(make_preset(preset, tokens, tflops, &options->profile));
    options->model = "preset " + preset;
  } else {
    if (tokens > 0 || tflops > 0) {
      return Status::invalid_argument(
          "--tokens and --tflops apply to presets; a profile has its own times "
          "(scale them with --compute-scale)");
    }
    ZRT_RETURN_IF_ERROR(load_profile(profile, &options->profile));
    options->model = profile;
  }
  scale_compute(scale, &options->profile);

  ZRT_RETURN_IF_ERROR(parse_dtype(dtype, "--dtype", &s.param_dtype));
  s.reduce_dtype = s.param_dtype;
  if (!reduce_dtype.empty()) {
    ZRT_RETURN_IF_ERROR(parse_dtype(reduce_dtype, "--reduce-dtype", &s.reduce_dtype));
  }
  s.optimizer_slots = slots;
  s.persistence_threshold = static_cast<size_t>(persistence);
  s.steps = steps;
  s.warmup = warmup;
  if (!mem_cap.empty()) {
    ZRT_RETURN_IF_ERROR(tools::parse_real_size(mem_cap, "--mem-cap", &s.mem_cap));
    if (s.mem_cap <= 0) return Status::invalid_argument("--mem-cap must be more than 0 bytes");
  }
  for (const std::string& b : buckets) {
    uint64_t bytes = 0;
    ZRT_RETURN_IF_ERROR(tools::parse_size(b, "--include-bucket", &bytes));
    if (bytes < 4) {
      return Status::invalid_argument("--include-bucket {}: a bucket holds at least 4 bytes", b);
    }
    options->extra_buckets.push_back(static_cast<size_t>(bytes));
  }
  if (s.stage == 3 && !options->extra_buckets.empty()) {
    return Status::invalid_argument(
        "--include-bucket: stage 3 reduces one unit at a time; bucket size applies to stages "
        "0-2 (use --include-depth)");
  }
  if (s.stage <= 2 && !options->extra_depths.empty()) {
    return Status::invalid_argument(
        "--include-depth: prefetching is stage 3's; stages 0-2 tune the bucket size (use "
        "--include-bucket)");
  }
  if (options->output.empty()) return Status::invalid_argument("-o: empty file name");
  return Status::ok();
}

}  // namespace zrt::tune
