#include "lib/checkpoint/manifest.h"

#include <algorithm>
#include <limits>
#include <set>

#include <nlohmann/json.hpp>

#include "lib/checkpoint/checksum.h"
#include "lib/core/dtype.h"

namespace zrt {
namespace {

using Json = nlohmann::json;

constexpr size_t kMaxManifestBytes = size_t{1} << 30;
constexpr int kMaxDepth = 16;  // the schema nests 5 deep; deeper input is refused unparsed
constexpr uint64_t kMaxNumel = uint64_t{1} << 50;
constexpr uint64_t kMaxFileBytes = uint64_t{1} << 56;
constexpr int kMaxWorld = 1 << 20;
constexpr int kMaxSlots = 64;

// The parser recurses per nesting level: bound the depth before handing it the bytes.
bool depth_within(std::string_view bytes, int limit) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (char c : bytes) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > limit) return false;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return true;
}

// Typed field access that never throws; every error names the key path.
class Reader {
 public:
  explicit Reader(const std::string& origin) : origin_(origin) {}

  Status fail(const std::string& where, const std::string& what) const {
    return Status::invalid_argument("{}: {}: {}", origin_, where, what);
  }
  Status object(const Json& j, const std::string& where) const {
    return j.is_object() ? Status::ok() : fail(where, "expected an object");
  }
  Status member(const Json& j, const char* key, const std::string& where, const Json** out) const {
    const auto it = j.find(key);
    if (it == j.end()) return fail(where, fmt::format("missing key \"{}\"", key));
    *out = &*it;
    return Status::ok();
  }
  Status u64(const Json& j, const char* key, const std::string& where, uint64_t max,
             uint64_t* out) const {
    const Json* v = nullptr;
    ZRT_RETURN_IF_ERROR(member(j, key, where, &v));
    return u64_value(*v, where + "." + key, max, out);
  }
  Status u64_value(const Json& v, const std::string& where, uint64_t max, uint64_t* out) const {
    if (!v.is_number_unsigned()) return fail(where, "expected a non-negative integer");
    const uint64_t value = v.get<uint64_t>();
    if (value > max) return fail(where, fmt::format("{} exceeds the limit {}", value, max));
    *out = value;
    return Status::ok();
  }
  Status str(const Json& j, const char* key, const std::string& where, std::string* out) const {
    const Json* v = nullptr;
    ZRT_RETURN_IF_ERROR(member(j, key, where, &v));
    if (!v->is_string()) return fail(where + "." + key, "expected a string");
    *out = v->get<std::string>();
    return Status::ok();
  }
  Status boolean(const Json& j, const char* key, const std::string& where, bool* out) const {
    const Json* v = nullptr;
    ZRT_RETURN_IF_ERROR(member(j, key, where, &v));
    if (!v->is_boolean()) return fail(where + "." + key, "expected true or false");
    *out = v->get<bool>();
    return Status::ok();
  }
  Status array(const Json& j, const char* key, const std::string& where, const Json** out) const {
    ZRT_RETURN_IF_ERROR(member(j, key, where, out));
    if (!(*out)->is_array()) return fail(where + "." + key, "expected an array");
    return Status::ok();
  }
  Status dtype(const Json& j, const char* key, const std::string& where, zrt_dtype_t* out) const {
    std::string name;
    ZRT_RETURN_IF_ERROR(str(j, key, where, &name));
    if (!dtype_from_name(name.c_str(), out)) {
      return fail(where + "." + key, fmt::format("unknown dtype \"{}\"", name));
    }
    return Status::ok();
  }

 private:
  const std::string& origin_;
};

bool safe_file_name(const std::string& name) {
  if (name.empty() || name.size() > 200 || name == "." || name == "..") return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
  });
}

