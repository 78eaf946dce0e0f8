// zrt-bench: collective bandwidth in nccl-tests' columns. See --help.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <fmt/format.h>

#include "lib/core/launcher_variables.h"
#include "tools/common/svg_plot.h"
#include "tools/zrt-bench/bench_options.h"
#include "tools/zrt-bench/bench_report.h"
#include "tools/zrt-bench/bench_runner.h"

namespace {

constexpr int kExitOk = 0, kExitFailure = 1, kExitUsage = 2, kExitWrong = 3;

// Before the communicator exists the rank is only known from the launcher's environment; the
// other ranks stay quiet so that a usage error prints once.
bool env_says_rank0() {
  const zrt::LauncherVariables launcher = zrt::LauncherVariables::load();
  for (const char* name : {"ZRT_RANK", "RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"}) {
    const char* value = launcher.value(name);
    if (value != nullptr) return std::atoi(value) == 0;
  }
  return true;
}

// With --json -, stdout carries the report alone: UCX writes its warnings to stdout (a line
// such as "[1796353343.569591] [host:pid:0] tag_match.c:62 UCX WARN ..." at teardown, which
// broke the report's JSON for a reader of rank 0's output). The report keeps a copy of stdout;
// stdout itself then points at stderr, before the communicator exists. Returns the copy's
// FILE*, or nullptr with errno set.
FILE* keep_stdout_for_the_report() {
  std::fflush(stdout);
  const int report = dup(STDOUT_FILENO);
  if (report < 0) return nullptr;
  if (dup2(STDERR_FILENO, STDOUT_FILENO) < 0) {
    const int error = errno;
    close(report);
    errno = error;
    return nullptr;
  }
  return fdopen(report, "w");
}

}  // namespace

int main(int argc, char** argv) {
  using namespace zrt::bench;
  BenchOptions options;
  ParseResult parsed;
  zrt::Status status = parse_bench_options(argc, argv, &options, &parsed);
  if (!status.is_ok()) {
    if (env_says_rank0()) fmt::print(stderr, "zrt-bench: {}\n", status.message());
    return kExitUsage;
  }
  if (parsed.show_help) {
    if (env_says_rank0()) fmt::print("{}", parsed.text);
    return kExitOk;
  }

  FILE* report = stdout;
  if (options.json_path == "-") {
    report = keep_stdout_for_the_report();
    if (report == nullptr) {
      fmt::print(stderr, "zrt-bench: --json -: cannot keep stdout for the report: {}\n",
                 std::strerror(errno));
      return kExitFailure;
    }
  }
  std::vector<BenchRow> rows;
  RunInfo info;
  bool rank0 = false;
  status = run_benchmark(options, &rows, &info, &rank0);
  if (!status.is_ok()) {
    fmt::print(stderr, "zrt-bench: {}\n", status.message());
    return status.code() == ZRT_INVALID_ARGUMENT ? kExitUsage : kExitFailure;
  }
  if (!rank0) return total_wrong(rows) > 0 ? kExitWrong : kExitOk;

  if (options.collectives.size() > 1 && options.json_path != "-") {
    fmt::print("# Summary: average bus bandwidth (GB/s)\n");
    for (Coll coll : options.collectives) {
      std::vector<BenchRow> mine;
      for (const BenchRow& row : rows) {
        if (row.coll == coll) mine.push_back(row);
      }
      fmt::print("#   {:<16} {:8.3f}\n", coll_name(coll), average_busbw(mine));
    }
    fmt::print("# Avg bus bandwidth    : {:.4g}\n", average_busbw(rows));
  }
  if (!options.json_path.empty()) {
    std::string text = rows_to_json(options, info, rows).dump(2) + "\n";
    if (options.json_path == "-") {
      fmt::print(report, "{}", text);
      if (std::fflush(report) != 0) {
        fmt::print(stderr, "zrt-bench: --json -: {}\n", std::strerror(errno));
        return kExitFailure;
      }
    } else {
      status = zrt::tools::write_text_file(options.json_path, text);
      if (!status.is_ok()) {
        fmt::print(stderr, "zrt-bench: --json: {}\n", status.message());
        return kExitFailure;
      }
    }
  }
  if (!options.plot_path.empty()) {
    std::string svg;
    status = render_busbw_plot(rows, info.ranks, &svg);
    if (status.is_ok()) status = zrt::tools::write_text_file(options.plot_path, svg);
    if (!status.is_ok()) {
      fmt::print(stderr, "zrt-bench: --plot: {}\n", status.message());
      return kExitFailure;
    }
  }
  return total_wrong(rows) > 0 ? kExitWrong : kExitOk;
}
