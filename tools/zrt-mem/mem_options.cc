#include "tools/zrt-mem/mem_options.h"

#include <cstdlib>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "lib/core/dtype.h"
#include "lib/core/launcher_variables.h"
#include "tools/common/json_file.h"
#include "tools/common/units.h"

namespace zrt::mem {
namespace {

Status parse_dtype(const std::string& text, const char* flag, zrt_dtype_t* dtype) {
  if (!dtype_from_name(text.c_str(), dtype)) {
    return Status::invalid_argument("{}: unknown data type '{}' (choose f32, f16 or bf16)", flag,
                                    text);
  }
  return Status::ok();
}

Status optimizer_slots(const std::string& name, int* slots) {
  if (name == "adam" || name == "adamw" || name == "lamb")
    *slots = 2;
  else if (name == "momentum" || name == "sgd-momentum" || name == "adafactor" || name == "lion")
    *slots = 1;
  else if (name == "sgd")
    *slots = 0;
  else
    return Status::invalid_argument(
        "--optimizer: unknown optimizer '{}' (adam, adamw, lamb: 2 slots; momentum, lion: 1; "
        "sgd: 0; or give --optimizer-slots)",
        name);
  return Status::ok();
}

}  // namespace

Status parse_mem_command(int argc, const char* const* argv, MemCommand* command) {
  CLI::App app{
      "zrt-mem: memory per rank for ZeRO stages 0-3, without running anything.\n"
      "The figures come from the partition manager's own memory model, so they are what\n"
      "zrt_partition_memory reports once the model is registered with the same settings."};
  app.footer(
      "Model: --params COUNT (split into --units equal units), or a transformer shape\n"
      "(--layers --hidden --heads [--vocab --seq --micro-batch], which also gives activations),\n"
      "or --profile FILE: {\"units\": [{\"name\": \"embed\", \"params\": 38597376}, {\"name\":\n"
      "\"block0\", \"params\": [{\"name\": \"qkv.weight\", \"numel\": 1769472}, ...]}, ...]}.\n"
      "Defaults: f16 parameters and gradients, f32 master, Adam (2 slots): the ZeRO paper's\n"
      "mixed precision (16 bytes per parameter in plain data parallelism). The partition\n"
      "manager's own default is f32: pass --dtype f32 to plan for an unconfigured manager, or\n"
      "--config FILE to plan for exactly the JSON config it will load.\n"
      "\n"
      "Examples:\n"
      "  zrt-mem --params 7.5e9 --ranks 64                  the ZeRO paper's example\n"
      "  zrt-mem --params 1.3B --ranks 8 --gpu-memory 24GB  which stages fit on 24 GB cards\n"
      "  zrt-mem --layers 48 --hidden 1600 --heads 25 --seq 1024 --micro-batch 4 --ranks 16\n"
      "  zrt-mem --profile model.json --ranks 8 --config zrt.json --stage 3 --json\n"
      "  zrt-mem --params 1.3B --ranks 8 --offload          device and host columns "
      "(ZeRO-Offload)\n"
      "\n"
      "Exit codes: 0 ok, 2 bad command line or input file.");

  std::string params, profile, config, dtype, param_dtype, reduce_dtype, optimizer = "adam";
  std::string bucket, prefetch_bytes, max_live, device;
  int units = 32, slots = -1, prefetch_depth = -1, alignment = 0, stage = -1;
  long long persistence = -1;
  TransformerShape shape;
  bool no_sync = false;
  bool no_step_backup = false;
  std::string step_backup = "segment";
  int grad_windows = 0;
  bool offload = false;
  int ranks = 0;
  app.add_option("--params", params, "trainable parameters: 7.5e9, 7.5B, 125M");
  app.add_option("--units", units, "units (layers) the --params are split into (default 32)")
      ->check(CLI::Range(1, 1000000));
  app.add_option("--profile", profile, "model profile JSON file (units and their parameters)");
  auto* layers = app.add_option("--layers", shape.layers, "transformer layers");
  app.add_option("--hidden", shape.hidden, "transformer hidden size");
  app.add_option("--heads", shape.heads, "attention heads");
  app.add_option("--vocab", shape.vocab, "vocabulary size (default 50257)");
  app.add_option("--seq", shape.seq, "sequence length (default 1024)");
  app.add_option("--micro-batch", shape.micro_batch, "micro-batch size per rank (default 1)");
  app.add_option("-n,--ranks", ranks, "data-parallel ranks N (default $WORLD_SIZE)");
  app.add_option("--stage", stage, "plan only this stage (default: 0, 1, 2 and 3)")
      ->check(CLI::Range(0, 3));
  app.add_option("--config", config,
                 "partition config JSON (what zrt_partition_config_load "
                 "reads); flags below override it");
  app.add_option("--dtype", dtype, "parameter and gradient dtype: f16, bf16, f32 (default f16)");
  app.add_option("--param-dtype", param_dtype, "parameter dtype");
  app.add_option("--reduce-dtype", reduce_dtype, "gradient reduction dtype (default: --dtype)");
  app.add_option("--optimizer", optimizer, "adam (default), adamw, lamb, momentum, lion, sgd");
  app.add_option("--optimizer-slots", slots,
                 "f32 state arrays per parameter (overrides "
                 "--optimizer)")
      ->check(CLI::Range(0, 16));
  app.add_option("--bucket", bucket, "reduction bucket size (default 25MiB)");
  app.add_option("--prefetch-depth", prefetch_depth, "stage 3 units gathered ahead (default 1)")
      ->check(CLI::Range(0, 64));
  app.add_option("--prefetch-bytes", prefetch_bytes, "stage 3 cap on prefetched bytes");
  app.add_option("--max-live", max_live, "stage 3 cap on gathered bytes at once");
  app.add_option("--persistence-threshold", persistence,
                 "stage 3: parameters with fewer elements stay gathered (default 100000)");
  auto* alignment_option =
      app.add_option("--alignment", alignment, "slice alignment in elements (default 128)");
  int shard_group = 0;
  app.add_option("--shard-group", shard_group,
                 "stages 1-3, hybrid sharding: shard inside groups of G ranks (dividing N), "
                 "replicate across the N/G groups; memory is then the stage's on G ranks "
                 "(default N: flat)");
  int hpz = 0;
  app.add_option("--hpz", hpz,
                 "stage 3, hpZ: a secondary copy of the parameters sharded inside groups of H "
                 "ranks (dividing N), so backward gathers stay there; adds 1/H of the "
                 "parameters (default: off)");
  app.add_flag("--no-sync", no_sync,
               "stages 2/3: keep full local gradients for no-sync "
               "accumulation");
  app.add_option("--step-backup", step_backup,
                 "what a failed step can undo: segment (default: one segment's master/state, "
                 "a constant), full (a copy of the whole shard's), none")
      ->check(CLI::IsMember({"segment", "full", "none"}));
  app.add_flag("--no-step-backup", no_step_backup, "the same as --step-backup none");
  app.add_option("--grad-windows", grad_windows,
                 "gradient staging windows: 1 or 2 (default 0: 2 where reductions read a window "
                 "after grad_ready, on host memory)")
      ->check(CLI::Range(0, 2));
  app.add_flag("--offload", offload,
               "offload_optimizer = 1: master, optimizer state and step backup in host memory "
               "(stages 1-3); shows the device and host columns");
  app.add_option("--gpu-memory,--device-memory", device,
                 "memory per device (80GB, 24GiB): flag the stages that fit");
  app.add_flag("--json", command->json, "print JSON instead of the table");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    command->show_help = true;
    command->help = app.help();
    return Status::ok();
  } catch (const CLI::ParseError& e) {
    return Status::invalid_argument("{} (see --help)", e.what());
  }

