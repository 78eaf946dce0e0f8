// zrt-tune's command line: the model (a preset or a profile file), the training setting that is
// not tuned (stage, dtypes, optimizer, memory cap), how long to measure, and where to write.
#pragma once

#include <string>
#include <vector>

#include "lib/core/status.h"
#include "tools/zrt-tune/algorithm_tune.h"
#include "tools/zrt-tune/profile.h"
#include "tools/zrt-tune/runner.h"

namespace zrt::tune {

// Exit codes, documented in --help.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;  // a run failed (communication, memory, a peer)
inline constexpr int kExitUsage = 2;   // bad command line or input file
inline constexpr int kExitNoFit = 3;   // no candidate fits the memory cap

struct TuneOptions {
  Profile profile;
  std::string model;  // "preset gpt2-tiny" or the profile path
  RunSettings settings;
  int confirm = 3;
  std::vector<size_t> extra_buckets;
  std::vector<int> extra_depths;
  std::string output = "zrt-tune.json";
  std::string report;
  std::string measure_config;  // --measure: time this config file instead of tuning
  bool print_profile = false;
  // --algorithms: measure the algorithm crossovers and write an algorithm table to `output`
  // (default zrt-algo.table) instead of tuning a model.
  bool algorithms = false;
  AlgorithmTuneOptions algorithm_tune;
  bool show_help = false;
  std::string help;
};

// Parses argv. Errors (ZRT_INVALID_ARGUMENT) name the flag and what to write instead; a
// profile that does not parse is reported with its line and field.
Status parse_tune_command(int argc, const char* const* argv, TuneOptions* options);

}  // namespace zrt::tune
