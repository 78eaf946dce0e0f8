#include "lib/bootstrap/store_protocol.h"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <string_view>

namespace zrt {
namespace {

void put_u8(std::vector<uint8_t>* out, uint8_t value) {
  out->push_back(value);
}

void put_u32(std::vector<uint8_t>* out, uint32_t value) {
  for (int shift = 0; shift < 32; shift += 8) out->push_back(static_cast<uint8_t>(value >> shift));
}

void put_i64(std::vector<uint8_t>* out, int64_t value) {
  const auto bits = static_cast<uint64_t>(value);
  for (int shift = 0; shift < 64; shift += 8) out->push_back(static_cast<uint8_t>(bits >> shift));
}

void put_bytes(std::vector<uint8_t>* out, const void* data, size_t size) {
  put_u32(out, static_cast<uint32_t>(size));
  const auto* bytes = static_cast<const uint8_t*>(data);
  out->insert(out->end(), bytes, bytes + size);
}

// Writes the body length into the 4 bytes reserved at header_at.
void finish_frame(std::vector<uint8_t>* frame, size_t header_at) {
  const auto body = static_cast<uint32_t>(frame->size() - header_at - kStoreFrameHeaderBytes);
  for (size_t i = 0; i < kStoreFrameHeaderBytes; ++i) {
    (*frame)[header_at + i] = static_cast<uint8_t>(body >> (8 * i));
  }
}

// Bounds-checked reading of an untrusted body. Every read says what it was reading so that the
// error names the field at fault.
class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  Status u8(const char* what, uint8_t* value) {
    ZRT_RETURN_IF_ERROR(need(1, what));
    *value = data_[offset_++];
    return Status::ok();
  }
  Status u32(const char* what, uint32_t* value) {
    ZRT_RETURN_IF_ERROR(need(4, what));
    uint32_t result = 0;
    for (int i = 0; i < 4; ++i) result |= uint32_t{data_[offset_ + i]} << (8 * i);
    offset_ += 4;
    *value = result;
    return Status::ok();
  }
  Status i64(const char* what, int64_t* value) {
    ZRT_RETURN_IF_ERROR(need(8, what));
    uint64_t result = 0;
    for (int i = 0; i < 8; ++i) result |= uint64_t{data_[offset_ + i]} << (8 * i);
    offset_ += 8;
    *value = static_cast<int64_t>(result);
    return Status::ok();
  }
  // A length-prefixed byte string of at most `limit` bytes.
  Status bytes(const char* what, size_t limit, const uint8_t** begin, size_t* length) {
    uint32_t declared = 0;
    ZRT_RETURN_IF_ERROR(u32(what, &declared));
    if (declared > limit) {
      return Status::invalid_argument("store message: {} of {} bytes exceeds the limit of {} bytes",
                                      what, declared, limit);
    }
    ZRT_RETURN_IF_ERROR(need(declared, what));
    *begin = data_ + offset_;
    *length = declared;
    offset_ += declared;
    return Status::ok();
  }
  // A count of following items, each at least min_item_bytes long: a count the remaining bytes
  // cannot hold is refused before anything is allocated for it.
  Status count(const char* what, size_t limit, size_t min_item_bytes, uint32_t* value) {
    ZRT_RETURN_IF_ERROR(u32(what, value));
    if (*value > limit) {
      return Status::invalid_argument("store message: {} {} exceeds the limit of {}", what, *value,
                                      limit);
    }
    if (static_cast<size_t>(*value) * min_item_bytes > size_ - offset_) {
      return Status::invalid_argument(
          "store message: {} {} does not fit in the {} bytes that remain", what, *value,
          size_ - offset_);
    }
    return Status::ok();
  }
  Status finish() const {
    if (offset_ != size_) {
      return Status::invalid_argument("store message: {} unexpected trailing bytes",
                                      size_ - offset_);
    }
    return Status::ok();
  }

