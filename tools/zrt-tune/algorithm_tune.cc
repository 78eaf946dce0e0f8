#include "tools/zrt-tune/algorithm_tune.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "lib/core/environment.h"
#include "engine/stream_resources.h"
#include "tools/common/svg_plot.h"
#include "tools/common/units.h"

namespace zrt::tune {
namespace {

std::vector<std::string> candidates(TableOp op) {
  std::vector<std::string> names;
  for (const AlgorithmInfo& info : algorithms()) {
    if (info.op == op) names.push_back(info.name);
  }
  return names;
}

// Whether `name` runs at `size` (zrt-bench's size column) on `ranks` ranks: a one-shot or
// two-shot deposit beyond the arena slot passes the forced row over, and the time measured there
// would be the fallback's under that name.
bool runs_at(TableOp op, const std::string& name, uint64_t size, int ranks) {
  if (name != kOneShotAlgorithm && name != kTwoShotAlgorithm) return true;
  const uint64_t deposit = op == TableOp::kAllGather ? size / static_cast<uint64_t>(ranks) : size;
  return deposit <= kOneShotSlotBytes;
}

constexpr TableOp kOps[] = {TableOp::kReduceScatter, TableOp::kAllGather, TableOp::kAllReduce};

// zrt-run or zrt-bench: `given`, else next to this program (installed), else in its place in the
// build tree (tools/zrt-tune/zrt-tune -> tools/NAME/NAME).
Status find_tool(const std::string& given, const std::string& name, std::string* path) {
  if (!given.empty()) {
    if (access(given.c_str(), X_OK) != 0) {
      return Status::invalid_argument("--{}: '{}' is not an executable", name, given);
    }
    *path = given;
    return Status::ok();
  }
  std::error_code error;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", error);
  if (!error) {
    for (const std::filesystem::path& candidate :
         {self.parent_path() / name, self.parent_path().parent_path() / name / name}) {
      if (access(candidate.c_str(), X_OK) == 0) {
        *path = candidate.string();
        return Status::ok();
      }
    }
  }
  return Status::invalid_argument("{} not found next to zrt-tune or in the build tree: give --{}",
                                  name, name);
}

// Runs argv with `env` added to the environment and ZRT_ALGO removed (it would override the
// forced table), stdout to /dev/null, stderr inherited.
Status run_child(const std::vector<std::string>& argv, const std::vector<std::string>& env) {
  std::vector<std::string> environment;
  for (std::string& entry : environment_entries()) {
    if (entry.rfind("ZRT_ALGO=", 0) == 0 || entry.rfind("ZRT_ALGO_TABLE=", 0) == 0) continue;
    environment.push_back(std::move(entry));
  }
  environment.insert(environment.end(), env.begin(), env.end());
  std::vector<char*> args, envp;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  for (const std::string& e : environment) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  pid_t pid = 0;
  const int spawned = posix_spawn(&pid, args[0], &actions, nullptr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) {
    return Status::error(ZRT_INTERNAL_ERROR, "cannot start {}: {}", argv[0],
                         std::strerror(spawned));
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR)
      return Status::error(ZRT_INTERNAL_ERROR, "waitpid: {}", std::strerror(errno));
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::string command;
    for (const std::string& a : argv) command += (command.empty() ? "" : " ") + a;
    return Status::error(ZRT_INTERNAL_ERROR, "{} failed ({})", command,
                         WIFEXITED(status) ? fmt::format("exit code {}", WEXITSTATUS(status))
                                           : fmt::format("signal {}", WTERMSIG(status)));
  }
  return Status::ok();
}

// zrt-bench's --json rows -> size -> (out-of-place + in-place) / 2 microseconds.
Status read_bench_json(const std::string& path, std::map<uint64_t, double>* times) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  const nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, false);
  if (j.is_discarded() || !j.contains("rows")) {
    return Status::error(ZRT_INTERNAL_ERROR, "{}: not zrt-bench's --json output", path);
  }
  for (const nlohmann::json& row : j["rows"]) {
    const double oop = row["out_of_place"]["time_us"].get<double>();
    const double in = row["in_place"]["time_us"].get<double>();
    (*times)[row["size"].get<uint64_t>()] = (oop + in) / 2;
  }
  return Status::ok();
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

std::string winner(const std::map<std::string, double>& times) {
  auto best = std::min_element(times.begin(), times.end(),
                               [](const auto& a, const auto& b) { return a.second < b.second; });
  return best == times.end() ? std::string() : best->first;
}

}  // namespace

