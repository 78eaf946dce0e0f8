#include "tools/zrt-tune/profile.h"

#include <cerrno>
#include <cmath>
#include <fstream>
#include <initializer_list>
#include <sstream>

#include <fmt/format.h>

#include "tools/common/json_file.h"

namespace zrt::tune {
namespace {

using nlohmann::json;
using tools::json_type_phrase;
using tools::JsonFile;

// nlohmann parses nesting iteratively, but the line map (and the destructor of older releases)
// recurse: refuse deep nesting before either sees it. Brackets inside strings do not count.
Status check_depth(std::string_view text, const std::string& origin) {
  int depth = 0, line = 1;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\n') ++line;
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped character cannot end the string
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > kMaxJsonDepth) {
        return Status::invalid_argument(
            "{}:{}: nesting deeper than {} levels; a profile is an object with a list of units",
            origin, line, kMaxJsonDepth);
      }
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return Status::ok();
}

Status check_keys(const JsonFile& file, const std::string& path, const json& object,
                  std::initializer_list<const char*> allowed) {
  for (const auto& item : object.items()) {
    bool known = false;
    for (const char* key : allowed) known = known || item.key() == key;
    if (!known) {
      std::string list;
      for (const char* key : allowed)
        list += fmt::format("{}\"{}\"", list.empty() ? "" : ", ", key);
      const std::string where = path.empty() ? item.key() : path + "." + item.key();
      return file.field_error(where, fmt::format("unknown key (expected one of {})", list));
    }
  }
  return Status::ok();
}

Status read_name(const JsonFile& file, const std::string& path, const json& value,
                 std::string* name) {
  if (!value.is_string()) {
    return file.field_error(path, "expected a string, got " + json_type_phrase(value));
  }
  const std::string& text = value.get_ref<const std::string&>();
  if (text.size() > kMaxNameBytes) {
    return file.field_error(
        path, fmt::format("name of {} bytes; at most {}", text.size(), kMaxNameBytes));
  }
  *name = text;
  return Status::ok();
}

// An element count: a positive integer (1.5e6 is accepted when it is whole).
Status read_numel(const JsonFile& file, const std::string& path, const json& value,
                  uint64_t* numel) {
  uint64_t n = 0;
  if (value.is_number_unsigned()) {
    n = value.get<uint64_t>();
  } else if (value.is_number_integer()) {
    return file.field_error(
        path, fmt::format("expected a positive element count, got {}", value.get<int64_t>()));
  } else if (value.is_number_float()) {
    const double d = value.get<double>();
    if (!std::isfinite(d) || d < 1 || d != std::floor(d) ||
        d > static_cast<double>(kMaxTensorNumel)) {
      return file.field_error(
          path, fmt::format("expected a positive whole element count up to 2^40, got {}", d));
    }
    n = static_cast<uint64_t>(d);
  } else {
    return file.field_error(path, "expected an element count, got " + json_type_phrase(value));
  }
  if (n == 0) return file.field_error(path, "a tensor needs at least one element, got 0");
  if (n > kMaxTensorNumel) {
    return file.field_error(path, fmt::format("{} elements; at most 2^40 per tensor", n));
  }
  *numel = n;
  return Status::ok();
}

Status read_ms(const JsonFile& file, const std::string& path, const json& value, double* ms) {
  if (!value.is_number()) {
    return file.field_error(path,
                            "expected a time in milliseconds, got " + json_type_phrase(value));
  }
  const double d = value.get<double>();
  if (!std::isfinite(d) || d < 0 || d > kMaxUnitMs) {
    return file.field_error(
        path, fmt::format("expected milliseconds in 0..{:.0f}, got {}", kMaxUnitMs, d));
  }
  *ms = d;
  return Status::ok();
}

Status read_tensor(const JsonFile& file, const std::string& path, const json& t,
                   ProfileTensor* tensor) {
  if (!t.is_object()) {
    return file.field_error(path,
                            "expected {\"name\": ..., \"numel\": ...}, got " + json_type_phrase(t));
  }
  ZRT_RETURN_IF_ERROR(check_keys(file, path, t, {"name", "numel", "frozen"}));
  if (!t.contains("numel")) return file.field_error(path, "missing \"numel\" (element count)");
  ZRT_RETURN_IF_ERROR(read_numel(file, path + ".numel", t["numel"], &tensor->numel));
  if (t.contains("name"))
    ZRT_RETURN_IF_ERROR(read_name(file, path + ".name", t["name"], &tensor->name));
  if (t.contains("frozen")) {
    if (!t["frozen"].is_boolean()) {
      return file.field_error(path + ".frozen",
                              "expected true or false, got " + json_type_phrase(t["frozen"]));
    }
    tensor->frozen = t["frozen"].get<bool>();
  }
  return Status::ok();
}

Status read_unit(const JsonFile& file, const std::string& path, const json& unit, size_t index,
                 size_t* tensors, ProfileUnit* out) {
  if (!unit.is_object()) {
    return file.field_error(path, "expected an object, got " + json_type_phrase(unit));
  }
  ZRT_RETURN_IF_ERROR(
      check_keys(file, path, unit, {"name", "params", "forward_ms", "backward_ms"}));
  out->name = fmt::format("unit{}", index);
  if (unit.contains("name"))
    ZRT_RETURN_IF_ERROR(read_name(file, path + ".name", unit["name"], &out->name));
  for (const char* key : {"forward_ms", "backward_ms"}) {
    if (!unit.contains(key)) {
      return file.field_error(path, fmt::format("missing \"{}\" (zrt-tune replays each unit's "
                                                "compute time; measure it in your framework)",
                                                key));
    }
  }
  ZRT_RETURN_IF_ERROR(read_ms(file, path + ".forward_ms", unit["forward_ms"], &out->forward_ms));
  ZRT_RETURN_IF_ERROR(read_ms(file, path + ".backward_ms", unit["backward_ms"], &out->backward_ms));
  if (!unit.contains("params")) {
    return file.field_error(path, "missing \"params\" (a count, or a list of {name, numel})");
  }
  const json& params = unit["params"];
  const std::string ppath = path + ".params";
  if (params.is_number()) {
    ProfileTensor t;
    t.name = out->name + ".weight";
    ZRT_RETURN_IF_ERROR(read_numel(file, ppath, params, &t.numel));
    out->params.push_back(std::move(t));
  } else if (params.is_array() && !params.empty()) {
    for (size_t p = 0; p < params.size(); ++p) {
      if (++*tensors > kMaxTensors) {
        return file.field_error(ppath, fmt::format("more than {} tensors in all", kMaxTensors));
      }
      ProfileTensor t;
      t.name = fmt::format("{}.{}", out->name, p);
      ZRT_RETURN_IF_ERROR(read_tensor(file, fmt::format("{}[{}]", ppath, p), params[p], &t));
      out->params.push_back(std::move(t));
    }
  } else {
    return file.field_error(
        ppath, "expected a count or a non-empty list of {name, numel}, got " +
                   (params.is_array() ? std::string("an empty list") : json_type_phrase(params)));
  }
  return Status::ok();
}

}  // namespace