 private:
  Status need(size_t bytes, const char* what) const {
    if (size_ - offset_ < bytes) {
      return Status::invalid_argument(
          "store message truncated: {} needs {} bytes at offset {}, {} remain", what, bytes,
          offset_, size_ - offset_);
    }
    return Status::ok();
  }

  const uint8_t* data_;
  size_t size_;
  size_t offset_ = 0;
};

constexpr std::string_view kClaimPrefix = "claim:";

// A non-negative decimal int filling the whole of `text`.
bool parse_count(std::string_view text, int* value) {
  if (text.empty() || text.size() > 10) return false;
  int parsed = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), parsed);
  if (error != std::errc() || end != text.data() + text.size() || parsed < 0) return false;
  *value = parsed;
  return true;
}

// "claim:<rank>/<size>" with 0 <= rank < size.
Status parse_claim(const std::string& key, int* rank, int* size) {
  const std::string_view text(key);
  const size_t slash = text.find('/');
  int parsed_rank = 0;
  int parsed_size = 0;
  if (!text.starts_with(kClaimPrefix) || slash == std::string_view::npos ||
      !parse_count(text.substr(kClaimPrefix.size(), slash - kClaimPrefix.size()), &parsed_rank) ||
      !parse_count(text.substr(slash + 1), &parsed_size) || parsed_rank >= parsed_size) {
    return Status::invalid_argument(
        "store hello: key '{}' is not a rank claim 'claim:<rank>/<world size>' with rank < "
        "world size",
        key.substr(0, 64));
  }
  *rank = parsed_rank;
  *size = parsed_size;
  return Status::ok();
}

Status check_version(Reader& reader) {
  uint8_t version = 0;
  ZRT_RETURN_IF_ERROR(reader.u8("version", &version));
  if (version != kStoreProtocolVersion) {
    return Status::invalid_argument("store message: protocol version {} (this build speaks {})",
                                    version, kStoreProtocolVersion);
  }
  return Status::ok();
}

// The per-operation shape of a request, checked once the bytes themselves parsed.
Status check_request_shape(const StoreRequest& request) {
  const size_t keys = request.keys.size();
  const char* name = store_op_name(request.op);
  switch (request.op) {
    case StoreOp::kHello: {
      if (keys > 1)
        return Status::invalid_argument("store {}: carries {} keys, expected 0 or 1", name, keys);
      if (request.value.size() > kStoreMaxKeyBytes) {
        return Status::invalid_argument("store {}: token of {} bytes exceeds {} bytes", name,
                                        request.value.size(), kStoreMaxKeyBytes);
      }
      int rank = 0;
      int size = 0;
      return keys == 0 ? Status::ok() : parse_claim(request.keys[0], &rank, &size);
    }
    case StoreOp::kSet:
      if (keys != 1)
        return Status::invalid_argument("store {}: carries {} keys, expected 1", name, keys);
      return Status::ok();
    case StoreOp::kGet:
    case StoreOp::kWait:
      if (keys == 0) return Status::invalid_argument("store {}: carries no keys", name);
      if (request.number < 0) {
        return Status::invalid_argument("store {}: timeout {} ms is negative", name,
                                        request.number);
      }
      if (!request.value.empty())
        return Status::invalid_argument("store {}: carries a value", name);
      return Status::ok();
    case StoreOp::kAdd:
    case StoreOp::kDelete:
      if (keys != 1)
        return Status::invalid_argument("store {}: carries {} keys, expected 1", name, keys);
      if (!request.value.empty())
        return Status::invalid_argument("store {}: carries a value", name);
      return Status::ok();
  }
  return Status::invalid_argument("store message: unknown operation {}",
                                  static_cast<int>(request.op));
}

}  // namespace

const char* store_op_name(StoreOp op) {
  switch (op) {
    case StoreOp::kHello:
      return "hello";
    case StoreOp::kSet:
      return "set";
    case StoreOp::kGet:
      return "get";
    case StoreOp::kWait:
      return "wait";
    case StoreOp::kAdd:
      return "add";
    case StoreOp::kDelete:
      return "delete";
  }
  return "unknown";
}

