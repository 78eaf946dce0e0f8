#include "tools/zrt-mem/model_spec.h"

#include <fmt/format.h>

#include "tools/common/units.h"
#include "zrt/zrt.h"

namespace zrt::mem {

uint64_t ModelSpec::total_params() const {
  uint64_t total = 0;
  for (const ParamSpec& p : params) total += p.numel;
  return total;
}

uint64_t ModelSpec::frozen_params() const {
  uint64_t total = 0;
  for (const ParamSpec& p : params) {
    if (p.flags & ZRT_PARAM_FROZEN) total += p.numel;
  }
  return total;
}

Status model_from_param_count(uint64_t params, int units, ModelSpec* model) {
  if (units < 1) return Status::invalid_argument("--units must be at least 1, got {}", units);
  if (params < static_cast<uint64_t>(units)) {
    return Status::invalid_argument("--params {} is fewer than --units {}: every unit needs one",
                                    params, units);
  }
  if (params > kMaxNumel) {
    return Status::invalid_argument(
        "--params {}: over zrt's limit of {} (2^50) elements in a model", params, kMaxNumel);
  }
  ModelSpec out;
  const uint64_t u = static_cast<uint64_t>(units);
  for (uint64_t i = 0; i < u; ++i) {
    out.units.push_back({fmt::format("unit{}", i)});
    // The first (params % units) units take one element more.
    uint64_t numel = params / u + (i < params % u ? 1 : 0);
    out.params.push_back({fmt::format("unit{}.weight", i), static_cast<size_t>(numel),
                          static_cast<int>(i), ZRT_PARAM_DEFAULT});
  }
  out.description = fmt::format("{} parameters in {} equal units",
                                tools::format_count(static_cast<double>(params)), units);
  *model = std::move(out);
  return Status::ok();
}

Status model_from_transformer(const TransformerShape& s, ModelSpec* model) {
  if (s.layers < 1)
    return Status::invalid_argument("--layers must be at least 1, got {}", s.layers);
  if (s.hidden < 1)
    return Status::invalid_argument("--hidden must be at least 1, got {}", s.hidden);
  if (s.heads < 1) return Status::invalid_argument("--heads must be at least 1, got {}", s.heads);
  if (s.hidden % s.heads != 0) {
    return Status::invalid_argument("--hidden {} is not a multiple of --heads {}", s.hidden,
                                    s.heads);
  }
  if (s.vocab < 1 || s.seq < 1 || s.micro_batch < 1) {
    return Status::invalid_argument("--vocab, --seq and --micro-batch must be at least 1");
  }
  // Estimated in floating point first: 12 h^2 per layer wraps 64 bits for a large --hidden.
  const double hd = static_cast<double>(s.hidden);
  const double estimate = (static_cast<double>(s.vocab) + static_cast<double>(s.seq)) * hd +
                          static_cast<double>(s.layers) * (12 * hd * hd + 13 * hd) + 2 * hd;
  if (estimate > static_cast<double>(kMaxNumel)) {
    return Status::invalid_argument(
        "--layers {} --hidden {} --vocab {} --seq {} make about {:.3g} parameters, over zrt's "
        "limit of {} (2^50) elements in a model",
        s.layers, s.hidden, s.vocab, s.seq, estimate, kMaxNumel);
  }
  ModelSpec out;
  const size_t h = static_cast<size_t>(s.hidden);
  auto add = [&](int unit, std::string name, size_t numel) {
    out.params.push_back({std::move(name), numel, unit, ZRT_PARAM_DEFAULT});
  };
  out.units.push_back({"embed"});
  add(0, "wte.weight", static_cast<size_t>(s.vocab) * h);
  add(0, "wpe.weight", static_cast<size_t>(s.seq) * h);
  for (int l = 0; l < s.layers; ++l) {
    int unit = static_cast<int>(out.units.size());
    out.units.push_back({fmt::format("h.{}", l)});
    std::string p = fmt::format("h.{}.", l);
    add(unit, p + "ln_1.weight", h);
    add(unit, p + "ln_1.bias", h);
    add(unit, p + "attn.c_attn.weight", 3 * h * h);
    add(unit, p + "attn.c_attn.bias", 3 * h);
    add(unit, p + "attn.c_proj.weight", h * h);
    add(unit, p + "attn.c_proj.bias", h);
    add(unit, p + "ln_2.weight", h);
    add(unit, p + "ln_2.bias", h);
    add(unit, p + "mlp.c_fc.weight", 4 * h * h);
    add(unit, p + "mlp.c_fc.bias", 4 * h);
    add(unit, p + "mlp.c_proj.weight", 4 * h * h);
    add(unit, p + "mlp.c_proj.bias", h);
  }
  int last = static_cast<int>(out.units.size());
  out.units.push_back({"ln_f"});
  add(last, "ln_f.weight", h);
  add(last, "ln_f.bias", h);
  out.has_shape = true;
  out.shape = s;
  out.description = fmt::format(
      "transformer: {} layers, hidden {}, {} heads, vocab {}, sequence {}, micro-batch {} "
      "({} parameters)",
      s.layers, s.hidden, s.heads, s.vocab, s.seq, s.micro_batch,
      tools::format_count(static_cast<double>(out.total_params())));
  *model = std::move(out);
  return Status::ok();
}

namespace {

Status read_count(const tools::JsonFile& file, const std::string& path, const nlohmann::json& v,
                  size_t* numel) {
  if (!v.is_number()) {
    return file.field_error(
        path, "expected a whole number of elements, got " + tools::json_type_phrase(v));
  }
  if (v.is_number_float()) {
    double d = v.get<double>();
    if (!(d <= static_cast<double>(kMaxNumel))) {  // also NaN; and before the cast below
      return file.field_error(
          path, fmt::format("{} elements is over zrt's limit of {} (2^50)", d, kMaxNumel));
    }
    if (d != static_cast<double>(static_cast<uint64_t>(d)) || d < 1) {
      return file.field_error(path, fmt::format("expected a whole number >= 1, got {}", d));
    }
    *numel = static_cast<size_t>(d);
    return Status::ok();
  }
  if (v.is_number_integer() && v.get<int64_t>() < 1) {
    return file.field_error(path,
                            fmt::format("expected at least 1 element, got {}", v.get<int64_t>()));
  }
  if (v.get<uint64_t>() > kMaxNumel) {
    return file.field_error(path, fmt::format("{} elements is over zrt's limit of {} (2^50)",
                                              v.get<uint64_t>(), kMaxNumel));
  }
  *numel = v.get<size_t>();
  return Status::ok();
}

Status check_keys(const tools::JsonFile& file, const std::string& path, const nlohmann::json& obj,
                  std::initializer_list<const char*> allowed) {
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    bool known = false;
    for (const char* key : allowed) known |= it.key() == key;
    if (!known) {
      std::string list;
      for (const char* key : allowed) list += (list.empty() ? "" : ", ") + std::string(key);
      return file.field_error(path + "." + it.key(),
                              fmt::format("unknown field (expected one of: {})", list));
    }
  }
  return Status::ok();
}

}  // namespace

