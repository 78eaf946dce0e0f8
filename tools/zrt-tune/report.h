// What zrt-tune prints and writes: the table of candidates, the recommendation, the partition
// config file (the keys zrt_partition_config_load reads) and the JSON report of every trial.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "tools/zrt-tune/runner.h"
#include "tools/zrt-tune/search.h"

namespace zrt::tune {

struct TuneSummary {
  std::string model;
  int ranks = 1;
  RunSettings settings;
  double profile_compute_ms = 0;  // the profile's forward + backward times
  double compute_ms = 0;          // the same sleeps, measured
  SearchResult result;
};

// The candidates as a table (header lines start with '#'), then the recommendation.
std::string render_summary(const TuneSummary& summary);

// The recommended setting as a partition config (stage, dtypes, optimizer slots, bucket,
// prefetch depth and budget, persistence threshold).
nlohmann::json config_json(const RunSettings& settings, const Candidate& candidate);

// Every trial with its figures, and the recommendation.
nlohmann::json report_json(const TuneSummary& summary);

}  // namespace zrt::tune