// The optional "shape": at most ZRT_MAX_DIMS dimensions of at least 1 whose product is numel.
Status parse_shape(const Reader& r, const Json& p, const std::string& at, ManifestParam* param) {
  const auto it = p.find("shape");
  if (it == p.end()) return Status::ok();
  const std::string where = at + ".shape";
  if (!it->is_array()) return r.fail(where, "expected an array");
  if (it->size() > ZRT_MAX_DIMS) {
    return r.fail(where, fmt::format("{} dimensions; at most {}", it->size(), ZRT_MAX_DIMS));
  }
  uint64_t product = 1;
  param->shape.emplace();
  for (size_t d = 0; d < it->size(); ++d) {
    uint64_t dim = 0;
    ZRT_RETURN_IF_ERROR(r.u64_value((*it)[d], fmt::format("{}[{}]", where, d), kMaxNumel, &dim));
    if (dim == 0) return r.fail(fmt::format("{}[{}]", where, d), "must be at least 1");
    if (dim > kMaxNumel / product) return r.fail(where, "its element count overflows");
    product *= dim;
    param->shape->push_back(dim);
  }
  if (product != param->numel) {
    return r.fail(where, fmt::format("holds {} elements, but parameter \"{}\" has numel {}",
                                     product, param->name, param->numel));
  }
  return Status::ok();
}

Status parse_pieces(const Reader& r, const Json& list, const std::string& where,
                    const std::vector<ManifestParam>& params, bool frozen,
                    std::vector<ManifestPiece>* out) {
  out->clear();
  out->reserve(list.size());
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string at = fmt::format("{}[{}]", where, i);
    const Json& item = list[i];
    if (!item.is_array() || item.size() != 3) {
      return r.fail(at, "expected [param, first element, count]");
    }
    ManifestPiece piece;
    uint64_t param = 0;
    ZRT_RETURN_IF_ERROR(r.u64_value(item[0], at + "[0]", params.size(), &param));
    if (param >= params.size()) {
      return r.fail(
          at, fmt::format("parameter {} does not exist ({} parameters)", param, params.size()));
    }
    piece.param = static_cast<uint32_t>(param);
    ZRT_RETURN_IF_ERROR(r.u64_value(item[1], at + "[1]", kMaxNumel, &piece.param_offset));
    ZRT_RETURN_IF_ERROR(r.u64_value(item[2], at + "[2]", kMaxNumel, &piece.count));
    const ManifestParam& p = params[param];
    if (piece.count == 0 || piece.param_offset > p.numel ||
        piece.count > p.numel - piece.param_offset) {
      return r.fail(at, fmt::format("elements [{}, {}) are outside parameter {} (\"{}\", {} "
                                    "elements)",
                                    piece.param_offset, piece.param_offset + piece.count, param,
                                    p.name, p.numel));
    }
    if (p.frozen != frozen) {
      return r.fail(
          at, fmt::format("parameter {} (\"{}\") is {}frozen but listed among the {} "
                          "pieces",
                          param, p.name, p.frozen ? "" : "not ", frozen ? "frozen" : "trainable"));
    }
    out->push_back(piece);
  }
  return Status::ok();
}

