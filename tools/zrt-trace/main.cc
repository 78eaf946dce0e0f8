// zrt-trace: merges the flight-recorder files of a job (one per rank, written on a failure, on
// SIGTERM/SIGUSR1 with ZRT_TRACE_DIR set, or by zrt_comm_dump_trace) and names where the ranks
// diverged: which rank is behind, at which collective, and which call each peer waits in.
//
//   zrt-trace DIR_OR_FILES...
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "tools/zrt-trace/trace_merge.h"

namespace {

constexpr int kExitOk = 0, kExitFailure = 1, kExitUsage = 2;

int fail(const zrt::Status& status) {
  std::fprintf(stderr, "zrt-trace: %s\n", status.message().c_str());
  return kExitFailure;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Merges zrt flight-recorder files (zrt-trace-r<rank>-c<n>.jsonl) and names where the "
      "ranks diverged"};
  std::vector<std::string> inputs;
  app.add_option("inputs", inputs, "directories (every zrt-trace-*.jsonl in them) or files")
      ->required();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    const int code = app.exit(error);
    return code == 0 ? kExitOk : kExitUsage;
  }
  std::vector<std::string> files;
  for (const std::string& input : inputs) {
    std::error_code error;
    if (std::filesystem::is_directory(input, error)) {
      for (const auto& item : std::filesystem::directory_iterator(input, error)) {
        const std::string name = item.path().filename().string();
        if (name.rfind("zrt-trace-", 0) == 0 && item.path().extension() == ".jsonl") {
          files.push_back(item.path().string());
        }
      }
      if (error) {
        return fail(zrt::Status::invalid_argument("{}: {}", input, error.message()));
      }
    } else if (std::filesystem::is_regular_file(input, error)) {
      files.push_back(input);
    } else {
      return fail(zrt::Status::invalid_argument(
          "{}: no such file or directory (give the ZRT_TRACE_DIR of the job, or its files)",
          input));
    }
  }
  if (files.empty()) {
    return fail(zrt::Status::invalid_argument(
        "no zrt-trace-*.jsonl files in {} (did the job run with ZRT_TRACE_DIR set?)",
        inputs.front()));
  }
  std::map<std::pair<int, int>, std::vector<zrt::tools::RankTrace>> communicators;
  for (const std::string& file : files) {
    std::ifstream in(file);
    std::stringstream text;
    text << in.rdbuf();
    if (!in) return fail(zrt::Status::invalid_argument("{}: cannot be read", file));
    zrt::tools::RankTrace trace;
    const zrt::Status parsed = zrt::tools::parse_rank_trace(text.str(), file, &trace);
    if (!parsed.is_ok()) return fail(parsed);
    communicators[{trace.instance, trace.size}].push_back(std::move(trace));
  }
  for (auto& [key, traces] : communicators) {
    zrt::tools::MergeReport report;
    const zrt::Status merged = zrt::tools::merge_traces(traces, &report);
    if (!merged.is_ok()) return fail(merged);
    std::fputs(report.text.c_str(), stdout);
  }
  return kExitOk;
}
