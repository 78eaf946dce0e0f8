// Parsing and validating a manifest (manifest.h: parse_manifest trusts nothing in the bytes).
#include "zero/checkpoint/manifest.h"

#include <algorithm>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "zero/checkpoint/checksum.h"
#include "zero/checkpoint/manifest_checksum.h"
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

// A file's sections of each kind, counted as they are parsed (parse_sections checks the counts).
struct SectionCounts {
  explicit SectionCounts(int slots) : state(static_cast<size_t>(slots), 0) {}
  std::vector<int> state;  // per optimizer slot
  int masters = 0;
  int params = 0;
  int frozen = 0;
};

// The section's kind (for a state section also its slot), counted in `counts`; `*expected` is
// the dtype that kind must have.
Status parse_section_kind(const Reader& r, const Json& s, const std::string& sat,
                          const std::string& kind, const Manifest& m, SectionCounts* counts,
                          ManifestSection* section, zrt_dtype_t* expected) {
  if (kind == "master") {
    section->kind = SectionKind::kMaster;
    ++counts->masters;
  } else if (kind == "state") {
    section->kind = SectionKind::kState;
    uint64_t slot = 0;
    ZRT_RETURN_IF_ERROR(r.u64(s, "slot", sat, kMaxSlots, &slot));
    if (slot >= counts->state.size() || counts->state[slot]++ > 0) {
      return r.fail(sat, fmt::format("state slot {} is out of range ({} slots) or repeated", slot,
                                     m.optimizer_slots));
    }
    section->slot = static_cast<int>(slot);
  } else if (kind == "param") {
    section->kind = SectionKind::kParam;
    *expected = m.param_dtype;
    ++counts->params;
  } else if (kind == "frozen") {
    section->kind = SectionKind::kFrozen;
    *expected = m.param_dtype;
    ++counts->frozen;
  } else {
    return r.fail(sat + ".kind", fmt::format("unknown section kind \"{}\"", kind));
  }
  return Status::ok();
}

// The section's bytes: exactly its pieces' elements, inside the file.
Status check_section_extent(const Reader& r, const std::string& sat, const ManifestFile& file,
                            const ManifestSection& section) {
  // Its length must be exactly its pieces' elements (each count < 2^50, so no overflow
  // below 2^13 pieces per 2^63; checked as we go).
  uint64_t elements = 0;
  for (const ManifestPiece& piece : section_pieces(file, section.kind)) {
    elements += piece.count;
    if (elements > kMaxFileBytes) return r.fail(sat, "too many elements");
  }
  if (elements * dtype_size(section.dtype) != section.bytes) {
    return r.fail(sat, fmt::format("{} bytes, but its pieces hold {} elements of {}",
                                   section.bytes, elements, dtype_name(section.dtype)));
  }
  if (section.offset > file.bytes || section.bytes > file.bytes - section.offset) {
    return r.fail(sat, fmt::format("bytes [{}, {}) lie past the file's end ({} bytes)",
                                   section.offset, section.offset + section.bytes, file.bytes));
  }
  return Status::ok();
}

Status parse_section(const Reader& r, const Json& s, const std::string& sat, const Manifest& m,
                     const ManifestFile& file, SectionCounts* counts, ManifestSection* section) {
  ZRT_RETURN_IF_ERROR(r.object(s, sat));
  std::string kind;
  ZRT_RETURN_IF_ERROR(r.str(s, "kind", sat, &kind));
  ZRT_RETURN_IF_ERROR(r.dtype(s, "dtype", sat, &section->dtype));
  ZRT_RETURN_IF_ERROR(r.u64(s, "offset", sat, kMaxFileBytes, &section->offset));
  ZRT_RETURN_IF_ERROR(r.u64(s, "bytes", sat, kMaxFileBytes, &section->bytes));
  zrt_dtype_t expected = ZRT_F32;
  ZRT_RETURN_IF_ERROR(parse_section_kind(r, s, sat, kind, m, counts, section, &expected));
  if (section->dtype != expected) {
    return r.fail(sat, fmt::format("a {} section must be {}, not {}", kind, dtype_name(expected),
                                   dtype_name(section->dtype)));
  }
  return check_section_extent(r, sat, file, *section);
}

