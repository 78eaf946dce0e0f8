// The bodies of the fuzz targets, shared by the libFuzzer executables (fuzz_main.cc, built only
// in a clang build configured with -fsanitize=fuzzer-no-link: see build-fuzz.sh) and by the
// replay test (replay_test.cc, built by every compiler), which runs every committed seed and
// every kept crashing input through the same code in `meson test`.
//
// A target returns "" when the input was handled correctly: refused with a status that carries
// a message, or accepted. Accepted input is also re-encoded and parsed again where the format
// has an encoder, and must come back equal: a parser that accepts what its own encoder cannot
// reproduce is as wrong as one that crashes. Anything else is a finding, described in the
// returned text (the fuzzer then aborts so that libFuzzer keeps the input).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace zrt::fuzz {

using FuzzTarget = std::string (*)(const uint8_t* data, size_t size);

// lib/bootstrap/store_protocol.h: the frame header, a request body and a reply body.
std::string fuzz_store_protocol(const uint8_t* data, size_t size);
// lib/bootstrap/store_server.h under its flood limits: the input is what up to four clients
// send on fresh connections (the first byte says how many; the rest is split evenly). However
// they end, a client that has not completed a hello is closed within the hello deadline, and
// afterwards a real client is served at once.
std::string fuzz_store_session(const uint8_t* data, size_t size);
// zero/partition/config.h: partition_options_apply_json, then validate_partition_options.
std::string fuzz_partition_config(const uint8_t* data, size_t size);
// tools/zrt-mem/model_spec.h: the model profile (JsonFile::parse + model_from_profile).
std::string fuzz_model_profile(const uint8_t* data, size_t size);
// zero/checkpoint/manifest.h: parse_manifest, then serialize_manifest and parse again; an
// accepted manifest carries a checksum that a changed step breaks.
std::string fuzz_manifest(const uint8_t* data, size_t size);

// The target named `name` (the folder names under tests/fuzz/corpus), or nullptr.
FuzzTarget find_fuzz_target(const std::string& name);

}  // namespace zrt::fuzz