StoreRequest store_hello_request(const StoreHello& hello) {
  StoreRequest request;
  request.op = StoreOp::kHello;
  request.number = static_cast<int64_t>(hello.nonce);
  request.value.assign(hello.token.begin(), hello.token.end());
  if (hello.rank >= 0) {
    request.keys.push_back(fmt::format("{}{}/{}", kClaimPrefix, hello.rank, hello.size));
  }
  return request;
}

Status parse_store_hello(const StoreRequest& request, StoreHello* hello) {
  if (request.op != StoreOp::kHello) {
    return Status::invalid_argument("store {}: not a hello", store_op_name(request.op));
  }
  StoreHello parsed;
  parsed.token.assign(request.value.begin(), request.value.end());
  parsed.nonce = static_cast<uint64_t>(request.number);
  if (request.keys.size() > 1) {
    return Status::invalid_argument("store hello: carries {} keys, expected 0 or 1",
                                    request.keys.size());
  }
  if (!request.keys.empty()) {
    ZRT_RETURN_IF_ERROR(parse_claim(request.keys[0], &parsed.rank, &parsed.size));
  }
  *hello = std::move(parsed);
  return Status::ok();
}

std::string store_hello_who(const StoreHello& hello) {
  if (hello.rank < 0) return "a client";
  return fmt::format("rank {} of {}", hello.rank, hello.size);
}

void encode_store_request(const StoreRequest& request, std::vector<uint8_t>* frame) {
  const size_t header_at = frame->size();
  frame->resize(header_at + kStoreFrameHeaderBytes);
  put_u8(frame, kStoreProtocolVersion);
  put_u8(frame, static_cast<uint8_t>(request.op));
  put_i64(frame, request.number);
  put_u32(frame, static_cast<uint32_t>(request.keys.size()));
  for (const std::string& key : request.keys) put_bytes(frame, key.data(), key.size());
  put_bytes(frame, request.value.data(), request.value.size());
  finish_frame(frame, header_at);
}

void encode_store_reply(const StoreReply& reply, std::vector<uint8_t>* frame) {
  const size_t header_at = frame->size();
  frame->resize(header_at + kStoreFrameHeaderBytes);
  put_u8(frame, kStoreProtocolVersion);
  put_u8(frame, static_cast<uint8_t>(reply.code));
  put_i64(frame, reply.number);
  put_u32(frame, static_cast<uint32_t>(reply.values.size()));
  for (const auto& value : reply.values) put_bytes(frame, value.data(), value.size());
  put_u32(frame, static_cast<uint32_t>(reply.missing.size()));
  for (uint32_t index : reply.missing) put_u32(frame, index);
  const size_t message_bytes = std::min(reply.message.size(), kStoreMaxMessageBytes);
  put_bytes(frame, reply.message.data(), message_bytes);
  finish_frame(frame, header_at);
}

Status parse_store_frame_header(const uint8_t* header, size_t size, uint32_t* body_bytes) {
  if (header == nullptr || size < kStoreFrameHeaderBytes) {
    return Status::invalid_argument("store frame header needs {} bytes, got {}",
                                    kStoreFrameHeaderBytes, header == nullptr ? 0 : size);
  }
  uint32_t length = 0;
  for (size_t i = 0; i < kStoreFrameHeaderBytes; ++i) length |= uint32_t{header[i]} << (8 * i);
  if (length > kStoreMaxFrameBytes) {
    return Status::invalid_argument("store message of {} bytes exceeds the limit of {} bytes",
                                    length, kStoreMaxFrameBytes);
  }
  if (length == 0) return Status::invalid_argument("store message is empty (no version byte)");
  *body_bytes = length;
  return Status::ok();
}