Status parse_file(const Reader& r, const Json& j, const std::string& where, const Manifest& m,
                  ManifestFile* file) {
  ZRT_RETURN_IF_ERROR(r.object(j, where));
  ZRT_RETURN_IF_ERROR(r.str(j, "name", where, &file->name));
  if (!safe_file_name(file->name)) {
    return r.fail(where + ".name", fmt::format("\"{}\" is not a plain file name", file->name));
  }
  const std::string at = fmt::format("file \"{}\"", file->name);
  uint64_t value = 0;
  ZRT_RETURN_IF_ERROR(r.u64(j, "rank", at, static_cast<uint64_t>(m.world_size) - 1, &value));
  file->rank = static_cast<int>(value);
  ZRT_RETURN_IF_ERROR(r.u64(j, "bytes", at, kMaxFileBytes, &file->bytes));
  std::string hex;
  ZRT_RETURN_IF_ERROR(r.str(j, "checksum", at, &hex));
  if (!checksum_from_hex(hex, &file->checksum)) {
    return r.fail(at + ".checksum", "expected 16 lower-case hex digits");
  }
  const Json* list = nullptr;
  ZRT_RETURN_IF_ERROR(r.array(j, "trainable", at, &list));
  ZRT_RETURN_IF_ERROR(parse_pieces(r, *list, at + ".trainable", m.params, false, &file->trainable));
  ZRT_RETURN_IF_ERROR(r.array(j, "frozen", at, &list));
  ZRT_RETURN_IF_ERROR(parse_pieces(r, *list, at + ".frozen", m.params, true, &file->frozen));

  // Sections: master, every state slot once, param at most once, frozen iff frozen pieces.
  ZRT_RETURN_IF_ERROR(r.array(j, "sections", at, &list));
  std::vector<int> seen_state(static_cast<size_t>(m.optimizer_slots), 0);
  int masters = 0, param_sections = 0, frozen_sections = 0;
  for (size_t i = 0; i < list->size(); ++i) {
    const std::string sat = fmt::format("{}.sections[{}]", at, i);
    const Json& s = (*list)[i];
    ZRT_RETURN_IF_ERROR(r.object(s, sat));
    ManifestSection section;
    std::string kind;
    ZRT_RETURN_IF_ERROR(r.str(s, "kind", sat, &kind));
    ZRT_RETURN_IF_ERROR(r.dtype(s, "dtype", sat, &section.dtype));
    ZRT_RETURN_IF_ERROR(r.u64(s, "offset", sat, kMaxFileBytes, &section.offset));
    ZRT_RETURN_IF_ERROR(r.u64(s, "bytes", sat, kMaxFileBytes, &section.bytes));
    zrt_dtype_t expected = ZRT_F32;
    if (kind == "master") {
      section.kind = SectionKind::kMaster;
      ++masters;
    } else if (kind == "state") {
      section.kind = SectionKind::kState;
      uint64_t slot = 0;
      ZRT_RETURN_IF_ERROR(r.u64(s, "slot", sat, kMaxSlots, &slot));
      if (slot >= seen_state.size() || seen_state[slot]++ > 0) {
        return r.fail(sat, fmt::format("state slot {} is out of range ({} slots) or repeated", slot,
                                       m.optimizer_slots));
      }
      section.slot = static_cast<int>(slot);
    } else if (kind == "param") {
      section.kind = SectionKind::kParam;
      expected = m.param_dtype;
      ++param_sections;
    } else if (kind == "frozen") {
      section.kind = SectionKind::kFrozen;
      expected = m.param_dtype;
      ++frozen_sections;
    } else {
      return r.fail(sat + ".kind", fmt::format("unknown section kind \"{}\"", kind));
    }
    if (section.dtype != expected) {
      return r.fail(sat, fmt::format("a {} section must be {}, not {}", kind, dtype_name(expected),
                                     dtype_name(section.dtype)));
    }
    // Its length must be exactly its pieces' elements (each count < 2^50, so no overflow
    // below 2^13 pieces per 2^63; checked as we go).
    uint64_t elements = 0;
    for (const ManifestPiece& piece : section_pieces(*file, section.kind)) {
      elements += piece.count;
      if (elements > kMaxFileBytes) return r.fail(sat, "too many elements");
    }
    if (elements * dtype_size(section.dtype) != section.bytes) {
      return r.fail(sat, fmt::format("{} bytes, but its pieces hold {} elements of {}",
                                     section.bytes, elements, dtype_name(section.dtype)));
    }
    if (section.offset > file->bytes || section.bytes > file->bytes - section.offset) {
      return r.fail(sat, fmt::format("bytes [{}, {}) lie past the file's end ({} bytes)",
                                     section.offset, section.offset + section.bytes, file->bytes));
    }
    file->sections.push_back(section);
  }
  if (masters != 1) return r.fail(at, fmt::format("{} master sections, expected 1", masters));
  for (size_t slot = 0; slot < seen_state.size(); ++slot) {
    if (seen_state[slot] != 1) return r.fail(at, fmt::format("state slot {} is missing", slot));
  }
  if (param_sections > 1) return r.fail(at, "more than one param section");
  if (frozen_sections != (file->frozen.empty() ? 0 : 1)) {
    return r.fail(at, "a frozen section is needed exactly when there are frozen pieces");
  }
  std::vector<ManifestSection> sorted = file->sections;
  std::sort(sorted.begin(), sorted.end(),
            [](const ManifestSection& a, const ManifestSection& b) { return a.offset < b.offset; });
  for (size_t i = 1; i < sorted.size(); ++i) {
    if (sorted[i - 1].offset + sorted[i - 1].bytes > sorted[i].offset) {
      return r.fail(at, fmt::format("sections at bytes {} and {} overlap", sorted[i - 1].offset,
                                    sorted[i].offset));
    }
  }
  return Status::ok();
}