  MemRequest& req = command->request;
  if (ranks == 0) {
    const LauncherVariables launcher = LauncherVariables::load();
    const char* env = launcher.value("WORLD_SIZE");
    if (env == nullptr || std::atoi(env) < 1) {
      return Status::invalid_argument("--ranks: how many data-parallel ranks? (e.g. --ranks 64)");
    }
    ranks = std::atoi(env);
  }
  if (ranks < 1) return Status::invalid_argument("--ranks must be at least 1, got {}", ranks);
  req.ranks = ranks;

  // The model: exactly one description.
  int sources = !params.empty() + !profile.empty() + (layers->count() > 0);
  if (sources == 0) {
    return Status::invalid_argument(
        "no model: give --params COUNT, --profile FILE, or a transformer shape (--layers "
        "--hidden --heads)");
  }
  if (sources > 1) {
    return Status::invalid_argument(
        "give only one of --params, --profile and --layers/--hidden/--heads");
  }
  if (!params.empty()) {
    uint64_t count = 0;
    ZRT_RETURN_IF_ERROR(tools::parse_count(params, "--params", &count));
    ZRT_RETURN_IF_ERROR(model_from_param_count(count, units, &req.model));
  } else if (!profile.empty()) {
    tools::JsonFile file;
    ZRT_RETURN_IF_ERROR(file.load(profile));
    ZRT_RETURN_IF_ERROR(model_from_profile(file, &req.model));
  } else {
    ZRT_RETURN_IF_ERROR(model_from_transformer(shape, &req.model));
  }

