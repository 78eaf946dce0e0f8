// zrt-tune: tunes bucket size (stages 0-2) or prefetch depth and budget (stage 3) on the real
// communication path. See --help, and search.h for how candidates are chosen.
#include <cstdio>
#include <memory>
#include <vector>

#include <fmt/format.h>

#include "tools/common/progress.h"
#include "tools/common/svg_plot.h"
#include "tools/common/units.h"
#include "tools/zrt-tune/report.h"
#include "tools/zrt-tune/runner.h"
#include "tools/zrt-tune/search.h"
#include "tools/zrt-tune/tune_options.h"

namespace {

using namespace zrt::tune;
using zrt::Status;

int fail(const Status& status, int code) {
  fmt::print(stderr, "zrt-tune: {}\n", status.message());
  return code;
}

SearchSpace make_space(const TuneOptions& options) {
  const RunSettings& s = options.settings;
  SearchSpace space;
  space.stage = s.stage;
  size_t reduce = 4, param = 4;
  zrt_dtype_size(s.reduce_dtype, &reduce);
  zrt_dtype_size(s.param_dtype, &param);
  space.grad_bytes = options.profile.trainable_params() * reduce;
  space.units = static_cast<int>(options.profile.units.size());
  std::vector<uint64_t> unit_bytes;
  for (const ProfileUnit& u : options.profile.units) {
    uint64_t n = 0;
    for (const ProfileTensor& t : u.params) n += t.numel;
    unit_bytes.push_back(n * param);
  }
  std::sort(unit_bytes.begin(), unit_bytes.end());
  space.typical_unit_bytes = unit_bytes[unit_bytes.size() / 2];
  const zrt_partition_config_t defaults = ZRT_PARTITION_CONFIG_INIT;
  space.base_bucket_bytes = defaults.bucket_bytes;
  space.base_prefetch_depth = defaults.prefetch_depth;
  space.confirm = options.confirm;
  for (size_t b : options.extra_buckets) {
    Candidate c;
    c.bucket_bytes = b;
    c.prefetch_depth = space.base_prefetch_depth;
    c.origin = "extra";
    space.extras.push_back(c);
  }
  for (int d : options.extra_depths) {
    Candidate c;
    c.bucket_bytes = space.base_bucket_bytes;
    c.prefetch_depth = d;
    c.origin = "extra";
    space.extras.push_back(c);
  }
  return space;
}

// --measure: one setting, timed like the confirmation of a tuning run.
int measure_only(const TuneOptions& options, Runner& runner) {
  zrt_partition_config_t config = ZRT_PARTITION_CONFIG_INIT;
  if (zrt_partition_config_load(options.measure_config.c_str(), &config) != ZRT_SUCCESS) {
    return fail(Status(ZRT_INVALID_ARGUMENT, std::string("--measure: ") + zrt_last_error()),
                kExitUsage);
  }
  double compute = 0;
  Measurement m;
  Status status = runner.measure_compute(&compute);
  if (status.is_ok()) status = runner.measure_config(config, 2 * options.settings.steps, &m);
  if (!status.is_ok()) return fail(status, kExitFailed);
  if (runner.rank() == 0) {
    fmt::print(
        "# zrt-tune --measure {}: {}, {} ranks, stage {}\n"
        "step {:.2f} ms, exposed communication {:.2f} ms, compute {:.2f} ms, zrt memory per rank "
        "{}\n",
        options.measure_config, options.model, runner.size(), config.stage, m.step_ms,
        m.step_ms - compute, compute,
        zrt::tools::format_size(static_cast<uint64_t>(m.memory_bytes)));
    if (!options.report.empty()) {
      nlohmann::json report = {{"config", options.measure_config},
                               {"step_ms", m.step_ms},
                               {"compute_ms", compute},
                               {"memory_bytes", m.memory_bytes},
                               {"ranks", runner.size()}};
      Status w = zrt::tools::write_text_file(options.report, report.dump(2) + "\n");
      if (!w.is_ok()) return fail(w, kExitUsage);
    }
  }
  return kExitOk;
}

int tune(const TuneOptions& options, Runner& runner) {
  TuneSummary summary;
  summary.model = options.model;
  summary.ranks = runner.size();
  summary.settings = options.settings;
  summary.profile_compute_ms = options.profile.compute_ms();
  Status status = runner.measure_compute(&summary.compute_ms);
  if (!status.is_ok()) return fail(status, kExitFailed);

  zrt::tools::ProgressLine progress(stderr, runner.rank() == 0);
  const SearchSpace space = make_space(options);
  status = run_search(
      space,
      [&](const Candidate& c, bool confirm, Measurement* m) {
        return runner.measure(c, confirm, m);
      },
      [&](size_t done, size_t total, const std::string& label) {
        progress.update(done, total, label);
      },
      &summary.result);
  progress.finish();
  if (!status.is_ok()) return fail(status, kExitFailed);
  if (runner.rank() != 0) return summary.result.best >= 0 ? kExitOk : kExitNoFit;

  fmt::print("{}", render_summary(summary));
  if (!options.report.empty()) {
    status = zrt::tools::write_text_file(options.report, report_json(summary).dump(2) + "\n");
    if (!status.is_ok()) return fail(status, kExitUsage);
  }
  if (summary.result.best < 0) {
    return fail(Status::invalid_argument(
                    "no setting fits --mem-cap {}: raise it, use a higher stage or more ranks",
                    zrt::tools::format_size(static_cast<uint64_t>(options.settings.mem_cap))),
                kExitNoFit);
  }
  const Trial& best = summary.result.trials[summary.result.best];
  status = zrt::tools::write_text_file(
      options.output, config_json(options.settings, best.candidate).dump(2) + "\n");
  if (!status.is_ok()) return fail(status, kExitUsage);
  fmt::print("# wrote {} (load it with zrt_partition_config_load)\n", options.output);
  return kExitOk;
}

// --algorithms: measure, print what was measured, write the table.
int tune_algorithms(const TuneOptions& options) {
  std::vector<AlgorithmSweep> sweeps;
  Status status = measure_algorithms(options.algorithm_tune, &sweeps);
  if (!status.is_ok()) return fail(status, kExitFailed);
  fmt::print("{}", render_sweeps(sweeps));
  const std::string table =
      "# zrt algorithm table, measured by zrt-tune --algorithms (ZRT_ALGO_TABLE loads it)\n" +
      crossover_table(sweeps).format();
  fmt::print("#\n{}", table);
  status = zrt::tools::write_text_file(options.output, table);
  if (!status.is_ok()) return fail(status, kExitUsage);
  fmt::print("# wrote {} (use it with ZRT_ALGO_TABLE={})\n", options.output, options.output);
  return kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  TuneOptions options;
  Status status = parse_tune_command(argc, argv, &options);
  if (!status.is_ok()) return fail(status, kExitUsage);
  if (options.show_help) {
    fmt::print("{}", options.help);
    return kExitOk;
  }
  if (options.algorithms) return tune_algorithms(options);
  if (options.print_profile) {
    fmt::print("{}", profile_to_json(options.profile));
    return kExitOk;
  }
  std::unique_ptr<Runner> runner;
  status = Runner::create(options.profile, options.settings, &runner);
  if (!status.is_ok()) return fail(status, kExitFailed);
  const int code =
      options.measure_config.empty() ? tune(options, *runner) : measure_only(options, *runner);
  std::fflush(stdout);
  return code;
}