// Every parameter of the kind must be covered by the pieces of all files exactly once.
Status check_coverage(const Reader& r, const Manifest& m, bool frozen) {
  std::vector<std::vector<std::pair<uint64_t, uint64_t>>> ranges(m.params.size());
  for (const ManifestFile& file : m.files) {
    for (const ManifestPiece& piece : frozen ? file.frozen : file.trainable) {
      ranges[piece.param].emplace_back(piece.param_offset, piece.count);
    }
  }
  for (size_t p = 0; p < m.params.size(); ++p) {
    if (m.params[p].frozen != frozen) continue;
    auto& list = ranges[p];
    std::sort(list.begin(), list.end());
    uint64_t next = 0;
    for (const auto& [offset, count] : list) {
      if (offset != next) {
        return r.fail(
            fmt::format("parameter {} (\"{}\")", p, m.params[p].name),
            fmt::format("elements [{}, {}) are {} in the shard files", std::min(offset, next),
                        std::max(offset, next), offset > next ? "missing" : "stored twice"));
      }
      next = offset + count;
    }
    if (next != m.params[p].numel) {
      return r.fail(
          fmt::format("parameter {} (\"{}\")", p, m.params[p].name),
          fmt::format("elements [{}, {}) are missing in the shard files", next, m.params[p].numel));
    }
  }
  return Status::ok();
}

}  // namespace

const char* section_kind_name(SectionKind kind) {
  switch (kind) {
    case SectionKind::kMaster:
      return "master";
    case SectionKind::kState:
      return "state";
    case SectionKind::kParam:
      return "param";
    case SectionKind::kFrozen:
      return "frozen";
  }
  return "?";
}

const std::vector<ManifestPiece>& section_pieces(const ManifestFile& file, SectionKind kind) {
  return kind == SectionKind::kFrozen ? file.frozen : file.trainable;
}

std::string serialize_manifest(const Manifest& m) {
  Json j;
  j["format"] = kManifestFormat;
  j["version"] = m.version;
  j["checksum_algorithm"] = kChecksumAlgorithm;
  j["step"] = static_cast<uint64_t>(m.step);
  j["world_size"] = m.world_size;
  j["stage"] = m.stage;
  j["param_dtype"] = dtype_name(m.param_dtype);
  j["optimizer_slots"] = m.optimizer_slots;
  Json params = Json::array();
  for (const ManifestParam& p : m.params) {
    Json param = {{"name", p.name}, {"unit", p.unit}, {"numel", p.numel}, {"frozen", p.frozen}};
    if (p.shape) param["shape"] = *p.shape;
    params.push_back(std::move(param));
  }
  j["params"] = std::move(params);
  Json files = Json::array();
  for (const ManifestFile& f : m.files) {
    auto pieces = [](const std::vector<ManifestPiece>& list) {
      Json out = Json::array();
      for (const ManifestPiece& piece : list) {
        out.push_back(Json::array({piece.param, piece.param_offset, piece.count}));
      }
      return out;
    };
    Json sections = Json::array();
    for (const ManifestSection& s : f.sections) {
      Json section = {{"kind", section_kind_name(s.kind)},
                      {"dtype", dtype_name(s.dtype)},
                      {"offset", s.offset},
                      {"bytes", s.bytes}};
      if (s.kind == SectionKind::kState) section["slot"] = s.slot;
      sections.push_back(std::move(section));
    }
    files.push_back({{"name", f.name},
                     {"rank", f.rank},
                     {"bytes", f.bytes},
                     {"checksum", checksum_to_hex(f.checksum)},
                     {"trainable", pieces(f.trainable)},
                     {"frozen", pieces(f.frozen)},
                     {"sections", std::move(sections)}});
  }
  j["files"] = std::move(files);
  return j.dump(1) + "\n";
}