uint64_t Profile::total_params() const {
  uint64_t total = 0;
  for (const ProfileUnit& u : units) {
    for (const ProfileTensor& t : u.params) total += t.numel;
  }
  return total;
}

uint64_t Profile::trainable_params() const {
  uint64_t total = 0;
  for (const ProfileUnit& u : units) {
    for (const ProfileTensor& t : u.params) total += t.frozen ? 0 : t.numel;
  }
  return total;
}

double Profile::compute_ms() const {
  double total = 0;
  for (const ProfileUnit& u : units) total += u.forward_ms + u.backward_ms;
  return total;
}

Status parse_profile(std::string_view text, const std::string& origin, Profile* profile) {
  if (text.size() > kMaxProfileBytes) {
    return Status::invalid_argument("{}: {} bytes; a profile may have at most {} MiB", origin,
                                    text.size(), kMaxProfileBytes >> 20);
  }
  ZRT_RETURN_IF_ERROR(check_depth(text, origin));
  JsonFile file;
  ZRT_RETURN_IF_ERROR(file.parse(std::string(text), origin));
  const json& root = file.root();
  if (!root.is_object()) {
    return file.field_error(
        "", "expected an object with a \"units\" list, got " + json_type_phrase(root));
  }
  ZRT_RETURN_IF_ERROR(check_keys(file, "", root, {"name", "units", "notes"}));
  Profile out;
  out.name = "profile";
  if (root.contains("name")) ZRT_RETURN_IF_ERROR(read_name(file, "name", root["name"], &out.name));
  if (!root.contains("units")) return file.field_error("", "missing the \"units\" list");
  const json& units = root["units"];
  if (!units.is_array() || units.empty()) {
    return file.field_error(
        "units", "expected a non-empty list of units, got " +
                     (units.is_array() ? std::string("an empty list") : json_type_phrase(units)));
  }
  if (units.size() > kMaxUnits) {
    return file.field_error("units", fmt::format("{} units; at most {}", units.size(), kMaxUnits));
  }
  size_t tensors = 0;
  uint64_t total = 0;
  for (size_t u = 0; u < units.size(); ++u) {
    const std::string upath = fmt::format("units[{}]", u);
    ProfileUnit unit;
    ZRT_RETURN_IF_ERROR(read_unit(file, upath, units[u], u, &tensors, &unit));
    for (const ProfileTensor& t : unit.params) {
      total += t.numel;  // each <= 2^40 and at most 2^20 of them: no overflow
      if (total > kMaxTotalNumel) {
        return file.field_error(upath + ".params",
                                "the model passes 2^44 elements in all; split the job");
      }
    }
    out.units.push_back(std::move(unit));
  }
  if (out.trainable_params() == 0) {
    return file.field_error("units", "every parameter is frozen: there is nothing to tune");
  }
  *profile = std::move(out);
  return Status::ok();
}

Status load_profile(const std::string& path, Profile* profile) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return Status::system_error("cannot read profile '" + path + "'", errno != 0 ? errno : ENOENT);
  std::string text;
  char buffer[65536];
  while (in.read(buffer, sizeof(buffer)) || in.gcount() > 0) {
    text.append(buffer, static_cast<size_t>(in.gcount()));
    if (text.size() > kMaxProfileBytes) break;  // parse_profile names the limit
  }
  return parse_profile(text, path, profile);
}

std::string profile_to_json(const Profile& profile) {
  json units = json::array();
  for (const ProfileUnit& u : profile.units) {
    json params = json::array();
    for (const ProfileTensor& t : u.params) {
      json tensor = {{"name", t.name}, {"numel", t.numel}};
      if (t.frozen) tensor["frozen"] = true;
      params.push_back(std::move(tensor));
    }
    units.push_back({{"name", u.name},
                     {"forward_ms", u.forward_ms},
                     {"backward_ms", u.backward_ms},
                     {"params", std::move(params)}});
  }
  const json root = {{"name", profile.name}, {"units", std::move(units)}};
  // Names came through the parser (valid UTF-8) or from presets; replace rather than throw if a
  // caller built one by hand with stray bytes.
  return root.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

void scale_compute(double scale, Profile* profile) {
  for (ProfileUnit& u : profile->units) {
    u.forward_ms = std::min(u.forward_ms * scale, kMaxUnitMs);
    u.backward_ms = std::min(u.backward_ms * scale, kMaxUnitMs);
  }
}

}  // namespace zrt::tune
