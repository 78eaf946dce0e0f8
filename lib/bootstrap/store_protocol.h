// The rendezvous store's wire format. Every message is a frame: a 4-byte little-endian body
// length, then the body, whose first byte is the protocol version. Requests and replies each
// have one fixed layout (unused fields are empty), so a parser has no per-operation branches
// to get wrong before the bounds are checked:
//
//   request: u8 version, u8 op, i64 number (timeout_ms or delta), u32 key count,
//            keys (u32 length + bytes each), u32 value length, value bytes
//   reply:   u8 version, u8 code, i64 number, u32 value count, values (u32 length + bytes),
//            u32 missing count, u32 missing key indices, u32 message length, message bytes
//
// A hello (the first request of a connection) carries the job token as its value, the store
// nonce the client met before as its number (0 = first contact), and at most one key, a rank
// claim "claim:<rank>/<world size>"; the reply's number is the store's nonce, random per store
// lifetime (docs/ARCHITECTURE.md#bootstrap).
//
// Sizes are bounded (keys, values, key count, whole frames) and the parse functions are pure:
// they check every length against the bytes actually present and never trust the input.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "lib/core/status.h"

namespace zrt {

inline constexpr uint8_t kStoreProtocolVersion = 1;
inline constexpr size_t kStoreFrameHeaderBytes = 4;
inline constexpr size_t kStoreMaxKeyBytes = 4096;
inline constexpr size_t kStoreMaxValueBytes = size_t{16} << 20;
inline constexpr size_t kStoreMaxKeysPerRequest = 65536;
inline constexpr size_t kStoreMaxMessageBytes = 4096;
// A frame body: one maximal value plus room for keys and the fixed fields.
inline constexpr size_t kStoreMaxFrameBytes = kStoreMaxValueBytes + (size_t{1} << 20);

enum class StoreOp : uint8_t {
  kHello = 1,   // value = job token, number = nonce met before, keys = [] or [claim]; first
  kSet = 2,     // keys[0] = value
  kGet = 3,     // values of keys, waiting up to number ms for all of them to exist
  kWait = 4,    // waits up to number ms for all keys to exist
  kAdd = 5,     // keys[0] += number (an 8-byte counter, created at 0); reply number = new value
  kDelete = 6,  // removes keys[0]; reply number = 1 if it existed
};

enum class StoreReplyCode : uint8_t {
  kOk = 0,
  kTimeout = 1,  // missing = indices of the keys that did not exist in time
  kError = 2,    // message says why; the server may close the connection after it
  kRefused = 3,  // wrong or missing job token; the server closes the connection
};

struct StoreRequest {
  StoreOp op = StoreOp::kHello;
  int64_t number = 0;
  std::vector<std::string> keys;
  std::vector<uint8_t> value;
};

struct StoreReply {
  StoreReplyCode code = StoreReplyCode::kOk;
  int64_t number = 0;
  std::vector<std::vector<uint8_t>> values;
  std::vector<uint32_t> missing;
  std::string message;
};

// What a hello says beyond the token. A claim is made only by the ranks of a job without an
// identity (the store then lets each rank number be claimed once, by one world size).
struct StoreHello {
  std::string token;
  uint64_t nonce = 0;  // the store lifetime this client joined before; 0 = first contact
  int rank = -1;       // the rank number claimed; -1 = no claim
  int size = 0;        // the claimer's world size (with a claim)
};

const char* store_op_name(StoreOp op);

StoreRequest store_hello_request(const StoreHello& hello);
// Reads a parsed hello request's fields; fails on a malformed claim (parse_store_request
// already refuses those, so this fails only on a request that did not come through it).
Status parse_store_hello(const StoreRequest& request, StoreHello* hello);
// "rank 2 of 4" for a claim, "a client" without one: who a hello says it is, for messages.
std::string store_hello_who(const StoreHello& hello);

// Appends a whole frame (header + body) to *frame.
void encode_store_request(const StoreRequest& request, std::vector<uint8_t>* frame);
void encode_store_reply(const StoreReply& reply, std::vector<uint8_t>* frame);

// Reads the body length from a 4-byte frame header; fails when it exceeds kStoreMaxFrameBytes
// or is too short to hold a version byte.
Status parse_store_frame_header(const uint8_t* header, size_t size, uint32_t* body_bytes);

// Parse one frame body (without its header). Check the version, every length and the
// per-operation shape (key count, value size, non-negative timeout). *request / *reply are
// written only on success.
Status parse_store_request(const uint8_t* data, size_t size, StoreRequest* request);
Status parse_store_reply(const uint8_t* data, size_t size, StoreReply* reply);

}  // namespace zrt
