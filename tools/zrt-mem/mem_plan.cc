#include "tools/zrt-mem/mem_plan.h"

#include <fmt/format.h>

#include "lib/core/dtype.h"
#include "tools/common/table.h"
#include "tools/common/units.h"

namespace zrt::mem {

Status plan_memory(const MemRequest& request, MemPlan* plan) {
  if (request.ranks < 1)
    return Status::invalid_argument("--ranks must be at least 1, got {}", request.ranks);
  MemPlan out;
  for (int stage : request.stages) {
    PartitionOptions options = request.options;
    options.stage = stage;
    if (stage != 3) options.hpz_group_size = 0;  // hpZ's secondary copy is stage 3's
    ZRT_RETURN_IF_ERROR(
        validate_partition_options(options).with_context(fmt::format("stage {}", stage)));
    StagePlan sp;
    sp.stage = stage;
    // Hybrid sharding holds what a flat manager on the group's G ranks holds (stage 0 shards
    // nothing: N).
    const int shard_ranks =
        stage > 0 && request.shard_group > 0 ? request.shard_group : request.ranks;
    ZRT_RETURN_IF_ERROR(compute_memory_figures(options, shard_ranks, request.model.units,
                                               request.model.params, &sp.figures)
                            .with_context(fmt::format("stage {}", stage)));
    out.stages.push_back(sp);
  }
  if (request.model.has_shape) {
    out.has_activations = true;
    out.activations =
        estimate_activations(request.model.shape, dtype_size(request.options.param_dtype));
  }
  *plan = std::move(out);
  return Status::ok();
}

namespace {

std::string gb(double bytes) {
  return tools::format_gb(bytes);
}

// The whole footprint against the ZeRO formula, which counts model state alone: the buffers
// and the step backup are what a user would otherwise miss when sizing by the paper. With
// offload both sides sum device and host. A model with nothing to hold has no ratio (0 here,
// null in JSON, "-" in the table).
double total_over_formula(const MemoryFigures& f) {
  return f.theoretical_model_state > 0 ? double(f.total) / f.theoretical_model_state : 0;
}

std::string ratio(const MemoryFigures& f) {
  const double r = total_over_formula(f);
  return r > 0 ? fmt::format("{:.2f}x", r) : std::string("-");
}

}  // namespace

std::string render_mem_plan(const MemRequest& request, const MemPlan& plan) {
  const PartitionOptions& o = request.options;
  std::string out = fmt::format(
      "# zrt-mem: {}\n# {} ranks{}{}; parameters {}, gradients reduced in {}, master f32, "
      "optimizer {} f32 slot(s); bucket {}, prefetch depth {}, alignment {}\n#\n",
      request.model.description, request.ranks,
      request.shard_group > 0 && request.shard_group < request.ranks
          ? fmt::format(" (stages 1-3 sharded in groups of {}, {} replicas)", request.shard_group,
                        request.ranks / request.shard_group)
          : "",
      o.hpz_group_size > 0
          ? fmt::format(" (stage 3 with hpZ: a secondary copy in groups of {})", o.hpz_group_size)
          : "",
      dtype_name(o.param_dtype), dtype_name(o.reduce_dtype), o.optimizer_slots,
      tools::format_size(o.bucket_bytes), o.prefetch_depth, o.alignment);

  tools::Table t;
  t.add_column("per rank", tools::Table::Align::kLeft);
  for (const StagePlan& sp : plan.stages) {
    t.add_column(sp.stage == 0 ? "stage 0 (DP)" : fmt::format("stage {}", sp.stage));
  }
  auto row = [&](const std::string& label, auto value) {
    std::vector<std::string> cells{label};
    for (const StagePlan& sp : plan.stages) cells.push_back(value(sp.figures));
    t.add_row(cells);
  };
  t.add_separator("model state");
  row("parameters",
      [](const MemoryFigures& f) { return gb(double(f.full_params + f.param_shard)); });
  if (o.hpz_group_size > 0) {
    row("hpZ secondary parameters",
        [](const MemoryFigures& f) { return gb(double(f.param_secondary)); });
  }
  row("gradients", [](const MemoryFigures& f) { return gb(double(f.gradients + f.grad_shard)); });
  row("master weights (f32)", [](const MemoryFigures& f) { return gb(double(f.master)); });
  row(fmt::format("optimizer state ({} x f32)", o.optimizer_slots),
      [](const MemoryFigures& f) { return gb(double(f.optimizer_state)); });
  row("= model state", [](const MemoryFigures& f) { return gb(double(f.model_state)); });
  row("ZeRO formula (unpadded)",
      [](const MemoryFigures& f) { return gb(f.theoretical_model_state); });
  t.add_separator("constant buffers (independent of model size)");
  row("reduction buckets", [](const MemoryFigures& f) { return gb(double(f.buckets)); });
  row("gather window (stage 3)",
      [](const MemoryFigures& f) { return gb(double(f.gather_window)); });
  row("gradient staging", [](const MemoryFigures& f) { return gb(double(f.grad_staging)); });
  row("step backup (rollback)", [](const MemoryFigures& f) { return gb(double(f.step_backup)); });
  row("= zrt total", [](const MemoryFigures& f) { return gb(double(f.total)); });
  row("total / ZeRO formula", [](const MemoryFigures& f) { return ratio(f); });
  if (o.offload_optimizer) {
    t.add_separator("offload_optimizer: device memory / host memory");
    row("device: model state",
        [](const MemoryFigures& f) { return gb(double(f.device_model_state)); });
    row("device: formula (unpadded)",
        [](const MemoryFigures& f) { return gb(f.theoretical_device_model_state); });
    row("device: total", [](const MemoryFigures& f) { return gb(double(f.device_total)); });
    row("host: master + optimizer state",
        [](const MemoryFigures& f) { return gb(double(f.host_model_state)); });
    row("host: formula (unpadded)",
        [](const MemoryFigures& f) { return gb(f.theoretical_host_model_state); });
    row("host: total (+ backup, f32 gradient)",
        [](const MemoryFigures& f) { return gb(double(f.host_total)); });
  }
  if (plan.has_activations) {
    const ActivationEstimate& a = plan.activations;
    t.add_separator(fmt::format("activations (micro-batch {}, sequence {}; same for every stage)",
                                request.model.shape.micro_batch, request.model.shape.seq));
    row("without checkpointing", [&](const MemoryFigures&) { return gb(a.without_checkpointing); });
    row("with checkpointing", [&](const MemoryFigures&) { return gb(a.with_checkpointing); });
    row("zrt total + activations",
        [&](const MemoryFigures& f) { return gb(double(f.total) + a.without_checkpointing); });
    row("  ... with checkpointing",
        [&](const MemoryFigures& f) { return gb(double(f.total) + a.with_checkpointing); });
  }
  if (request.device_bytes > 0) {
    t.add_separator(fmt::format("fits in {} per device?", gb(request.device_bytes)));
    auto fits = [&](double need) {
      return need <= request.device_bytes ? std::string("yes") : std::string("no");
    };
    if (plan.has_activations) {
      row("without checkpointing", [&](const MemoryFigures& f) {
        return fits(double(f.device_total) + plan.activations.without_checkpointing);
      });
      row("with checkpointing", [&](const MemoryFigures& f) {
        return fits(double(f.device_total) + plan.activations.with_checkpointing);
      });
    } else {
      row("zrt total (no activations)",
          [&](const MemoryFigures& f) { return fits(double(f.device_total)); });
    }
  }
  out += t.render("# ");
  if (!plan.has_activations) {
    out +=
        "# (activations: give a transformer shape, --layers/--hidden/--heads, to estimate them)\n";
  }
  return out;
}

nlohmann::json mem_plan_to_json(const MemRequest& request, const MemPlan& plan) {
  const PartitionOptions& o = request.options;
  nlohmann::json j;
  j["tool"] = "zrt-mem";
  j["model"] = {{"description", request.model.description},
                {"parameters", request.model.total_params()},
                {"frozen_parameters", request.model.frozen_params()},
                {"units", request.model.units.size()}};
  j["settings"] = {{"ranks", request.ranks},
                   {"shard_group", request.shard_group > 0 ? request.shard_group : request.ranks},
                   {"hpz_group", o.hpz_group_size},
                   {"param_dtype", dtype_name(o.param_dtype)},
                   {"reduce_dtype", dtype_name(o.reduce_dtype)},
                   {"optimizer_slots", o.optimizer_slots},
                   {"bucket_bytes", o.bucket_bytes},
                   {"prefetch_depth", o.prefetch_depth},
                   {"prefetch_bytes", o.prefetch_bytes},
                   {"max_live_bytes", o.max_live_bytes},
                   {"persistence_threshold", o.persistence_threshold},
                   {"alignment", o.alignment},
                   {"no_sync_accumulation", o.no_sync_accumulation},
                   {"step_backup", step_backup_name(o.step_backup)},
                   {"grad_windows", o.grad_windows},
                   {"offload_optimizer", o.offload_optimizer},
                   {"device_bytes", request.device_bytes}};
  for (const StagePlan& sp : plan.stages) {
    const MemoryFigures& f = sp.figures;
    nlohmann::json s = {{"stage", sp.stage},
                        {"full_params", f.full_params},
                        {"param_shard", f.param_shard},
                        {"param_secondary", f.param_secondary},
                        {"gradients", f.gradients},
                        {"grad_shard", f.grad_shard},
                        {"master", f.master},
                        {"optimizer_state", f.optimizer_state},
                        {"buckets", f.buckets},
                        {"gather_window", f.gather_window},
                        {"grad_staging", f.grad_staging},
                        {"step_backup", f.step_backup},
                        {"model_state", f.model_state},
                        {"total", f.total},
                        {"theoretical_model_state", f.theoretical_model_state},
                        {"parameters", f.parameters},
                        {"padded_parameters", f.padded_parameters},
                        {"device_model_state", f.device_model_state},
                        {"device_total", f.device_total},
                        {"host_model_state", f.host_model_state},
                        {"host_total", f.host_total},
                        {"theoretical_device_model_state", f.theoretical_device_model_state},
                        {"theoretical_host_model_state", f.theoretical_host_model_state}};
    const double over = total_over_formula(f);
    s["total_over_formula"] = over > 0 ? nlohmann::json(over) : nlohmann::json(nullptr);
    if (plan.has_activations) {
      s["total_with_activations"] = double(f.total) + plan.activations.without_checkpointing;
      s["total_with_checkpointed_activations"] =
          double(f.total) + plan.activations.with_checkpointing;
    }
    if (request.device_bytes > 0) {
      double need =
          double(f.device_total) + (plan.has_activations ? plan.activations.with_checkpointing : 0);
      s["fits_with_checkpointing"] = need <= request.device_bytes;
      if (plan.has_activations) {
        s["fits_without_checkpointing"] =
            double(f.device_total) + plan.activations.without_checkpointing <= request.device_bytes;
      }
    }
    j["stages"].push_back(s);
  }
  if (plan.has_activations) {
    j["activations"] = {{"without_checkpointing", plan.activations.without_checkpointing},
                        {"with_checkpointing", plan.activations.with_checkpointing}};
  }
  return j;
}

}  // namespace zrt::mem
