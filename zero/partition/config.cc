#include "zero/partition/config.h"

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <type_traits>
#include <variant>

#include <nlohmann/json.hpp>

#include "lib/core/dtype.h"
#include "lib/core/regular_file.h"

namespace zrt {
namespace {

bool is_param_dtype(zrt_dtype_t dtype) {
  return dtype == ZRT_F32 || dtype == ZRT_F16 || dtype == ZRT_BF16;
}

// Whether the caller's struct (of caller_size bytes) contains `field`.
#define ZRT_HAS_FIELD(caller_size, field)                     \
  ((caller_size) >= offsetof(zrt_partition_config_t, field) + \
                        sizeof(static_cast<zrt_partition_config_t*>(nullptr)->field))

}  // namespace

Status validate_partition_options(const PartitionOptions& o) {
  if (o.stage < 0 || o.stage > 3) {
    return Status::invalid_argument("config.stage is {}; expected 0, 1, 2 or 3", o.stage);
  }
  if (!is_param_dtype(o.param_dtype)) {
    return Status::invalid_argument(
        "config.param_dtype is {}; expected f32, f16 or bf16{}", dtype_name(o.param_dtype),
        o.param_dtype == ZRT_F64 ? " (float64 parameters are not supported: train in float32)"
                                 : "");
  }
  if (!is_param_dtype(o.reduce_dtype)) {
    return Status::invalid_argument("config.reduce_dtype is {}; expected f32, f16 or bf16",
                                    dtype_name(o.reduce_dtype));
  }
  if (o.master_dtype != ZRT_F32) {
    return Status::invalid_argument(
        "config.master_dtype is {}; only f32 master weights are "
        "supported (16-bit updates vanish)",
        dtype_name(o.master_dtype));
  }
  if (o.optimizer_slots < 0 || o.optimizer_slots > kMaxOptimizerSlots) {
    return Status::invalid_argument("config.optimizer_slots is {}; expected 0..16",
                                    o.optimizer_slots);
  }
  if (o.alignment == 0 || o.alignment > (size_t{1} << 20)) {
    return Status::invalid_argument("config.alignment is {} elements; expected 1..1048576",
                                    o.alignment);
  }
  if (o.bucket_bytes < dtype_size(o.reduce_dtype)) {
    return Status::invalid_argument("config.bucket_bytes is {}; it must hold one element",
                                    o.bucket_bytes);
  }
  if (o.prefetch_depth < 0 || o.prefetch_depth > 64) {
    return Status::invalid_argument("config.prefetch_depth is {}; expected 0..64",
                                    o.prefetch_depth);
  }
  if (o.mem_kind != ZRT_MEM_HOST && o.mem_kind != ZRT_MEM_CUDA) {
    return Status::invalid_argument("config.mem_kind is {}; expected host or cuda",
                                    static_cast<int>(o.mem_kind));
  }
  if (o.shard_group_size < ZRT_SHARD_GROUP_HOST) {
    return Status::invalid_argument(
        "config.shard_group_size is {}; expected 0 (flat), ZRT_SHARD_GROUP_HOST (-1, the ranks "
        "of one host) or a group size dividing the number of ranks",
        o.shard_group_size);
  }
  if (o.shard_group_size != 0 && o.stage == 0) {
    return Status::invalid_argument(
        "config.shard_group_size is {} at stage 0; stage 0 shards nothing (leave it 0, or use "
        "stage 1, 2 or 3 for hybrid sharding)",
        o.shard_group_size);
  }
  if (o.hpz_group_size < ZRT_SHARD_GROUP_HOST) {
    return Status::invalid_argument(
        "config.hpz_group_size is {}; expected 0 (off), ZRT_SHARD_GROUP_HOST (-1, the ranks of "
        "one host) or a group size dividing the number of ranks",
        o.hpz_group_size);
  }
  if (o.hpz_group_size != 0 && o.stage != 3) {
    return Status::invalid_argument(
        "config.hpz_group_size is {} at stage {}; hpZ's secondary parameter copy exists only at "
        "stage 3, where parameters are sharded (leave it 0, or use stage 3)",
        o.hpz_group_size, o.stage);
  }
  if (o.grad_windows < 0 || o.grad_windows > 2) {
    return Status::invalid_argument(
        "config.grad_windows is {}; expected 0 (by the memory), 1 or 2", o.grad_windows);
  }
  if (o.offload_optimizer && o.stage == 0) {
    return Status::invalid_argument(
        "config.offload_optimizer is 1 at stage 0; offload needs a sharded optimizer state "
        "(stage 1, 2 or 3)");
  }
  return Status::ok();
}

namespace {

// size, magic and version: what says which fields the caller's struct has.
Status check_config_header(const zrt_partition_config_t& config) {
  const size_t n = config.size;
  if (n < offsetof(zrt_partition_config_t, stage) || n > (size_t{1} << 16)) {
    return Status::invalid_argument(
        "config.size is {}; initialise the struct with ZRT_PARTITION_CONFIG_INIT", n);
  }
  if (config.magic != ZRT_CONFIG_MAGIC) {
    return Status::invalid_argument(
        "config.magic is {:#x}, not ZRT_CONFIG_MAGIC; use ZRT_PARTITION_CONFIG_INIT",
        config.magic);
  }
  if (config.version > ZRT_VERSION_CODE && n > sizeof(zrt_partition_config_t)) {
    return Status::invalid_argument("config.version {} is newer than this library ({})",
                                    config.version, ZRT_VERSION_CODE);
  }
  return Status::ok();
}

}  // namespace

Status partition_options_from_config(const zrt_partition_config_t* config,
                                     PartitionOptions* options) {
  PartitionOptions o;
  if (config != nullptr) {
    ZRT_RETURN_IF_ERROR(check_config_header(*config));
    const size_t n = config->size;
    if (ZRT_HAS_FIELD(n, stage)) o.stage = config->stage;
    if (ZRT_HAS_FIELD(n, param_dtype)) o.param_dtype = config->param_dtype;
    if (ZRT_HAS_FIELD(n, reduce_dtype)) o.reduce_dtype = config->reduce_dtype;
    if (ZRT_HAS_FIELD(n, master_dtype)) o.master_dtype = config->master_dtype;
    if (ZRT_HAS_FIELD(n, optimizer_slots)) o.optimizer_slots = config->optimizer_slots;
    if (ZRT_HAS_FIELD(n, bucket_bytes)) o.bucket_bytes = config->bucket_bytes;
    if (ZRT_HAS_FIELD(n, prefetch_depth)) o.prefetch_depth = config->prefetch_depth;
    if (ZRT_HAS_FIELD(n, prefetch_bytes)) o.prefetch_bytes = config->prefetch_bytes;
    if (ZRT_HAS_FIELD(n, max_live_bytes)) o.max_live_bytes = config->max_live_bytes;
    if (ZRT_HAS_FIELD(n, persistence_threshold)) {
      o.persistence_threshold = config->persistence_threshold;
    }
    if (ZRT_HAS_FIELD(n, alignment)) o.alignment = config->alignment;
    if (ZRT_HAS_FIELD(n, mem_kind)) o.mem_kind = config->mem_kind;
    if (ZRT_HAS_FIELD(n, no_sync_accumulation)) {
      o.no_sync_accumulation = config->no_sync_accumulation != 0;
    }
    if (ZRT_HAS_FIELD(n, step_backup)) {
      if (config->step_backup < 0 || config->step_backup >= ZRT_STEP_BACKUP_COUNT) {
        return Status::invalid_argument(
            "config.step_backup is {}; expected ZRT_STEP_BACKUP_NONE (0), _FULL (1) or "
            "_SEGMENT (2)",
            config->step_backup);
      }
      o.step_backup = config->step_backup;
    }
    if (ZRT_HAS_FIELD(n, prefetch_next_step)) {
      if (config->prefetch_next_step != 0 && config->prefetch_next_step != 1) {
        return Status::invalid_argument("config.prefetch_next_step is {}; expected 0 or 1",
                                        config->prefetch_next_step);
      }
      o.prefetch_next_step = config->prefetch_next_step != 0;
    }
    if (ZRT_HAS_FIELD(n, offload_optimizer)) {
      if (config->offload_optimizer != 0 && config->offload_optimizer != 1) {
        return Status::invalid_argument("config.offload_optimizer is {}; expected 0 or 1",
                                        config->offload_optimizer);
      }
      o.offload_optimizer = config->offload_optimizer != 0;
    }
    if (ZRT_HAS_FIELD(n, grad_accumulate)) {
      if (config->grad_accumulate != 0 && config->grad_accumulate != 1) {
        return Status::invalid_argument("config.grad_accumulate is {}; expected 0 or 1",
                                        config->grad_accumulate);
      }
      o.grad_accumulate = config->grad_accumulate != 0;
    }
    if (ZRT_HAS_FIELD(n, shard_group_size)) o.shard_group_size = config->shard_group_size;
    if (ZRT_HAS_FIELD(n, hpz_group_size)) {
      if (config->hpz_group_size < ZRT_SHARD_GROUP_HOST || config->hpz_group_size > INT32_MAX) {
        return Status::invalid_argument(
            "config.hpz_group_size is {}; expected 0 (off), ZRT_SHARD_GROUP_HOST (-1) or a group "
            "size dividing the number of ranks",
            config->hpz_group_size);
      }
      o.hpz_group_size = static_cast<int>(config->hpz_group_size);
    }
    if (ZRT_HAS_FIELD(n, grad_windows)) o.grad_windows = config->grad_windows;
  }
  ZRT_RETURN_IF_ERROR(validate_partition_options(o));
  *options = o;
  return Status::ok();
}

void partition_options_to_config(const PartitionOptions& o, zrt_partition_config_t* config) {
  config->stage = o.stage;
  config->param_dtype = o.param_dtype;
  config->reduce_dtype = o.reduce_dtype;
  config->master_dtype = o.master_dtype;
  config->optimizer_slots = o.optimizer_slots;
  config->bucket_bytes = o.bucket_bytes;
  config->prefetch_depth = o.prefetch_depth;
  config->prefetch_bytes = o.prefetch_bytes;
  config->max_live_bytes = o.max_live_bytes;
  config->persistence_threshold = o.persistence_threshold;
  config->alignment = o.alignment;
  config->mem_kind = o.mem_kind;
  config->no_sync_accumulation = o.no_sync_accumulation ? 1 : 0;
  if (ZRT_HAS_FIELD(config->size, step_backup)) config->step_backup = o.step_backup;
  if (ZRT_HAS_FIELD(config->size, prefetch_next_step)) {
    config->prefetch_next_step = o.prefetch_next_step ? 1 : 0;
  }
  if (ZRT_HAS_FIELD(config->size, offload_optimizer)) {
    config->offload_optimizer = o.offload_optimizer ? 1 : 0;
  }
  if (ZRT_HAS_FIELD(config->size, grad_accumulate)) {
    config->grad_accumulate = o.grad_accumulate ? 1 : 0;
  }
  if (ZRT_HAS_FIELD(config->size, shard_group_size)) {
    config->shard_group_size = o.shard_group_size;
  }
  if (ZRT_HAS_FIELD(config->size, hpz_group_size)) config->hpz_group_size = o.hpz_group_size;
  if (ZRT_HAS_FIELD(config->size, grad_windows)) config->grad_windows = o.grad_windows;
}

namespace {

// One key's value in a partition config JSON, read as its field needs it; errors name the
// origin (the file) and the key.
struct JsonValue {
  const std::string& origin;
  const std::string& key;
  const nlohmann::json& value;