  // Settings: zrt-mem's defaults (mixed precision), or the config file, then the flags.
  PartitionOptions& o = req.options;
  if (!config.empty()) {
    ZRT_RETURN_IF_ERROR(partition_options_load_json_file(config, &o));
  } else {
    o.param_dtype = ZRT_F16;
    o.reduce_dtype = ZRT_F16;
  }
  if (!dtype.empty()) {
    ZRT_RETURN_IF_ERROR(parse_dtype(dtype, "--dtype", &o.param_dtype));
    o.reduce_dtype = o.param_dtype;
  }
  if (!param_dtype.empty())
    ZRT_RETURN_IF_ERROR(parse_dtype(param_dtype, "--param-dtype", &o.param_dtype));
  if (!reduce_dtype.empty())
    ZRT_RETURN_IF_ERROR(parse_dtype(reduce_dtype, "--reduce-dtype", &o.reduce_dtype));
  if (slots >= 0) {
    o.optimizer_slots = slots;
  } else if (app.count("--optimizer") > 0 || config.empty()) {
    ZRT_RETURN_IF_ERROR(optimizer_slots(optimizer, &o.optimizer_slots));
  }
  uint64_t bytes = 0;
  if (!bucket.empty()) {
    ZRT_RETURN_IF_ERROR(tools::parse_size(bucket, "--bucket", &bytes));
    o.bucket_bytes = bytes;
  }
  if (!prefetch_bytes.empty()) {
    ZRT_RETURN_IF_ERROR(tools::parse_size(prefetch_bytes, "--prefetch-bytes", &bytes));
    o.prefetch_bytes = bytes;
  }
  if (!max_live.empty()) {
    ZRT_RETURN_IF_ERROR(tools::parse_size(max_live, "--max-live", &bytes));
    o.max_live_bytes = bytes;
  }
  if (prefetch_depth >= 0) o.prefetch_depth = prefetch_depth;
  if (persistence >= 0) o.persistence_threshold = static_cast<size_t>(persistence);
  if (alignment_option->count() > 0) {
    // As zrt_partition_config_t refuses it: 0 is not "the default" here either.
    if (alignment < 1 || alignment > (1 << 20)) {
      return Status::invalid_argument("--alignment {}: expected 1..1048576 elements", alignment);
    }
    o.alignment = static_cast<size_t>(alignment);
  }
  if (shard_group < 0 || (shard_group > 0 && ranks % shard_group != 0)) {
    return Status::invalid_argument("--shard-group {}: expected a group size dividing --ranks {}",
                                    shard_group, ranks);
  }
  req.shard_group = shard_group > 0 ? shard_group : ranks;
  if (hpz < 0 || (hpz > 0 && ranks % hpz != 0)) {
    return Status::invalid_argument("--hpz {}: expected a group size dividing --ranks {}", hpz,
                                    ranks);
  }
  if (hpz > 0 && req.shard_group < ranks) {
    return Status::invalid_argument(
        "--hpz {} with --shard-group {}: hybrid sharding already gathers inside the group; give "
        "one of them",
        hpz, shard_group);
  }
  if (hpz > 0 && stage >= 0 && stage != 3) {
    return Status::invalid_argument(
        "--hpz {} with --stage {}: hpZ's secondary copy is stage 3's (drop --stage to plan "
        "every stage, stage 3 with it)",
        hpz, stage);
  }
  o.hpz_group_size = hpz;  // stage 3 only: plan_memory leaves the other stages without it
  if (no_sync) o.no_sync_accumulation = true;
  o.step_backup = step_backup == "full"   ? ZRT_STEP_BACKUP_FULL
                  : step_backup == "none" ? ZRT_STEP_BACKUP_NONE
                                          : ZRT_STEP_BACKUP_SEGMENT;
  if (no_step_backup) o.step_backup = ZRT_STEP_BACKUP_NONE;
  o.grad_windows = grad_windows;
  if (offload) o.offload_optimizer = true;
  if (stage >= 0) {
    req.stages = {stage};
  } else if (o.offload_optimizer) {
    req.stages = {1, 2, 3};  // stage 0 shards nothing to offload
  }
  if (!device.empty()) {
    ZRT_RETURN_IF_ERROR(tools::parse_real_size(device, "--gpu-memory", &req.device_bytes));
  }
  return Status::ok();
}

}  // namespace zrt::mem