Status parse_store_request(const uint8_t* data, size_t size, StoreRequest* request) {
  if (data == nullptr && size != 0) return Status::invalid_argument("store message: null data");
  if (size > kStoreMaxFrameBytes) {
    return Status::invalid_argument("store message of {} bytes exceeds the limit of {} bytes", size,
                                    kStoreMaxFrameBytes);
  }
  Reader reader(data, size);
  ZRT_RETURN_IF_ERROR(check_version(reader));
  uint8_t op = 0;
  ZRT_RETURN_IF_ERROR(reader.u8("operation", &op));
  if (op < static_cast<uint8_t>(StoreOp::kHello) || op > static_cast<uint8_t>(StoreOp::kDelete)) {
    return Status::invalid_argument("store message: unknown operation {}", op);
  }
  StoreRequest parsed;
  parsed.op = static_cast<StoreOp>(op);
  ZRT_RETURN_IF_ERROR(reader.i64("number", &parsed.number));
  uint32_t key_count = 0;
  ZRT_RETURN_IF_ERROR(reader.count("key count", kStoreMaxKeysPerRequest, 4, &key_count));
  parsed.keys.reserve(key_count);
  for (uint32_t i = 0; i < key_count; ++i) {
    const uint8_t* begin = nullptr;
    size_t length = 0;
    ZRT_RETURN_IF_ERROR(reader.bytes("key", kStoreMaxKeyBytes, &begin, &length));
    parsed.keys.emplace_back(reinterpret_cast<const char*>(begin), length);
  }
  const uint8_t* begin = nullptr;
  size_t length = 0;
  ZRT_RETURN_IF_ERROR(reader.bytes("value", kStoreMaxValueBytes, &begin, &length));
  parsed.value.assign(begin, begin + length);
  ZRT_RETURN_IF_ERROR(reader.finish());
  ZRT_RETURN_IF_ERROR(check_request_shape(parsed));
  *request = std::move(parsed);
  return Status::ok();
}

Status parse_store_reply(const uint8_t* data, size_t size, StoreReply* reply) {
  if (data == nullptr && size != 0) return Status::invalid_argument("store reply: null data");
  if (size > kStoreMaxFrameBytes) {
    return Status::invalid_argument("store reply of {} bytes exceeds the limit of {} bytes", size,
                                    kStoreMaxFrameBytes);
  }
  Reader reader(data, size);
  ZRT_RETURN_IF_ERROR(check_version(reader));
  uint8_t code = 0;
  ZRT_RETURN_IF_ERROR(reader.u8("reply code", &code));
  if (code > static_cast<uint8_t>(StoreReplyCode::kRefused)) {
    return Status::invalid_argument("store reply: unknown reply code {}", code);
  }
  StoreReply parsed;
  parsed.code = static_cast<StoreReplyCode>(code);
  ZRT_RETURN_IF_ERROR(reader.i64("number", &parsed.number));
  uint32_t value_count = 0;
  ZRT_RETURN_IF_ERROR(reader.count("value count", kStoreMaxKeysPerRequest, 4, &value_count));
  parsed.values.reserve(value_count);
  for (uint32_t i = 0; i < value_count; ++i) {
    const uint8_t* begin = nullptr;
    size_t length = 0;
    ZRT_RETURN_IF_ERROR(reader.bytes("value", kStoreMaxValueBytes, &begin, &length));
    parsed.values.emplace_back(begin, begin + length);
  }
  uint32_t missing_count = 0;
  ZRT_RETURN_IF_ERROR(reader.count("missing count", kStoreMaxKeysPerRequest, 4, &missing_count));
  parsed.missing.resize(missing_count);
  for (uint32_t i = 0; i < missing_count; ++i) {
    ZRT_RETURN_IF_ERROR(reader.u32("missing index", &parsed.missing[i]));
  }
  const uint8_t* begin = nullptr;
  size_t length = 0;
  ZRT_RETURN_IF_ERROR(reader.bytes("message", kStoreMaxMessageBytes, &begin, &length));
  parsed.message.assign(reinterpret_cast<const char*>(begin), length);
  ZRT_RETURN_IF_ERROR(reader.finish());
  *reply = std::move(parsed);
  return Status::ok();
}

}  // namespace zrt