// Sections: master, every state slot once, param at most once, frozen iff frozen pieces.
Status parse_sections(const Reader& r, const Json& j, const std::string& at, const Manifest& m,
                      ManifestFile* file) {
  const Json* list = nullptr;
  ZRT_RETURN_IF_ERROR(r.array(j, "sections", at, &list));
  SectionCounts counts(m.optimizer_slots);
  for (size_t i = 0; i < list->size(); ++i) {
    ManifestSection section;
    ZRT_RETURN_IF_ERROR(parse_section(r, (*list)[i], fmt::format("{}.sections[{}]", at, i), m,
                                      *file, &counts, &section));
    file->sections.push_back(section);
  }
  if (counts.masters != 1) {
    return r.fail(at, fmt::format("{} master sections, expected 1", counts.masters));
  }
  for (size_t slot = 0; slot < counts.state.size(); ++slot) {
    if (counts.state[slot] != 1) return r.fail(at, fmt::format("state slot {} is missing", slot));
  }
  if (counts.params > 1) return r.fail(at, "more than one param section");
  if (counts.frozen != (file->frozen.empty() ? 0 : 1)) {
    return r.fail(at, "a frozen section is needed exactly when there are frozen pieces");
  }
  return Status::ok();
}

// The identity record, when present, follows the sections and ends the file.
Status parse_identity(const Reader& r, const Json& j, const std::string& at, ManifestFile* file) {
  const auto it = j.find("identity");
  if (it == j.end()) return Status::ok();
  ZRT_RETURN_IF_ERROR(r.object(*it, at + ".identity"));
  ZRT_RETURN_IF_ERROR(
      r.u64(*it, "offset", at + ".identity", kMaxFileBytes, &file->identity_offset));
  ZRT_RETURN_IF_ERROR(r.u64(*it, "bytes", at + ".identity", kMaxFileBytes, &file->identity_bytes));
  uint64_t sections_end = 0;
  for (const ManifestSection& section : file->sections) {
    sections_end = std::max(sections_end, section.offset + section.bytes);
  }
  if (file->identity_bytes == 0 || file->identity_offset < sections_end ||
      file->identity_offset > file->bytes ||
      file->identity_bytes != file->bytes - file->identity_offset) {
    return r.fail(at + ".identity",
                  fmt::format("bytes [{}, {}) must follow the sections (which end at {}) and end "
                              "the file ({} bytes)",
                              file->identity_offset, file->identity_offset + file->identity_bytes,
                              sections_end, file->bytes));
  }
  return Status::ok();
}

Status check_sections_disjoint(const Reader& r, const std::string& at, const ManifestFile& file) {
  std::vector<ManifestSection> sorted = file.sections;
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

// One file record: what it is (name, rank, size, checksum), its pieces, its sections, its
// identity record.
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
  ZRT_RETURN_IF_ERROR(parse_sections(r, j, at, m, file));
  ZRT_RETURN_IF_ERROR(parse_identity(r, j, at, file));
  return check_sections_disjoint(r, at, *file);
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

Status check_manifest_checksum(const Reader& r, const Json& j) {
  const auto it = j.find("manifest_checksum");
  if (it == j.end()) {
    return r.fail("manifest",
                  "missing key \"manifest_checksum\": the manifest was written by an older zrt "
                  "or edited; it cannot be verified (load it with the zrt that wrote it and save "
                  "again)");
  }
  if (!it->is_string()) return r.fail("manifest_checksum", "expected a string");
  const std::string hex = it->get<std::string>();
  uint64_t recorded = 0;
  if (!checksum_from_hex(hex, &recorded)) {
    return r.fail("manifest_checksum", "expected 16 lower-case hex digits");
  }
  const uint64_t actual = canonical_manifest_checksum(j);
  if (actual != recorded) {
    return r.fail("manifest_checksum",
                  fmt::format("the manifest is corrupted or was edited: its {} checksum is {}, "
                              "the recorded one {}; restore it from a backup or use an earlier "
                              "checkpoint",
                              kChecksumAlgorithm, checksum_to_hex(actual), hex));
  }
  return Status::ok();
}

// The bytes as JSON, refused before parsing when too large or nested too deeply.
Status parse_json(const Reader& r, std::string_view bytes, Json* j) {
  if (bytes.size() > kMaxManifestBytes) return r.fail("manifest", "larger than 1 GiB");
  if (!depth_within(bytes, kMaxDepth)) return r.fail("manifest", "nested too deeply");
  *j = Json::parse(bytes.begin(), bytes.end(), nullptr, /*allow_exceptions=*/false);
  if (j->is_discarded()) return r.fail("manifest", "not valid JSON (truncated or corrupted?)");
  return r.object(*j, "manifest");
}

// The keys that say what the manifest is (format, version, checksum algorithm) and what wrote
// it (step, world size, stage, param dtype, optimizer slots).
Status parse_header(const Reader& r, const Json& j, Manifest* m) {
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
  m->version = static_cast<int>(value);
  std::string algorithm;
  ZRT_RETURN_IF_ERROR(r.str(j, "checksum_algorithm", "manifest", &algorithm));
  if (algorithm != kChecksumAlgorithm) {
    return r.fail("checksum_algorithm", fmt::format("unknown algorithm \"{}\" (this zrt uses {})",
                                                    algorithm, kChecksumAlgorithm));
  }
  ZRT_RETURN_IF_ERROR(r.u64(j, "step", "manifest",
                            static_cast<uint64_t>(std::numeric_limits<int64_t>::max()), &value));
  m->step = static_cast<int64_t>(value);
  ZRT_RETURN_IF_ERROR(r.u64(j, "world_size", "manifest", kMaxWorld, &value));
  if (value == 0) return r.fail("world_size", "must be at least 1");
  m->world_size = static_cast<int>(value);
  ZRT_RETURN_IF_ERROR(r.u64(j, "stage", "manifest", 3, &value));
  m->stage = static_cast<int>(value);
  ZRT_RETURN_IF_ERROR(r.dtype(j, "param_dtype", "manifest", &m->param_dtype));
  if (m->param_dtype != ZRT_F32 && m->param_dtype != ZRT_F16 && m->param_dtype != ZRT_BF16) {
    return r.fail("param_dtype", "must be f32, f16 or bf16");
  }
  ZRT_RETURN_IF_ERROR(r.u64(j, "optimizer_slots", "manifest", kMaxSlots, &value));
  m->optimizer_slots = static_cast<int>(value);
  return Status::ok();
}

Status parse_params(const Reader& r, const Json& j, Manifest* m) {
  const Json* list = nullptr;
  ZRT_RETURN_IF_ERROR(r.array(j, "params", "manifest", &list));
  m->params.reserve(list->size());
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
    m->params.push_back(std::move(param));
  }
  return Status::ok();
}

