#include "tools/zrt-ckpt/ckpt_report.h"

#include <fmt/format.h>

#include "zero/checkpoint/checksum.h"
#include "lib/core/dtype.h"
#include "tools/common/table.h"
#include "tools/common/units.h"

namespace zrt::ckpt {
namespace {

using tools::Table;

// Bytes one parameter occupies in the checkpoint: master + slots (f32) + param copy, or the
// frozen values in param dtype.
uint64_t param_bytes(const Manifest& m, const ManifestParam& p) {
  const uint64_t psize = dtype_size(m.param_dtype);
  if (p.frozen) return p.numel * psize;
  return p.numel * (4 * (1 + static_cast<uint64_t>(m.optimizer_slots)) +
                    (m.param_dtype == ZRT_F32 ? 0 : psize));
}

}  // namespace

std::string render_inspection(const CheckpointReader& reader, const Verification& verified) {
  const Manifest& m = reader.manifest();
  uint64_t elements = 0, total = 0;
  for (const ManifestParam& p : m.params) elements += p.numel;
  for (const ManifestFile& f : m.files) total += f.bytes;
  std::string out = fmt::format(
      "# checkpoint {}\n# step {}, saved by {} ranks at stage {}, param dtype {}, master f32, "
      "{} optimizer state slot(s), checksums {}\n# {} parameters, {} elements, {} in {} files\n",
      reader.dir(), m.step, m.world_size, m.stage, dtype_name(m.param_dtype), m.optimizer_slots,
      kChecksumAlgorithm, m.params.size(), tools::format_count(static_cast<double>(elements)),
      tools::format_size(total), m.files.size());
  Table params;
  params.add_column("#");
  params.add_column("name", Table::Align::kLeft);
  params.add_column("unit", Table::Align::kLeft);
  params.add_column("numel");
  params.add_column("stored as", Table::Align::kLeft);
  params.add_column("bytes");
  for (size_t i = 0; i < m.params.size(); ++i) {
    const ManifestParam& p = m.params[i];
    const std::string stored =
        p.frozen ? fmt::format("frozen {}", dtype_name(m.param_dtype))
                 : fmt::format("f32 master + {} f32 state{}", m.optimizer_slots,
                               m.param_dtype == ZRT_F32
                                   ? ""
                                   : fmt::format(" + {} copy", dtype_name(m.param_dtype)));
    params.add_row({std::to_string(i), p.name, p.unit, std::to_string(p.numel), stored,
                    tools::format_size(param_bytes(m, p))});
  }
  out += params.render("# ");
  Table files;
  files.add_column("file", Table::Align::kLeft);
  files.add_column("rank");
  files.add_column("bytes");
  files.add_column("pieces");
  files.add_column("checksum", Table::Align::kLeft);
  files.add_column("verified", Table::Align::kLeft);
  for (size_t i = 0; i < m.files.size(); ++i) {
    const ManifestFile& f = m.files[i];
    files.add_row({f.name, std::to_string(f.rank), tools::format_size(f.bytes),
                   std::to_string(f.trainable.size() + f.frozen.size()),
                   checksum_to_hex(f.checksum), verified[i].empty() ? "-" : verified[i]});
  }
  out += files.render("# ");
  return out;
}

nlohmann::json inspection_to_json(const CheckpointReader& reader, const Verification& verified) {
  const Manifest& m = reader.manifest();
  nlohmann::json j = {{"dir", reader.dir()},
                      {"step", m.step},
                      {"world_size", m.world_size},
                      {"stage", m.stage},
                      {"param_dtype", dtype_name(m.param_dtype)},
                      {"optimizer_slots", m.optimizer_slots},
                      {"checksum_algorithm", kChecksumAlgorithm}};
  nlohmann::json params = nlohmann::json::array();
  for (const ManifestParam& p : m.params) {
    params.push_back({{"name", p.name},
                      {"unit", p.unit},
                      {"numel", p.numel},
                      {"frozen", p.frozen},
                      {"bytes", param_bytes(m, p)}});
  }
  j["params"] = std::move(params);
  nlohmann::json files = nlohmann::json::array();
  for (size_t i = 0; i < m.files.size(); ++i) {
    const ManifestFile& f = m.files[i];
    files.push_back({{"name", f.name},
                     {"rank", f.rank},
                     {"bytes", f.bytes},
                     {"checksum", checksum_to_hex(f.checksum)},
                     {"verified", verified[i].empty() ? nlohmann::json(nullptr)
                                                      : nlohmann::json(verified[i])}});
  }
  j["files"] = std::move(files);
  return j;
}

}  // namespace zrt::ckpt