Status parse_manifest(std::string_view bytes, const std::string& origin, Manifest* manifest) {
  const Reader r(origin);
  if (bytes.size() > kMaxManifestBytes) return r.fail("manifest", "larger than 1 GiB");
  if (!depth_within(bytes, kMaxDepth)) return r.fail("manifest", "nested too deeply");
  const Json j = Json::parse(bytes.begin(), bytes.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return r.fail("manifest", "not valid JSON (truncated or corrupted?)");
  ZRT_RETURN_IF_ERROR(r.object(j, "manifest"));
  Manifest m;
  std::string format;
  ZRT_RETURN_IF_ERROR(r.str(j, "format", "manifest", &format));
  if (format != kManifestFormat) {
    return r.fail("format",
                  fmt::format("\"{}\" is not a zrt checkpoint (\"{}\")", format, kManifestFormat));
  }
  uint64_t value = 0;
  ZRT_RETURN_IF_ERROR(
      r.u64(j, "version", "manifest", std::numeric_limits<uint32_t>::max(), &value));
  if (value != static_cast<uint64_t>(kManifestVersion)) {
    return r.fail("version", fmt::format("unknown format version {} (this zrt reads version {})",
                                         value, kManifestVersion));
  }
  std::string algorithm;
  ZRT_RETURN_IF_ERROR(r.str(j, "checksum_algorithm", "manifest", &algorithm));
  if (algorithm != kChecksumAlgorithm) {
    return r.fail("checksum_algorithm", fmt::format("unknown algorithm \"{}\" (this zrt uses {})",
                                                    algorithm, kChecksumAlgorithm));
  }
  ZRT_RETURN_IF_ERROR(r.u64(j, "step", "manifest",
                            static_cast<uint64_t>(std::numeric_limits<int64_t>::max()), &value));
  m.step = static_cast<int64_t>(value);
  ZRT_RETURN_IF_ERROR(r.u64(j, "world_size", "manifest", kMaxWorld, &value));
  if (value == 0) return r.fail("world_size", "must be at least 1");
  m.world_size = static_cast<int>(value);
  ZRT_RETURN_IF_ERROR(r.u64(j, "stage", "manifest", 3, &value));
  m.stage = static_cast<int>(value);
  ZRT_RETURN_IF_ERROR(r.dtype(j, "param_dtype", "manifest", &m.param_dtype));
  if (m.param_dtype != ZRT_F32 && m.param_dtype != ZRT_F16 && m.param_dtype != ZRT_BF16) {
    return r.fail("param_dtype", "must be f32, f16 or bf16");
  }
  ZRT_RETURN_IF_ERROR(r.u64(j, "optimizer_slots", "manifest", kMaxSlots, &value));
  m.optimizer_slots = static_cast<int>(value);

  const Json* list = nullptr;
  ZRT_RETURN_IF_ERROR(r.array(j, "params", "manifest", &list));
  m.params.reserve(list->size());
  for (size_t i = 0; i < list->size(); ++i) {
    const std::string at = fmt::format("params[{}]", i);
    const Json& p = (*list)[i];
    ZRT_RETURN_IF_ERROR(r.object(p, at));
    ManifestParam param;
    ZRT_RETURN_IF_ERROR(r.str(p, "name", at, &param.name));
    ZRT_RETURN_IF_ERROR(r.str(p, "unit", at, &param.unit));
    ZRT_RETURN_IF_ERROR(r.u64(p, "numel", at, kMaxNumel, &param.numel));
    if (param.numel == 0) return r.fail(at + ".numel", "must be at least 1");
    ZRT_RETURN_IF_ERROR(r.boolean(p, "frozen", at, &param.frozen));
    ZRT_RETURN_IF_ERROR(parse_shape(r, p, at, &param));
    m.params.push_back(std::move(param));
  }
  ZRT_RETURN_IF_ERROR(r.array(j, "files", "manifest", &list));
  if (list->size() != static_cast<size_t>(m.world_size)) {
    return r.fail("files", fmt::format("{} shard files listed for world_size {}", list->size(),
                                       m.world_size));
  }
  std::set<std::string> names;
  std::vector<int> ranks(static_cast<size_t>(m.world_size), 0);
  m.files.resize(list->size());
  for (size_t i = 0; i < list->size(); ++i) {
    ZRT_RETURN_IF_ERROR(parse_file(r, (*list)[i], fmt::format("files[{}]", i), m, &m.files[i]));
    if (!names.insert(m.files[i].name).second || m.files[i].name == kManifestName) {
      return r.fail(fmt::format("files[{}]", i),
                    fmt::format("file name \"{}\" is used twice", m.files[i].name));
    }
    if (ranks[static_cast<size_t>(m.files[i].rank)]++ > 0) {
      return r.fail(fmt::format("files[{}]", i),
                    fmt::format("rank {} has two files", m.files[i].rank));
    }
  }
  ZRT_RETURN_IF_ERROR(check_coverage(r, m, false));
  ZRT_RETURN_IF_ERROR(check_coverage(r, m, true));
  *manifest = std::move(m);
  return Status::ok();
}

}  // namespace zrt