AlgorithmTable crossover_table(const std::vector<AlgorithmSweep>& sweeps) {
  AlgorithmTable table;
  for (TableOp op : kOps) {
    std::vector<const AlgorithmSweep*> mine;
    for (const AlgorithmSweep& s : sweeps) {
      if (s.op == op && !s.time_us.empty()) mine.push_back(&s);
    }
    std::sort(mine.begin(), mine.end(),
              [](const AlgorithmSweep* a, const AlgorithmSweep* b) { return a->ranks < b->ranks; });
    for (size_t i = 0; i < mine.size(); ++i) {
      const int max_ranks = i + 1 < mine.size() ? mine[i + 1]->ranks - 1 : kAnyRanks;
      // Bands: consecutive sizes with the same winner; the first starts at 0, the last never ends.
      uint64_t band_start = 0;
      std::string band;
      uint64_t last = 0;
      auto close = [&](uint64_t max_bytes) {
        AlgorithmRow row;
        row.op = op;
        row.min_ranks = mine[i]->ranks;
        row.max_ranks = max_ranks;
        row.min_hosts = row.max_hosts = 1;  // measured with every rank on this host
        row.min_bytes = band_start;
        row.max_bytes = max_bytes;
        row.algorithm = band;
        table.add(row);
      };
      for (const auto& [size, times] : mine[i]->time_us) {
        const std::string best = winner(times);
        if (best.empty()) continue;
        if (!band.empty() && best != band) {
          close(last);
          band_start = last + 1;
        }
        band = best;
        last = size;
      }
      if (!band.empty()) close(kAnyBytes);
    }
  }
  return table;
}

std::string render_sweeps(const std::vector<AlgorithmSweep>& sweeps) {
  std::string out;
  for (const AlgorithmSweep& s : sweeps) {
    if (s.time_us.empty()) continue;
    const std::vector<std::string> names = candidates(s.op);
    out +=
        fmt::format("# {} at {} ranks: median us per call (out of place and in place averaged)\n",
                    table_op_name(s.op), s.ranks);
    out += fmt::format("# {:>9}", "size");
    for (const std::string& name : names) out += fmt::format(" {:>9}", name);
    out += "  fastest\n";
    for (const auto& [size, times] : s.time_us) {
      out += fmt::format("  {:>9}", tools::format_size(size));
      for (const std::string& name : names) {
        auto it = times.find(name);
        out += it == times.end() ? fmt::format(" {:>9}", "-") : fmt::format(" {:9.2f}", it->second);
      }
      out += "  " + winner(times) + "\n";
    }
  }
  return out;
}

Status measure_algorithms(const AlgorithmTuneOptions& options, std::vector<AlgorithmSweep>* out) {
  std::string zrt_run, zrt_bench;
  ZRT_RETURN_IF_ERROR(find_tool(options.zrt_run, "zrt-run", &zrt_run));
  ZRT_RETURN_IF_ERROR(find_tool(options.zrt_bench, "zrt-bench", &zrt_bench));
  char dir_template[] = "/tmp/zrt-tune-algorithms-XXXXXX";
  if (mkdtemp(dir_template) == nullptr) {
    return Status::error(ZRT_INTERNAL_ERROR, "mkdtemp: {}", std::strerror(errno));
  }
  const std::filesystem::path dir(dir_template);

  // samples[(op, ranks)][size][candidate] = one time per round.
  std::map<std::pair<TableOp, int>, std::map<uint64_t, std::map<std::string, std::vector<double>>>>
      samples;
  size_t runs = 0, done = 0;
  for (TableOp op : kOps) {
    if (candidates(op).size() > 1) runs += candidates(op).size();
  }
  runs *= options.ranks.size() * static_cast<size_t>(options.rounds);
  Status status;
  for (int round = 0; round < options.rounds && status.is_ok(); ++round) {
    for (int ranks : options.ranks) {
      for (TableOp op : kOps) {
        const std::vector<std::string> names = candidates(op);
        if (names.size() < 2) continue;  // nothing to choose
        for (const std::string& name : names) {
          if (!status.is_ok()) break;
          ++done;
          fmt::print(stderr, "# zrt-tune --algorithms: run {}/{}: {} {} at {} ranks\n", done, runs,
                     table_op_name(op), name, ranks);
          const std::string table = (dir / (name + ".table")).string();
          const std::string json = (dir / "bench.json").string();
          status =
              tools::write_text_file(table, fmt::format("{} * * {}\n", table_op_name(op), name));
          if (!status.is_ok()) break;
          status = run_child({zrt_run,
                              "-n",
                              std::to_string(ranks),
                              "--no-prefix",
                              zrt_bench,
                              table_op_name(op),
                              "-b",
                              std::to_string(options.min_bytes),
                              "-e",
                              std::to_string(options.max_bytes),
                              "-f",
                              fmt::format("{:g}", options.factor),
                              "-n",
                              std::to_string(options.iters),
                              "-w",
                              std::to_string(options.warmup),
                              "-c",
                              "0",
                              "--no-progress",
                              "--json",
                              json},
                             {"ZRT_ALGO_TABLE=" + table});
          std::map<uint64_t, double> times;
          if (status.is_ok()) status = read_bench_json(json, &times);
          for (const auto& [size, us] : times) {
            if (runs_at(op, name, size, ranks)) samples[{op, ranks}][size][name].push_back(us);
          }
        }
      }
    }
  }
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
  ZRT_RETURN_IF_ERROR(status);
  out->clear();
  for (const auto& [key, sizes] : samples) {
    AlgorithmSweep sweep;
    sweep.op = key.first;
    sweep.ranks = key.second;
    for (const auto& [size, by_name] : sizes) {
      for (const auto& [name, values] : by_name) sweep.time_us[size][name] = median(values);
    }
    out->push_back(std::move(sweep));
  }
  return Status::ok();
}

}  // namespace zrt::tune