Status model_from_profile(const tools::JsonFile& file, ModelSpec* model) {
  const nlohmann::json& root = file.root();
  if (!root.is_object()) {
    return file.field_error(
        "", "expected an object with a \"units\" list, got " + tools::json_type_phrase(root));
  }
  ZRT_RETURN_IF_ERROR(check_keys(file, "", root, {"name", "units", "notes"}));
  if (!root.contains("units")) return file.field_error("", "missing the \"units\" list");
  const nlohmann::json& units = root["units"];
  if (!units.is_array() || units.empty()) {
    return file.field_error("units", "expected a non-empty list of units, got " +
                                         (units.is_array() ? std::string("an empty list")
                                                           : tools::json_type_phrase(units)));
  }
  ModelSpec out;
  for (size_t u = 0; u < units.size(); ++u) {
    const std::string upath = fmt::format("units[{}]", u);
    const nlohmann::json& unit = units[u];
    if (!unit.is_object()) {
      return file.field_error(upath, "expected an object, got " + tools::json_type_phrase(unit));
    }
    ZRT_RETURN_IF_ERROR(
        check_keys(file, upath, unit, {"name", "params", "forward_ms", "backward_ms"}));
    std::string name = fmt::format("unit{}", u);
    if (unit.contains("name")) {
      if (!unit["name"].is_string()) {
        return file.field_error(upath + ".name",
                                "expected a string, got " + tools::json_type_phrase(unit["name"]));
      }
      name = unit["name"].get<std::string>();
    }
    for (const char* key : {"forward_ms", "backward_ms"}) {
      if (unit.contains(key) && (!unit[key].is_number() || unit[key].get<double>() < 0)) {
        return file.field_error(upath + "." + key, "expected a time in milliseconds (>= 0), got " +
                                                       tools::json_type_phrase(unit[key]));
      }
    }
    if (!unit.contains("params")) {
      return file.field_error(upath, "missing \"params\" (a count, or a list of {name, numel})");
    }
    const int index = static_cast<int>(u);
    out.units.push_back({name});
    const nlohmann::json& params = unit["params"];
    const std::string ppath = upath + ".params";
    if (params.is_number()) {
      size_t numel = 0;
      ZRT_RETURN_IF_ERROR(read_count(file, ppath, params, &numel));
      out.params.push_back({name + ".weight", numel, index, ZRT_PARAM_DEFAULT});
    } else if (params.is_array() && !params.empty()) {
      for (size_t p = 0; p < params.size(); ++p) {
        const std::string tpath = fmt::format("{}[{}]", ppath, p);
        const nlohmann::json& t = params[p];
        if (!t.is_object()) {
          return file.field_error(
              tpath, "expected {\"name\": ..., \"numel\": ...}, got " + tools::json_type_phrase(t));
        }
        ZRT_RETURN_IF_ERROR(check_keys(file, tpath, t, {"name", "numel", "frozen"}));
        if (!t.contains("numel")) return file.field_error(tpath, "missing \"numel\"");
        size_t numel = 0;
        ZRT_RETURN_IF_ERROR(read_count(file, tpath + ".numel", t["numel"], &numel));
        uint32_t flags = ZRT_PARAM_DEFAULT;
        if (t.contains("frozen")) {
          if (!t["frozen"].is_boolean()) {
            return file.field_error(tpath + ".frozen", "expected true or false, got " +
                                                           tools::json_type_phrase(t["frozen"]));
          }
          if (t["frozen"].get<bool>()) flags |= ZRT_PARAM_FROZEN;
        }
        std::string tname = fmt::format("{}.{}", name, p);
        if (t.contains("name")) {
          if (!t["name"].is_string()) {
            return file.field_error(tpath + ".name",
                                    "expected a string, got " + tools::json_type_phrase(t["name"]));
          }
          tname = t["name"].get<std::string>();
        }
        out.params.push_back({tname, numel, index, flags});
      }
    } else {
      return file.field_error(ppath, "expected a count or a non-empty list of {name, numel}, got " +
                                         (params.is_array() ? std::string("an empty list")
                                                            : tools::json_type_phrase(params)));
    }
  }
  std::string name = root.contains("name") && root["name"].is_string()
                         ? root["name"].get<std::string>()
                         : file.origin();
  out.description =
      fmt::format("{}: {} parameters in {} units", name,
                  tools::format_count(static_cast<double>(out.total_params())), out.units.size());
  *model = std::move(out);
  return Status::ok();
}

ActivationEstimate estimate_activations(const TransformerShape& shape, size_t act_bytes) {
  const double s = static_cast<double>(shape.seq), b = static_cast<double>(shape.micro_batch);
  const double h = static_cast<double>(shape.hidden), a = shape.heads;
  const double v = static_cast<double>(shape.vocab), l = shape.layers;
  const double scale = static_cast<double>(act_bytes) / 2.0;
  const double per_layer = s * b * h * (34.0 + 5.0 * a * s / h) * scale;
  const double logits = 4.0 * s * b * v;
  ActivationEstimate e;
  e.without_checkpointing = l * per_layer + logits;
  e.with_checkpointing = l * 2.0 * s * b * h * scale + per_layer + logits;
  return e;
}

}  // namespace zrt::mem
