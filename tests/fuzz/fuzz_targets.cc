#include "tests/fuzz/fuzz_targets.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstring>
#include <string_view>
#include <vector>

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <memory>

#include "lib/bootstrap/socket_util.h"
#include "lib/bootstrap/store_client.h"
#include "lib/bootstrap/store_protocol.h"
#include "lib/bootstrap/store_server.h"
#include "zero/partition/config.h"
#if ZRT_FUZZ_HAVE_CHECKPOINT
#include "zero/checkpoint/manifest.h"
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

namespace {

constexpr const char* kSessionToken = "fuzz-token";
constexpr int64_t kSessionHelloMs = 100;

// One server for every input, with small limits so that the cap is reached.
StoreServer* session_server() {
  static std::unique_ptr<StoreServer> server = [] {
    std::unique_ptr<StoreServer> created;
    StoreLimits limits;
    limits.max_unauthenticated = 2;
    limits.hello_timeout_ms = kSessionHelloMs;
    (void)StoreServer::start("127.0.0.1", 0, kSessionToken, &created, limits);
    return created;
  }();
  return server.get();
}

int connect_loopback(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<uint16_t>(port));
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Whether the bytes hold a whole first frame (only then can the client have authenticated).
bool has_whole_frame(const uint8_t* data, size_t size) {
  if (size < kStoreFrameHeaderBytes) return false;
  uint32_t body = 0;
  if (!parse_store_frame_header(data, size, &body).is_ok()) return true;  // refused: answered
  return size >= kStoreFrameHeaderBytes + body;
}

// Reads until the server closes the connection or the deadline passes; true if it closed.
bool closed_by(int fd, Deadline deadline) {
  uint8_t buffer[4096];
  while (true) {
    pollfd entry{fd, POLLIN, 0};
    const int ready = poll(&entry, 1, remaining_ms(deadline));
    if (ready <= 0) return false;
    const ssize_t n = recv(fd, buffer, sizeof(buffer), MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) return true;
  }
}

}  // namespace

std::string fuzz_store_session(const uint8_t* data, size_t size) {
  StoreServer* server = session_server();
  if (server == nullptr) return "the session store did not start";
  const size_t clients = size == 0 ? 1 : 1 + data[0] % 4;
  const uint8_t* rest = size == 0 ? data : data + 1;
  const size_t rest_size = size == 0 ? 0 : size - 1;
  const size_t share = rest_size / clients;
  std::vector<int> fds;
  std::vector<bool> silent;  // no whole frame sent: must be closed by the hello deadline
  for (size_t c = 0; c < clients; ++c) {
    const int fd = connect_loopback(server->port());
    if (fd < 0) return "cannot connect to the session store";
    const uint8_t* part = rest + c * share;
    const size_t bytes = c + 1 == clients ? rest_size - c * share : share;
    if (bytes > 0) (void)send(fd, part, bytes, MSG_NOSIGNAL);
    fds.push_back(fd);
    silent.push_back(!has_whole_frame(part, bytes));
  }
  std::string finding;
  // The deadline, plus slack for a loaded machine.
  const Deadline deadline = deadline_after_ms(kSessionHelloMs + 2000);
  for (size_t c = 0; c < clients; ++c) {
    if (silent[c] && !closed_by(fds[c], deadline) && finding.empty()) {
      finding = fmt::format(
          "client {} of {} sent no whole frame and was not closed within the "
          "{} ms hello deadline",
          c, clients, kSessionHelloMs);
    }
    close(fds[c]);
  }
  if (!finding.empty()) return finding;
  std::unique_ptr<StoreClient> client;
  Status status = StoreClient::connect("127.0.0.1", server->port(), kSessionToken, 2000, &client);
  if (status.is_ok()) status = client->set("after-fuzz", "x", 1);
  if (!status.is_ok()) return "a real client was not served after the session: " + status.message();
  return "";
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
  {
    // The manifest's own checksum covers its content: another step with the old checksum is
    // refused (bit flips in the step were what loaded a wrong step before).
    nlohmann::json edited = nlohmann::json::parse(text, nullptr, false);
    edited["step"] = static_cast<uint64_t>(manifest.step) ^ 1u;
    Manifest changed;
    if (parse_manifest(edited.dump(), "fuzz/edited.json", &changed).is_ok()) {
      return "parse_manifest accepted a manifest whose step changed under its checksum";
    }
  }
  return "";
#else
  (void)data;
  (void)size;
  return "";
#endif
}

FuzzTarget find_fuzz_target(const std::string& name) {
  if (name == "store_protocol") return fuzz_store_protocol;
  if (name == "store_session") return fuzz_store_session;
  if (name == "partition_config") return fuzz_partition_config;
  if (name == "model_profile") return fuzz_model_profile;
  if (name == "manifest") return fuzz_manifest;
  return nullptr;
}

}  // namespace zrt::fuzz
