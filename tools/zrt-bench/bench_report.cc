#include "tools/zrt-bench/bench_report.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "tools/common/svg_plot.h"
#include "tools/common/units.h"

namespace zrt::bench {
namespace {

// The header's and the JSON's name of the buffers' memory.
const char* memory_name(const BenchOptions& options) {
  if (options.mem_kind == ZRT_MEM_CUDA) return "cuda";
  return options.registered ? "host-registered" : "host";
}

}  // namespace

CollShape coll_shape(Coll coll, uint64_t requested_bytes, zrt_dtype_t dtype, int ranks) {
  const uint64_t type_bytes = dtype_bytes(dtype);
  const uint64_t parts =
      (coll == Coll::kReduceScatter || coll == Coll::kAllGather) ? static_cast<uint64_t>(ranks) : 1;
  uint64_t count = requested_bytes / (type_bytes * parts);
  if (count == 0) count = 1;
  return {count, count * type_bytes * parts};
}

double busbw_factor(Coll coll, int ranks) {
  const double n = ranks;
  switch (coll) {
    case Coll::kReduceScatter:
    case Coll::kAllGather:
      return (n - 1) / n;
    case Coll::kAllReduce:
      return 2 * (n - 1) / n;
    case Coll::kBroadcast:
    case Coll::kReduce:
      return 1.0;
  }
  return 1.0;
}

Measure make_measure(Coll coll, uint64_t bytes, int ranks, double time_us, int64_t wrong) {
  Measure m;
  m.time_us = time_us;
  m.algbw_gbs = time_us > 0 ? static_cast<double>(bytes) / (time_us * 1e3) : 0.0;
  m.busbw_gbs = m.algbw_gbs * busbw_factor(coll, ranks);
  m.wrong = wrong;
  return m;
}

bool coll_has_op(Coll coll) {
  return coll != Coll::kAllGather && coll != Coll::kBroadcast;
}
bool coll_has_root(Coll coll) {
  return coll == Coll::kBroadcast || coll == Coll::kReduce;
}

std::string format_settings(const BenchOptions& options, const RunInfo& info) {
  std::string step = options.step_bytes > 0 ? fmt::format("{}(bytes)", options.step_bytes)
                                            : fmt::format("{:g}(factor)", options.step_factor);
  std::string out = fmt::format(
      "# zrt-bench  ranks {} ({} hosts, {} local)  memory {}  minBytes {} maxBytes {} step: {} "
      "warmup iters: {} iters: {} validation: {} blocking: {} average: {}\n#\n",
      info.ranks, info.hosts, info.local_ranks, memory_name(options), options.min_bytes,
      options.max_bytes, step, options.warmup, options.iters, options.check ? 1 : 0,
      options.blocking ? 1 : 0, static_cast<int>(options.average));
  out += "# Using ranks\n";
  for (const std::string& line : info.rank_lines) out += "#  " + line + "\n";
  out += "#\n";
  return out;
}

std::string format_table_header() {
  return "#                                                              out-of-place              "
         "         in-place\n"
         "#       size         count      type   redop    root     time   algbw   busbw #wrong     "
         "time   algbw   busbw #wrong\n"
         "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            "
         "(us)  (GB/s)  (GB/s)\n";
}

namespace {

std::string format_time(double us) {
  // Keep the 7-character column: large times lose decimals rather than push the row out.
  if (us < 1e4) return fmt::format("{:7.2f}", us);
  if (us < 1e5) return fmt::format("{:7.1f}", us);
  return fmt::format("{:7.0f}", us);
}

std::string format_measure(const Measure& m) {
  std::string wrong = m.wrong < 0 ? "N/A" : fmt::format("{}", m.wrong);
  return fmt::format("  {}  {:6.2f}  {:6.2f}  {:>5}", format_time(m.time_us), m.algbw_gbs,
                     m.busbw_gbs, wrong);
}

}  // namespace

std::string format_row(const BenchRow& row) {
  return fmt::format("{:12}  {:12}  {:>8}  {:>6}  {:6}", row.bytes, row.count,
                     dtype_display_name(row.dtype),
                     coll_has_op(row.coll) ? op_display_name(row.op) : "none",
                     coll_has_root(row.coll) ? row.root : -1) +
         format_measure(row.out_of_place) + format_measure(row.in_place) + "\n";
}

double average_busbw(const std::vector<BenchRow>& rows) {
  if (rows.empty()) return 0.0;
  double sum = 0;
  for (const BenchRow& row : rows) sum += row.out_of_place.busbw_gbs + row.in_place.busbw_gbs;
  return sum / static_cast<double>(2 * rows.size());
}

int64_t total_wrong(const std::vector<BenchRow>& rows) {
  int64_t total = -1;
  for (const BenchRow& row : rows) {
    for (const Measure* m : {&row.out_of_place, &row.in_place}) {
      if (m->wrong >= 0) total = (total < 0 ? 0 : total) + m->wrong;
    }
  }
  return total;
}

namespace {

nlohmann::json measure_json(const Measure& m) {
  nlohmann::json j = {
      {"time_us", m.time_us}, {"algbw_gbs", m.algbw_gbs}, {"busbw_gbs", m.busbw_gbs}};
  j["wrong"] = m.wrong < 0 ? nlohmann::json(nullptr) : nlohmann::json(m.wrong);
  return j;
}

}  // namespace

nlohmann::json rows_to_json(const BenchOptions& options, const RunInfo& info,
                            const std::vector<BenchRow>& rows) {
  nlohmann::json j;
  j["tool"] = "zrt-bench";
  j["version"] = fmt::format("{}.{}.{}", ZRT_VERSION_MAJOR, ZRT_VERSION_MINOR, ZRT_VERSION_PATCH);
  nlohmann::json settings;
  for (Coll c : options.collectives) settings["collectives"].push_back(coll_name(c));
  settings["min_bytes"] = options.min_bytes;
  settings["max_bytes"] = options.max_bytes;
  settings["step_factor"] = options.step_bytes > 0 ? 1.0 : options.step_factor;
  settings["step_bytes"] = options.step_bytes;
  settings["iters"] = options.iters;
  settings["warmup_iters"] = options.warmup;
  settings["check"] = options.check;
  for (zrt_dtype_t d : options.dtypes) settings["dtypes"].push_back(dtype_display_name(d));
  for (zrt_op_t o : options.ops) settings["ops"].push_back(op_display_name(o));
  settings["root"] = options.root;
  settings["blocking"] = options.blocking;
  settings["average"] = static_cast<int>(options.average);
  settings["memory"] = memory_name(options);
  j["settings"] = settings;
  j["topology"] = {{"ranks", info.ranks},          {"local_ranks", info.local_ranks},
                   {"hosts", info.hosts},          {"hostname", info.hostname},
                   {"cores", info.cores},          {"numa_nodes", info.numa_nodes},
                   {"rank_lines", info.rank_lines}};
  j["rows"] = nlohmann::json::array();
  std::map<std::string, std::vector<BenchRow>> by_coll;
  for (const BenchRow& row : rows) {
    j["rows"].push_back({{"collective", coll_name(row.coll)},
                         {"size", row.bytes},
                         {"count", row.count},
                         {"type", dtype_display_name(row.dtype)},
                         {"redop", coll_has_op(row.coll) ? op_display_name(row.op) : "none"},
                         {"root", coll_has_root(row.coll) ? row.root : -1},
                         {"out_of_place", measure_json(row.out_of_place)},
                         {"in_place", measure_json(row.in_place)}});
    by_coll[coll_name(row.coll)].push_back(row);
  }
  for (const auto& [name, coll_rows] : by_coll) j["avg_busbw_gbs"][name] = average_busbw(coll_rows);
  j["avg_busbw_gbs"]["all"] = average_busbw(rows);
  int64_t wrong = total_wrong(rows);
  j["wrong"] = wrong < 0 ? nlohmann::json(nullptr) : nlohmann::json(wrong);
  return j;
}

Status render_busbw_plot(const std::vector<BenchRow>& rows, int ranks, std::string* svg) {
  tools::Plot plot;
  plot.title = fmt::format("zrt-bench: bus bandwidth, {} ranks (out-of-place)", ranks);
  plot.x_label = "message size (bytes, log scale)";
  plot.y_label = "bus bandwidth (GB/s)";
  plot.log_x = true;
  plot.x_tick_label = [](double x) {
    std::string s = tools::format_size(static_cast<uint64_t>(x));
    s.erase(std::remove(s.begin(), s.end(), ' '), s.end());
    return s;
  };
  // A line per collective; dtype and op join the name only when the run had several.
  bool many_types = false, many_ops = false;
  for (const BenchRow& row : rows) {
    many_types |= row.dtype != rows.front().dtype;
    many_ops |= coll_has_op(row.coll) && row.op != rows.front().op;
  }
  std::map<std::string, size_t> index;
  for (const BenchRow& row : rows) {
    std::string name = coll_name(row.coll);
    if (many_types) name += std::string(" ") + dtype_display_name(row.dtype);
    if (many_ops && coll_has_op(row.coll)) name += std::string(" ") + op_display_name(row.op);
    auto [it, inserted] = index.emplace(name, plot.series.size());
    if (inserted) plot.series.push_back({name, {}, {}});
    tools::PlotSeries& s = plot.series[it->second];
    s.x.push_back(static_cast<double>(row.bytes));
    s.y.push_back(row.out_of_place.busbw_gbs);
  }
  return tools::render_svg(plot, svg);
}

}  // namespace zrt::bench
