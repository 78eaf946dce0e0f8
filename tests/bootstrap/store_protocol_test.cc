// The store's wire format: round trips, and malformed bytes of every kind refused cleanly.
#include <cstring>
#include <random>

#include <gtest/gtest.h>

#include "lib/bootstrap/store_protocol.h"

namespace zrt {
namespace {

// The body of an encoded frame (the header checked along the way).
std::vector<uint8_t> body_of(const std::vector<uint8_t>& frame) {
  uint32_t body_bytes = 0;
  EXPECT_TRUE(parse_store_frame_header(frame.data(), frame.size(), &body_bytes).is_ok());
  EXPECT_EQ(body_bytes + kStoreFrameHeaderBytes, frame.size());
  return std::vector<uint8_t>(frame.begin() + kStoreFrameHeaderBytes, frame.end());
}

StoreRequest sample_get() {
  StoreRequest request;
  request.op = StoreOp::kGet;
  request.number = 1500;
  request.keys = {"a", "bb", std::string(kStoreMaxKeyBytes, 'k')};
  return request;
}

TEST(StoreProtocol, RequestRoundTrip) {
  std::vector<uint8_t> frame;
  encode_store_request(sample_get(), &frame);
  const std::vector<uint8_t> body = body_of(frame);
  StoreRequest parsed;
  Status status = parse_store_request(body.data(), body.size(), &parsed);
  ASSERT_TRUE(status.is_ok()) << status.message();
  EXPECT_EQ(parsed.op, StoreOp::kGet);
  EXPECT_EQ(parsed.number, 1500);
  EXPECT_EQ(parsed.keys, sample_get().keys);

  StoreRequest set;
  set.op = StoreOp::kSet;
  set.keys = {"key"};
  set.value = {1, 2, 3, 0, 255};
  frame.clear();
  encode_store_request(set, &frame);
  const std::vector<uint8_t> set_body = body_of(frame);
  ASSERT_TRUE(parse_store_request(set_body.data(), set_body.size(), &parsed).is_ok());
  EXPECT_EQ(parsed.value, set.value);
}

TEST(StoreProtocol, ReplyRoundTrip) {
  StoreReply reply;
  reply.code = StoreReplyCode::kTimeout;
  reply.number = -5;
  reply.values = {{1}, {}, {9, 9}};
  reply.missing = {0, 7};
  reply.message = "two keys missing";
  std::vector<uint8_t> frame;
  encode_store_reply(reply, &frame);
  const std::vector<uint8_t> body = body_of(frame);
  StoreReply parsed;
  ASSERT_TRUE(parse_store_reply(body.data(), body.size(), &parsed).is_ok());
  EXPECT_EQ(parsed.code, StoreReplyCode::kTimeout);
  EXPECT_EQ(parsed.number, -5);
  EXPECT_EQ(parsed.values, reply.values);
  EXPECT_EQ(parsed.missing, reply.missing);
  EXPECT_EQ(parsed.message, reply.message);
}

TEST(StoreProtocol, EveryTruncationIsRefused) {
  std::vector<uint8_t> frame;
  encode_store_request(sample_get(), &frame);
  const std::vector<uint8_t> body = body_of(frame);
  for (size_t size = 0; size < body.size(); ++size) {
    StoreRequest parsed;
    parsed.number = 77;
    Status status = parse_store_request(body.data(), size, &parsed);
    ASSERT_EQ(status.code(), ZRT_INVALID_ARGUMENT) << "prefix of " << size << " bytes";
    EXPECT_EQ(parsed.number, 77) << "output written on failure";
  }
}

TEST(StoreProtocol, MalformedFieldsNameTheFault) {
  std::vector<uint8_t> frame;
  encode_store_request(sample_get(), &frame);
  std::vector<uint8_t> body = body_of(frame);
  StoreRequest parsed;

  std::vector<uint8_t> bad = body;
  bad[0] = 9;  // version
  EXPECT_NE(parse_store_request(bad.data(), bad.size(), &parsed).message().find("version 9"),
            std::string::npos);
  bad = body;
  bad[1] = 200;  // operation
  EXPECT_NE(parse_store_request(bad.data(), bad.size(), &parsed).message().find("operation 200"),
            std::string::npos);
  bad = body;
  bad.push_back(0);  // trailing byte
  EXPECT_NE(parse_store_request(bad.data(), bad.size(), &parsed).message().find("trailing"),
            std::string::npos);
  bad = body;
  std::memset(&bad[10], 0xff, 4);  // key count 4 billion
  EXPECT_NE(parse_store_request(bad.data(), bad.size(), &parsed).message().find("key count"),
            std::string::npos);
  bad = body;
  std::memset(&bad[14], 0xff, 4);  // first key's length
  EXPECT_NE(parse_store_request(bad.data(), bad.size(), &parsed).message().find("exceeds"),
            std::string::npos);
  bad = body;
  for (int i = 0; i < 8; ++i) bad[2 + i] = 0xff;  // timeout -1 ms
  EXPECT_NE(parse_store_request(bad.data(), bad.size(), &parsed).message().find("negative"),
            std::string::npos);

  StoreRequest set_without_key;
  set_without_key.op = StoreOp::kSet;
  frame.clear();
  encode_store_request(set_without_key, &frame);
  body = body_of(frame);
  EXPECT_NE(parse_store_request(body.data(), body.size(), &parsed).message().find("expected 1"),
            std::string::npos);
  EXPECT_EQ(parse_store_request(nullptr, 5, &parsed).code(), ZRT_INVALID_ARGUMENT);
  EXPECT_EQ(parse_store_request(nullptr, 0, &parsed).code(), ZRT_INVALID_ARGUMENT);
}

// A hello's token, nonce and claim survive the wire; the nonce keeps all 64 bits.
TEST(StoreProtocol, HelloRoundTrip) {
  StoreHello hello;
  hello.token = "tok";
  hello.nonce = 0xfedcba9876543210ull;
  hello.rank = 3;
  hello.size = 8;
  std::vector<uint8_t> frame;
  encode_store_request(store_hello_request(hello), &frame);
  const std::vector<uint8_t> body = body_of(frame);
  StoreRequest request;
  ASSERT_TRUE(parse_store_request(body.data(), body.size(), &request).is_ok());
  StoreHello parsed;
  ASSERT_TRUE(parse_store_hello(request, &parsed).is_ok());
  EXPECT_EQ(parsed.token, "tok");
  EXPECT_EQ(parsed.nonce, 0xfedcba9876543210ull);
  EXPECT_EQ(parsed.rank, 3);
  EXPECT_EQ(parsed.size, 8);
  EXPECT_EQ(store_hello_who(parsed), "rank 3 of 8");

  // Without a claim: no key, and who is "a client".
  StoreHello plain;
  plain.token = "tok";
  EXPECT_TRUE(store_hello_request(plain).keys.empty());
  ASSERT_TRUE(parse_store_hello(store_hello_request(plain), &parsed).is_ok());
  EXPECT_EQ(parsed.rank, -1);
  EXPECT_EQ(parsed.nonce, 0u);
  EXPECT_EQ(store_hello_who(parsed), "a client");
}

TEST(StoreProtocol, MalformedClaimsAreRefused) {
  for (const char* key : {"claim:2/2", "claim:-1/2", "claim:a/2", "claim:1/2x", "claim:1",
                          "claim:/2", "claim:1/", "rank:1/2", "claim:99999999999/2", ""}) {
    StoreRequest hello = store_hello_request(StoreHello{});
    hello.keys = {key};
    std::vector<uint8_t> frame;
    encode_store_request(hello, &frame);
    const std::vector<uint8_t> body = body_of(frame);
    StoreRequest parsed;
    Status status = parse_store_request(body.data(), body.size(), &parsed);
    EXPECT_EQ(status.code(), ZRT_INVALID_ARGUMENT) << key;
    EXPECT_NE(status.message().find("not a rank claim"), std::string::npos) << status.message();
    StoreHello fields;
    EXPECT_FALSE(parse_store_hello(hello, &fields).is_ok()) << key;
  }
  StoreRequest two = store_hello_request(StoreHello{});
  two.keys = {"claim:0/2", "claim:1/2"};
  std::vector<uint8_t> frame;
  encode_store_request(two, &frame);
  const std::vector<uint8_t> body = body_of(frame);
  StoreRequest parsed;
  EXPECT_NE(
      parse_store_request(body.data(), body.size(), &parsed).message().find("expected 0 or 1"),
      std::string::npos);
}

TEST(StoreProtocol, OversizedFramesAreRefusedFromTheHeader) {
  uint8_t header[4];
  const uint32_t too_big = static_cast<uint32_t>(kStoreMaxFrameBytes + 1);
  for (int i = 0; i < 4; ++i) header[i] = static_cast<uint8_t>(too_big >> (8 * i));
  uint32_t body_bytes = 0;
  Status status = parse_store_frame_header(header, sizeof(header), &body_bytes);
  EXPECT_EQ(status.code(), ZRT_INVALID_ARGUMENT);
  EXPECT_NE(status.message().find("exceeds the limit"), std::string::npos);
  const uint8_t empty[4] = {0, 0, 0, 0};
  EXPECT_FALSE(parse_store_frame_header(empty, 4, &body_bytes).is_ok());
  EXPECT_FALSE(parse_store_frame_header(header, 3, &body_bytes).is_ok());
}

// Random and mutated bytes: the parsers must return (either way), never crash or over-read.
// Run under ASan/UBSan this is a small fuzzer; without them it still exercises every branch.
TEST(StoreProtocol, RandomBytesNeverCrash) {
  std::mt19937 random(12345);
  std::vector<uint8_t> frame;
  encode_store_request(sample_get(), &frame);
  const std::vector<uint8_t> valid = body_of(frame);
  int accepted = 0;
  for (int iteration = 0; iteration < 20000; ++iteration) {
    std::vector<uint8_t> bytes;
    if (iteration % 2 == 0) {
      bytes.resize(random() % 64);
      for (auto& byte : bytes) byte = static_cast<uint8_t>(random());
      if (!bytes.empty()) bytes[0] = kStoreProtocolVersion;
    } else {
      bytes = valid;
      const int flips = 1 + static_cast<int>(random() % 4);
      for (int i = 0; i < flips; ++i)
        bytes[random() % bytes.size()] = static_cast<uint8_t>(random());
    }
    StoreRequest request;
    StoreReply reply;
    accepted += parse_store_request(bytes.data(), bytes.size(), &request).is_ok() ? 1 : 0;
    accepted += parse_store_reply(bytes.data(), bytes.size(), &reply).is_ok() ? 1 : 0;
  }
  EXPECT_LT(accepted, 20000 * 2);
}

}  // namespace
}  // namespace zrt
