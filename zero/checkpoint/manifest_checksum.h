// The manifest's own checksum (manifest.h), shared by the writer (manifest.cc) and the parser
// (manifest_parse.cc).
#pragma once

#include <cstdint>

#include <nlohmann/json_fwd.hpp>

namespace zrt {

// XXH3 of the compact dump without "manifest_checksum": independent of formatting (nlohmann
// keeps object keys sorted, so the dump of equal content is equal bytes).
uint64_t canonical_manifest_checksum(const nlohmann::json& manifest);

}  // namespace zrt
