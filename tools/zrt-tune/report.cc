#include "tools/zrt-tune/report.h"

#include <fmt/format.h>

#include "lib/core/dtype.h"
#include "tools/common/table.h"
#include "tools/common/units.h"

namespace zrt::tune {
namespace {

std::string ms_text(double ms) {
  return ms > 0 ? fmt::format("{:.2f}", ms) : "-";
}

}  // namespace

std::string render_summary(const TuneSummary& s) {
  const RunSettings& rs = s.settings;
  std::string out;
  out += fmt::format("# zrt-tune: {}, {} ranks, stage {}, params {}, reduce {}, {} optimizer slots",
                     s.model, s.ranks, rs.stage, dtype_name(rs.param_dtype),
                     dtype_name(rs.reduce_dtype), rs.optimizer_slots);
  if (rs.mem_cap > 0) out += ", cap " + tools::format_size(static_cast<uint64_t>(rs.mem_cap));
  out += fmt::format(
      "\n# compute per step: {:.2f} ms in the profile, {:.2f} ms measured (sleeps alone)\n"
      "# per candidate: {} warm-up + {} timed steps, median of the slowest rank; the fastest are "
      "timed again ({} steps)\n",
      s.profile_compute_ms, s.compute_ms, rs.warmup, rs.steps, 2 * rs.steps);

  tools::Table table;
  table.add_column("#");
  table.add_column("setting", tools::Table::Align::kLeft);
  table.add_column("from", tools::Table::Align::kLeft);
  table.add_column("step ms");
  table.add_column("again ms");
  table.add_column("exposed ms");
  table.add_column("zrt mem/rank");
  table.add_column("note", tools::Table::Align::kLeft);
  for (size_t i = 0; i < s.result.trials.size(); ++i) {
    const Trial& t = s.result.trials[i];
    std::string note;
    if (t.sweep.skipped) {
      note = "over cap (skipped: a smaller value was)";
    } else if (!t.sweep.fits) {
      note = "over cap";
    } else if (static_cast<int>(i) == s.result.best) {
      note = "<- recommended";
    }
    const double step = t.sweep.step_ms;
    table.add_row(
        {std::to_string(i + 1), describe(t.candidate, rs.stage), t.candidate.origin, ms_text(step),
         ms_text(t.confirm_ms), step > 0 ? fmt::format("{:.2f}", step - s.compute_ms) : "-",
         t.sweep.skipped ? "-" : tools::format_size(static_cast<uint64_t>(t.sweep.memory_bytes)),
         note});
  }
  out += table.render("# ");
  if (s.result.best >= 0) {
    const Trial& best = s.result.trials[s.result.best];
    out += fmt::format(
        "# recommended: {} -> step {:.2f} ms (exposed communication {:.2f} ms, {:.0f}% of the "
        "step), {} zrt memory per rank\n",
        describe(best.candidate, rs.stage), best.confirm_ms, best.confirm_ms - s.compute_ms,
        best.confirm_ms > 0 ? 100.0 * (best.confirm_ms - s.compute_ms) / best.confirm_ms : 0.0,
        tools::format_size(static_cast<uint64_t>(best.sweep.memory_bytes)));
  } else {
    out += "# no candidate fits the memory cap\n";
  }
  return out;
}

nlohmann::json config_json(const RunSettings& settings, const Candidate& c) {
  return {{"stage", settings.stage},
          {"param_dtype", dtype_name(settings.param_dtype)},
          {"reduce_dtype", dtype_name(settings.reduce_dtype)},
          {"optimizer_slots", settings.optimizer_slots},
          {"bucket_bytes", c.bucket_bytes},
          {"prefetch_depth", c.prefetch_depth},
          {"prefetch_bytes", c.prefetch_bytes},
          {"persistence_threshold", settings.persistence_threshold}};
}

nlohmann::json report_json(const TuneSummary& s) {
  nlohmann::json trials = nlohmann::json::array();
  for (const Trial& t : s.result.trials) {
    trials.push_back({{"bucket_bytes", t.candidate.bucket_bytes},
                      {"prefetch_depth", t.candidate.prefetch_depth},
                      {"prefetch_bytes", t.candidate.prefetch_bytes},
                      {"origin", t.candidate.origin},
                      {"skipped", t.sweep.skipped},
                      {"fits", t.sweep.fits},
                      {"step_ms", t.sweep.step_ms},
                      {"confirm_ms", t.confirm_ms},
                      {"exposed_ms", t.sweep.step_ms > 0 ? t.sweep.step_ms - s.compute_ms : 0.0},
                      {"memory_bytes", t.sweep.memory_bytes}});
  }
  nlohmann::json report = {{"model", s.model},
                           {"ranks", s.ranks},
                           {"stage", s.settings.stage},
                           {"mem_cap", s.settings.mem_cap},
                           {"profile_compute_ms", s.profile_compute_ms},
                           {"compute_ms", s.compute_ms},
                           {"trials", std::move(trials)},
                           {"recommended", s.result.best}};
  if (s.result.best >= 0) {
    const Trial& best = s.result.trials[s.result.best];
    report["recommended_step_ms"] = best.confirm_ms;
    report["config"] = config_json(s.settings, best.candidate);
  }
  return report;
}

}  // namespace zrt::tune