  Status read_int(int64_t low, int64_t high, int64_t* out) const {
    if (!value.is_number_integer()) {
      return Status::invalid_argument("{}: key \"{}\" must be an integer", origin, key);
    }
    const int64_t v = value.get<int64_t>();
    if (v < low || v > high) {
      return Status::invalid_argument("{}: key \"{}\" is {}; expected {}..{}", origin, key, v, low,
                                      high);
    }
    *out = v;
    return Status::ok();
  }
  Status read_dtype(zrt_dtype_t* out) const {
    if (!value.is_string() || !dtype_from_name(value.get<std::string>().c_str(), out)) {
      return Status::invalid_argument("{}: key \"{}\" must be a dtype name (\"f32\", \"bf16\")",
                                      origin, key);
    }
    return Status::ok();
  }
  // A switch: true/false, or 0/1.
  Status read_flag(bool* out) const {
    if (value.is_boolean()) {
      *out = value.get<bool>();
      return Status::ok();
    }
    int64_t flag = 0;
    ZRT_RETURN_IF_ERROR(read_int(0, 1, &flag));
    *out = flag != 0;
    return Status::ok();
  }
  Status read_mem_kind(zrt_mem_kind_t* out) const {
    const std::string kind = value.is_string() ? value.get<std::string>() : "";
    if (kind == "host") {
      *out = ZRT_MEM_HOST;
    } else if (kind == "cuda") {
      *out = ZRT_MEM_CUDA;
    } else {
      return Status::invalid_argument("{}: key \"mem_kind\" must be \"host\" or \"cuda\"", origin);
    }
    return Status::ok();
  }
};

// The field a JSON key sets; its type says how the value is read (integers within the key's
// range, dtype names, switches, the memory kind's name).
using OptionField = std::variant<int PartitionOptions::*, size_t PartitionOptions::*,
                                 zrt_dtype_t PartitionOptions::*, bool PartitionOptions::*,
                                 zrt_mem_kind_t PartitionOptions::*>;

struct JsonKey {
  const char* name;
  OptionField field;
  int64_t low = 0;  // integers: the values accepted
  int64_t high = 0;
};

constexpr int64_t kMax = INT64_MAX;

// The keys: the C struct's field names.
const JsonKey kJsonKeys[] = {
    {"stage", &PartitionOptions::stage, 0, 3},
    {"param_dtype", &PartitionOptions::param_dtype},
    {"reduce_dtype", &PartitionOptions::reduce_dtype},
    {"master_dtype", &PartitionOptions::master_dtype},
    {"optimizer_slots", &PartitionOptions::optimizer_slots, 0, kMaxOptimizerSlots},
    {"bucket_bytes", &PartitionOptions::bucket_bytes, 1, kMax},
    {"prefetch_depth", &PartitionOptions::prefetch_depth, 0, 64},
    {"prefetch_bytes", &PartitionOptions::prefetch_bytes, 0, kMax},
    {"max_live_bytes", &PartitionOptions::max_live_bytes, 0, kMax},
    {"persistence_threshold", &PartitionOptions::persistence_threshold, 0, kMax},
    {"alignment", &PartitionOptions::alignment, 1, int64_t{1} << 20},
    {"mem_kind", &PartitionOptions::mem_kind},
    {"no_sync_accumulation", &PartitionOptions::no_sync_accumulation},
    {"step_backup", &PartitionOptions::step_backup, 0, ZRT_STEP_BACKUP_COUNT - 1},
    {"prefetch_next_step", &PartitionOptions::prefetch_next_step},
    {"offload_optimizer", &PartitionOptions::offload_optimizer},
    {"grad_accumulate", &PartitionOptions::grad_accumulate},
    {"shard_group_size", &PartitionOptions::shard_group_size, 0, INT32_MAX},
    {"hpz_group_size", &PartitionOptions::hpz_group_size, ZRT_SHARD_GROUP_HOST, INT32_MAX},
    {"grad_windows", &PartitionOptions::grad_windows, 0, 2},
};

const JsonKey* find_json_key(const std::string& name) {
  for (const JsonKey& key : kJsonKeys) {
    if (name == key.name) return &key;
  }
  return nullptr;
}

// Reads `value` into the field `key` names in *o.
Status apply_json_key(const JsonKey& key, const JsonValue& value, PartitionOptions* o) {
  return std::visit(
      [&key, &value, o](auto field) -> Status {
        auto& out = o->*field;
        using Field = std::remove_reference_t<decltype(out)>;
        if constexpr (std::is_same_v<Field, zrt_dtype_t>) {
          return value.read_dtype(&out);
        } else if constexpr (std::is_same_v<Field, bool>) {
          return value.read_flag(&out);
        } else if constexpr (std::is_same_v<Field, zrt_mem_kind_t>) {
          return value.read_mem_kind(&out);
        } else {
          int64_t v = 0;
          ZRT_RETURN_IF_ERROR(value.read_int(key.low, key.high, &v));
          out = static_cast<Field>(v);
          return Status::ok();
        }
      },
      key.field);
}

}  // namespace

Status partition_options_apply_json(const std::string& json_text, const std::string& origin,
                                    PartitionOptions* options) {
  nlohmann::json doc = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return Status::invalid_argument("{}: not valid JSON", origin);
  if (!doc.is_object()) return Status::invalid_argument("{}: expected a JSON object", origin);
  PartitionOptions o = *options;
  for (const auto& item : doc.items()) {
    const std::string& key = item.key();
    const JsonKey* known = find_json_key(key);
    if (known == nullptr) return Status::invalid_argument("{}: unknown key \"{}\"", origin, key);
    ZRT_RETURN_IF_ERROR(apply_json_key(*known, JsonValue{origin, key, item.value()}, &o));
  }
  ZRT_RETURN_IF_ERROR(validate_partition_options(o).with_context(origin));
  *options = o;
  return Status::ok();
}

Status partition_options_load_json_file(const std::string& path, PartitionOptions* options) {
  std::string text;
  ZRT_RETURN_IF_ERROR(read_regular_file(path, "partition config", size_t{64} << 20, &text));
  return partition_options_apply_json(text, path, options);
}

uint64_t partition_options_hash(const PartitionOptions& o, uint64_t seed) {
  uint64_t h = seed ^ 0xcbf29ce484222325ull;
  auto mix = [&h](uint64_t value) {
    for (int i = 0; i < 8; ++i) {
      h ^= (value >> (8 * i)) & 0xff;
      h *= 0x100000001b3ull;
    }
  };
  mix(static_cast<uint64_t>(o.stage));
  mix(o.param_dtype);
  mix(o.reduce_dtype);
  mix(o.master_dtype);
  mix(static_cast<uint64_t>(o.optimizer_slots));
  mix(o.bucket_bytes);
  mix(static_cast<uint64_t>(o.prefetch_depth));
  mix(o.prefetch_bytes);
  mix(o.max_live_bytes);
  mix(o.persistence_threshold);
  mix(o.alignment);
  mix(o.mem_kind);
  mix(o.no_sync_accumulation ? 1 : 0);
  mix(static_cast<uint64_t>(o.step_backup));
  mix(o.prefetch_next_step ? 1 : 0);
  mix(o.offload_optimizer ? 1 : 0);
  mix(o.grad_accumulate ? 1 : 0);
  mix(static_cast<uint64_t>(o.shard_group_size));
  mix(static_cast<uint64_t>(o.hpz_group_size));
  mix(static_cast<uint64_t>(o.grad_windows));
  return h;
}

}  // namespace zrt