// One file per rank, each with its own name.
Status parse_files(const Reader& r, const Json& j, Manifest* m) {
  const Json* list = nullptr;
  ZRT_RETURN_IF_ERROR(r.array(j, "files", "manifest", &list));
  if (list->size() != static_cast<size_t>(m->world_size)) {
    return r.fail("files", fmt::format("{} shard files listed for world_size {}", list->size(),
                                       m->world_size));
  }
  std::set<std::string> names;
  std::vector<int> ranks(static_cast<size_t>(m->world_size), 0);
  m->files.resize(list->size());
  for (size_t i = 0; i < list->size(); ++i) {
    ZRT_RETURN_IF_ERROR(parse_file(r, (*list)[i], fmt::format("files[{}]", i), *m, &m->files[i]));
    if (!names.insert(m->files[i].name).second || m->files[i].name == kManifestName) {
      return r.fail(fmt::format("files[{}]", i),
                    fmt::format("file name \"{}\" is used twice", m->files[i].name));
    }
    if (ranks[static_cast<size_t>(m->files[i].rank)]++ > 0) {
      return r.fail(fmt::format("files[{}]", i),
                    fmt::format("rank {} has two files", m->files[i].rank));
    }
  }
  return Status::ok();
}

// Each file's identity record must have the size its pieces give it.
Status check_identity_sizes(const Reader& r, const Manifest& m) {
  for (const ManifestFile& file : m.files) {
    if (file.identity_bytes != 0 &&
        file.identity_bytes != shard_identity(file, m.step, m.params).size()) {
      return r.fail(fmt::format("file \"{}\".identity", file.name),
                    fmt::format("{} bytes, but its pieces need {}", file.identity_bytes,
                                shard_identity(file, m.step, m.params).size()));
    }
  }
  return Status::ok();
}

}  // namespace

Status parse_manifest(std::string_view bytes, const std::string& origin, Manifest* manifest) {
  Status checksum;
  ZRT_RETURN_IF_ERROR(parse_manifest_structure(bytes, origin, manifest, &checksum));
  return checksum;
}
Status parse_manifest_structure(std::string_view bytes, const std::string& origin,
                                Manifest* manifest, Status* checksum) {
  const Reader r(origin);
  Json j;
  ZRT_RETURN_IF_ERROR(parse_json(r, bytes, &j));
  Manifest m;
  ZRT_RETURN_IF_ERROR(parse_header(r, j, &m));
  ZRT_RETURN_IF_ERROR(parse_params(r, j, &m));
  ZRT_RETURN_IF_ERROR(parse_files(r, j, &m));
  ZRT_RETURN_IF_ERROR(check_coverage(r, m, false));
  ZRT_RETURN_IF_ERROR(check_coverage(r, m, true));
  ZRT_RETURN_IF_ERROR(check_identity_sizes(r, m));
  *checksum = check_manifest_checksum(r, j);
  *manifest = std::move(m);
  return Status::ok();
}

}  // namespace zrt
