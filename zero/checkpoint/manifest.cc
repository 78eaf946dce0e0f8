// Writing a manifest (serialize_manifest) and what the writer and the parser share. Parsing is
// in manifest_parse.cc, the shard files' identity records in shard_identity.cc.
#include "zero/checkpoint/manifest.h"

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "zero/checkpoint/checksum.h"
#include "zero/checkpoint/manifest_checksum.h"
#include "lib/core/dtype.h"

namespace zrt {

using Json = nlohmann::json;

uint64_t canonical_manifest_checksum(const Json& manifest) {
  Json copy = manifest;
  copy.erase("manifest_checksum");
  const std::string text = copy.dump();
  return checksum_of(text.data(), text.size());
}

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
    Json record = {{"name", f.name},
                   {"rank", f.rank},
                   {"bytes", f.bytes},
                   {"checksum", checksum_to_hex(f.checksum)},
                   {"trainable", pieces(f.trainable)},
                   {"frozen", pieces(f.frozen)},
                   {"sections", std::move(sections)}};
    if (f.identity_bytes != 0) {
      record["identity"] = {{"offset", f.identity_offset}, {"bytes", f.identity_bytes}};
    }
    files.push_back(std::move(record));
  }
  j["files"] = std::move(files);
  j["manifest_checksum"] = checksum_to_hex(canonical_manifest_checksum(j));
  return j.dump(1) + "\n";
}

}  // namespace zrt
