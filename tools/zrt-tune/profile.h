// The model zrt-tune trains: units (the framework's layers, in forward order) of parameter
// tensors, with the compute time each unit takes forward and backward. It comes from a profile
// file or from a built-in preset (presets.h).
//
// Profile (JSON; the format zrt-mem reads, with the compute times required):
//   { "name": "my-model",
//     "units": [ { "name": "embed", "params": 38597376, "forward_ms": 0.4, "backward_ms": 0.8 },
//                { "name": "block0", "forward_ms": 1.1, "backward_ms": 2.2,
//                  "params": [ {"name": "attn.qkv.weight", "numel": 1769472},
//                              {"name": "ln_1.weight", "numel": 768, "frozen": false} ] } ] }
// "params" is a count (one tensor named "<unit>.weight") or a non-empty list of tensors.
//
// parse_profile is a pure function of its text and is fed untrusted input (a fuzzer runs it):
// every refusal is an INVALID_ARGUMENT naming "<origin>:<line>: <field>: <what is wrong>", and
// every accepted profile stays within the limits below, so that what it describes can actually
// be registered with a partition manager. profile_to_json writes a profile that parse_profile
// reads back equal (the list form of "params" throughout).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "lib/core/status.h"

namespace zrt::tune {

struct ProfileTensor {
  std::string name;
  uint64_t numel = 0;
  bool frozen = false;
  bool operator==(const ProfileTensor&) const = default;
};

struct ProfileUnit {
  std::string name;
  std::vector<ProfileTensor> params;
  double forward_ms = 0;
  double backward_ms = 0;
  bool operator==(const ProfileUnit&) const = default;
};

struct Profile {
  std::string name;
  std::vector<ProfileUnit> units;
  bool operator==(const Profile&) const = default;

  uint64_t total_params() const;
  uint64_t trainable_params() const;
  // Forward plus backward of every unit: the step time if communication hid completely.
  double compute_ms() const;
};

// Limits on accepted input: generous for real models (GPT-3 has 96 layers of ~12 tensors), tight
// enough that a hostile file cannot make the tool allocate without bound.
inline constexpr size_t kMaxProfileBytes = size_t{64} << 20;
inline constexpr int kMaxJsonDepth = 16;
inline constexpr size_t kMaxUnits = 100000;
inline constexpr size_t kMaxTensors = 1000000;
inline constexpr uint64_t kMaxTensorNumel = uint64_t{1} << 40;
inline constexpr uint64_t kMaxTotalNumel = uint64_t{1} << 44;
inline constexpr double kMaxUnitMs = 3.6e6;  // an hour per unit
inline constexpr size_t kMaxNameBytes = 1024;

// Parses profile text; `origin` names it in messages (a path, "<stdin>"). *profile is written
// only on success.
Status parse_profile(std::string_view text, const std::string& origin, Profile* profile);

// Reads and parses a profile file (refusing files over kMaxProfileBytes).
Status load_profile(const std::string& path, Profile* profile);

// The profile as JSON text (2-space indent), readable by parse_profile.
std::string profile_to_json(const Profile& profile);

// Multiplies every unit's compute times by `scale` (>= 0): a faster or slower device.
void scale_compute(double scale, Profile* profile);

}  // namespace zrt::tune
