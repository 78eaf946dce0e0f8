#include "tests/fuzz/fuzz_targets.h"

#include <fmt/format.h>

#include <cstring>
#include <string_view>
#include <vector>

#include "lib/bootstrap/store_protocol.h"
#include "lib/partition/config.h"
#if ZRT_FUZZ_HAVE_CHECKPOINT
#include "lib/checkpoint/manifest.h"
#endif
#if ZRT_FUZZ_HAVE_MODEL_PROFILE
#include "tools/common/json_file.h"
#include "tools/zrt-mem/model_spec.h"
#endif

namespace zrt::fuzz {
namespace {

// A refusal must say why: an empty message is a finding (zrt_last_error would be blank).
std::string check_refusal(const Status& status, const char* what) {
  if (status.is_ok()) return "";
  if (status.message().empty()) return fmt::format("{}: refused with an empty message", what);
  if (status.code() != ZRT_INVALID_ARGUMENT) {
    return fmt::format("{}: refused with {} instead of ZRT_INVALID_ARGUMENT: {}", what,
                       static_cast<int>(status.code()), status.message());
  }
  return "";
}

// The body of a frame produced by the encoders (they append header + body).
std::vector<uint8_t> body_of(const std::vector<uint8_t>& frame) {
  return std::vector<uint8_t>(frame.begin() + kStoreFrameHeaderBytes, frame.end());
}

std::string fuzz_store_request(const uint8_t* data, size_t size) {
  StoreRequest request;
  const Status status = parse_store_request(data, size, &request);
  if (!status.is_ok()) return check_refusal(status, "parse_store_request");
  // The layout is canonical (fixed fields, exact lengths, no trailing bytes), so an accepted
  // body must be exactly what the encoder makes of the parsed request.
  std::vector<uint8_t> frame;
  encode_store_request(request, &frame);
  if (body_of(frame) != std::vector<uint8_t>(data, data + size)) {
    return fmt::format("parse_store_request accepted a {}-byte body that encodes back to {} bytes",
                       size, frame.size() - kStoreFrameHeaderBytes);
  }
  uint32_t body_bytes = 0;
  const Status header = parse_store_frame_header(frame.data(), frame.size(), &body_bytes);
  if (!header.is_ok() || body_bytes != size) {
    return "parse_store_frame_header refused the header of a frame the encoder made: " +
           header.message();
  }
  return "";
}

std::string fuzz_store_reply(const uint8_t* data, size_t size) {
  StoreReply reply;
  const Status status = parse_store_reply(data, size, &reply);
  if (!status.is_ok()) return check_refusal(status, "parse_store_reply");
  std::vector<uint8_t> frame;
  encode_store_reply(reply, &frame);
  if (body_of(frame) != std::vector<uint8_t>(data, data + size)) {
    return fmt::format("parse_store_reply accepted a {}-byte body that encodes back to {} bytes",
                       size, frame.size() - kStoreFrameHeaderBytes);
  }
  return "";
}

}  // namespace

std::string fuzz_store_protocol(const uint8_t* data, size_t size) {
  // The header parser sees any prefix of up to 4 bytes; both body parsers see the whole input
  // (requests and replies share the leading version byte, so one corpus exercises both).
  uint32_t body_bytes = 0;
  const Status header = parse_store_frame_header(data, size < 4 ? size : 4, &body_bytes);
  if (header.is_ok() && (body_bytes > kStoreMaxFrameBytes || body_bytes < 1)) {
    return fmt::format("parse_store_frame_header accepted a body length of {}", body_bytes);
  }
  std::string finding = check_refusal(header, "parse_store_frame_header");
  if (finding.empty()) finding = fuzz_store_request(data, size);
  if (finding.empty()) finding = fuzz_store_reply(data, size);
  return finding;
}

std::string fuzz_partition_config(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  PartitionOptions options;
  const Status status = partition_options_apply_json(text, "fuzz.json", &options);
  if (!status.is_ok()) return check_refusal(status, "partition_options_apply_json");
  const Status valid = validate_partition_options(options);
  if (!valid.is_ok()) return check_refusal(valid, "validate_partition_options");
  // Valid options survive the trip through the public C struct unchanged (finalize compares
  // hashes across ranks, so a lossy conversion would make ranks disagree).
  zrt_partition_config_t config = ZRT_PARTITION_CONFIG_INIT;
  partition_options_to_config(options, &config);
  PartitionOptions back;
  const Status converted = partition_options_from_config(&config, &back);
  if (!converted.is_ok()) {
    return "partition_options_from_config refused what partition_options_to_config made: " +
           converted.message();
  }
  if (partition_options_hash(back, 1) != partition_options_hash(options, 1)) {
    return "partition options changed on the way through zrt_partition_config_t";
  }
  return "";
}

std::string fuzz_model_profile(const uint8_t* data, size_t size) {
#if ZRT_FUZZ_HAVE_MODEL_PROFILE
  const std::string text(reinterpret_cast<const char*>(data), size);
  tools::JsonFile file;
  const Status parsed = file.parse(text, "fuzz.json");
  if (!parsed.is_ok()) return check_refusal(parsed, "JsonFile::parse");
  mem::ModelSpec model;
  const Status status = mem::model_from_profile(file, &model);
  if (!status.is_ok()) return check_refusal(status, "model_from_profile");
  // Every accepted parameter belongs to an accepted unit and has elements.
  for (const ParamSpec& param : model.params) {
    if (param.unit < 0 || static_cast<size_t>(param.unit) >= model.units.size()) {
      return fmt::format("model_from_profile: parameter {} in unit {} of {}", param.name,
                         param.unit, model.units.size());
    }
    if (param.numel == 0) return "model_from_profile accepted a parameter with 0 elements";
  }
  return "";
#else
  (void)data;
  (void)size;
  return "";
#endif
}

std::string fuzz_manifest(const uint8_t* data, size_t size) {
#if ZRT_FUZZ_HAVE_CHECKPOINT
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  Manifest manifest;
  const Status status = parse_manifest(bytes, "fuzz/manifest.json", &manifest);
  if (!status.is_ok()) return check_refusal(status, "parse_manifest");
  // What the reader accepted, the writer writes and the reader accepts again, unchanged.
  const std::string text = serialize_manifest(manifest);
  Manifest again;
  const Status reparsed = parse_manifest(text, "fuzz/reserialized.json", &again);
  if (!reparsed.is_ok()) {
    return "parse_manifest refused serialize_manifest's text of an accepted manifest: " +
           reparsed.message();
  }
  if (serialize_manifest(again) != text) return "manifest changed on a serialize/parse trip";
  return "";
#else
  (void)data;
  (void)size;
  return "";
#endif
}

FuzzTarget find_fuzz_target(const std::string& name) {
  if (name == "store_protocol") return fuzz_store_protocol;
  if (name == "partition_config") return fuzz_partition_config;
  if (name == "model_profile") return fuzz_model_profile;
  if (name == "manifest") return fuzz_manifest;
  return nullptr;
}

}  // namespace zrt::fuzz
