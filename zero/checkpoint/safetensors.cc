#include "zero/checkpoint/safetensors.h"

#include <algorithm>
#include <set>

#include <nlohmann/json.hpp>

#include "lib/core/dtype.h"

namespace zrt {
namespace {

using Json = nlohmann::json;

const char* st_dtype(zrt_dtype_t dtype) {
  switch (dtype) {
    case ZRT_F32:
      return "F32";
    case ZRT_F16:
      return "F16";
    case ZRT_BF16:
      return "BF16";
    case ZRT_F64:
      return "F64";
    default:
      return nullptr;
  }
}

bool st_dtype_from(const std::string& name, zrt_dtype_t* dtype) {
  for (zrt_dtype_t d : {ZRT_F32, ZRT_F16, ZRT_BF16, ZRT_F64}) {
    if (name == st_dtype(d)) {
      *dtype = d;
      return true;
    }
  }
  return false;
}

}  // namespace

Status safetensors_build(SafetensorsFile* file, std::string* header) {
  Json j = Json::object();
  uint64_t offset = 0;
  std::set<std::string> names;
  for (SafetensorsTensor& t : file->tensors) {
    if (st_dtype(t.dtype) == nullptr) {
      return Status::invalid_argument("safetensors export: dtype {} is not supported",
                                      dtype_name(t.dtype));
    }
    if (!names.insert(t.name).second || t.name == "__metadata__") {
      return Status::invalid_argument("safetensors export: tensor name \"{}\" is not unique",
                                      t.name);
    }
    t.begin = offset;
    t.end = offset + t.numel * dtype_size(t.dtype);
    offset = t.end;
    j[t.name] = {{"dtype", st_dtype(t.dtype)},
                 {"shape", t.shape ? Json(*t.shape) : Json::array({t.numel})},
                 {"data_offsets", Json::array({t.begin, t.end})}};
  }
  if (!file->metadata.empty()) j["__metadata__"] = file->metadata;
  std::string text = j.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  const uint64_t length = text.size();
  header->clear();
  for (int i = 0; i < 8; ++i) header->push_back(static_cast<char>((length >> (8 * i)) & 0xff));
  *header += text;
  file->data_start = header->size();
  return Status::ok();
}

Status safetensors_parse(std::string_view bytes, const std::string& origin, SafetensorsFile* out) {
  if (bytes.size() < 8) return Status::invalid_argument("{}: shorter than 8 bytes", origin);
  uint64_t length = 0;
  for (int i = 0; i < 8; ++i) {
    length |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
  }
  if (length > bytes.size() - 8) {
    return Status::invalid_argument("{}: header of {} bytes is truncated", origin, length);
  }
  const Json j = Json::parse(bytes.substr(8, length), nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return Status::invalid_argument("{}: the header is not a JSON object", origin);
  }
  SafetensorsFile file;
  file.data_start = 8 + length;
  for (const auto& [key, value] : j.items()) {
    if (key == "__metadata__") {
      if (!value.is_object()) return Status::invalid_argument("{}: bad __metadata__", origin);
      for (const auto& [k, v] : value.items()) {
        if (!v.is_string())
          return Status::invalid_argument("{}: metadata {} not a string", origin, k);
        file.metadata[k] = v.get<std::string>();
      }
      continue;
    }
    SafetensorsTensor t;
    t.name = key;
    const auto dtype = value.find("dtype");
    const auto shape = value.find("shape");
    const auto offsets = value.find("data_offsets");
    if (!value.is_object() || dtype == value.end() || !dtype->is_string() ||
        !st_dtype_from(dtype->get<std::string>(), &t.dtype) || shape == value.end() ||
        !shape->is_array() || offsets == value.end() || !offsets->is_array() ||
        offsets->size() != 2 || !(*offsets)[0].is_number_unsigned() ||
        !(*offsets)[1].is_number_unsigned()) {
      return Status::invalid_argument("{}: tensor \"{}\" is malformed", origin, key);
    }
    t.numel = 1;
    t.shape.emplace();
    for (const Json& dim : *shape) {
      if (!dim.is_number_unsigned()) {
        return Status::invalid_argument("{}: tensor \"{}\" has a bad shape", origin, key);
      }
      t.numel *= dim.get<uint64_t>();
      t.shape->push_back(dim.get<uint64_t>());
    }
    t.begin = (*offsets)[0].get<uint64_t>();
    t.end = (*offsets)[1].get<uint64_t>();
    if (t.end < t.begin || t.end - t.begin != t.numel * dtype_size(t.dtype)) {
      return Status::invalid_argument("{}: tensor \"{}\": offsets disagree with its shape", origin,
                                      key);
    }
    file.tensors.push_back(std::move(t));
  }
  std::sort(
      file.tensors.begin(), file.tensors.end(),
      [](const SafetensorsTensor& a, const SafetensorsTensor& b) { return a.begin < b.begin; });
  uint64_t next = 0;
  for (const SafetensorsTensor& t : file.tensors) {
    if (t.begin != next) {
      return Status::invalid_argument("{}: tensor \"{}\" does not follow the previous one", origin,
                                      t.name);
    }
    next = t.end;
  }
  *out = std::move(file);
  return Status::ok();
}

std::vector<std::string> export_tensor_names(const std::vector<std::string>& units,
                                             const std::vector<std::string>& names) {
  std::vector<std::string> out;
  std::set<std::string> used;
  for (size_t i = 0; i < names.size(); ++i) {
    // Frameworks often name parameters "unit.param" already: do not prefix those twice.
    const bool qualified = units[i].empty() || names[i].rfind(units[i] + ".", 0) == 0;
    std::string name = qualified ? names[i] : units[i] + "." + names[i];
    if (name.empty()) name = "param";
    if (used.count(name) > 0 || name == "__metadata__") {
      std::string candidate = fmt::format("{}.{}", name, i);
      while (used.count(candidate) > 0) candidate += "_";
      name = candidate;
    }
    used.insert(name);
    out.push_back(std::move(name));
  }
  return out;
}

}  // namespace zrt
