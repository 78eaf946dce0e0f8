// What zrt-ckpt inspect prints: the checkpoint's parameters, sizes, dtypes, the N it was saved
// at, and each file's checksum (verified when asked), as text tables or JSON.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "zero/checkpoint/checkpoint_reader.h"

namespace zrt::ckpt {

// Per file: "" when not verified, "ok", or the verification error.
using Verification = std::vector<std::string>;

std::string render_inspection(const CheckpointReader& reader, const Verification& verified);
nlohmann::json inspection_to_json(const CheckpointReader& reader, const Verification& verified);

}  // namespace zrt::ckpt
