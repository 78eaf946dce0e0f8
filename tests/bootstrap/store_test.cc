// The TCP store, server and client in one process over real loopback sockets.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

#include <gtest/gtest.h>

#include "lib/bootstrap/socket_util.h"
#include "lib/bootstrap/store_client.h"
#include "lib/bootstrap/store_server.h"

namespace zrt {
namespace {

constexpr const char* kToken = "unit-token";

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Status status = StoreServer::start("127.0.0.1", 0, kToken, &server_);
    ASSERT_TRUE(status.is_ok()) << status.message();
    ASSERT_GT(server_->port(), 0);
  }
  std::unique_ptr<StoreClient> connect(const std::string& token = kToken) {
    std::unique_ptr<StoreClient> client;
    Status status = StoreClient::connect("127.0.0.1", server_->port(), token, 5000, &client);
    EXPECT_TRUE(status.is_ok()) << status.message();
    return client;
  }
  std::unique_ptr<StoreServer> server_;
};

std::vector<uint8_t> bytes_of(const std::string& text) {
  return std::vector<uint8_t>(text.begin(), text.end());
}

TEST_F(StoreTest, SetGetDelete) {
  auto client = connect();
  ASSERT_TRUE(client);
  ASSERT_TRUE(client->set("a", "hello", 5).is_ok());
  ASSERT_TRUE(client->set("b", nullptr, 0).is_ok());
  std::vector<std::vector<uint8_t>> values;
  ASSERT_TRUE(client->get({"a", "b"}, 0, &values).is_ok());
  ASSERT_EQ(values.size(), 2u);
  EXPECT_EQ(values[0], bytes_of("hello"));
  EXPECT_TRUE(values[1].empty());
  bool existed = false;
  ASSERT_TRUE(client->remove("a", &existed).is_ok());
  EXPECT_TRUE(existed);
  ASSERT_TRUE(client->remove("a", &existed).is_ok());
  EXPECT_FALSE(existed);
  std::vector<uint32_t> missing;
  Status status = client->get({"b", "a"}, 0, &values, &missing);
  EXPECT_EQ(status.code(), ZRT_TIMEOUT);
  EXPECT_EQ(missing, std::vector<uint32_t>{1});
}

TEST_F(StoreTest, GetWaitsForAnotherClient) {
  auto reader = connect();
  ASSERT_TRUE(reader);
  // The stimulus: the key appears only once the reader is parked in its get, so a get that
  // did not wait would miss it; late by a small fraction of the get's timeout.
  static constexpr int64_t kGetTimeoutMs = 5000;
  static constexpr int64_t kLateMs = 100;
  static_assert(kLateMs * 10 < kGetTimeoutMs);
  std::thread writer([this] {
    std::this_thread::sleep_for(std::chrono::milliseconds(kLateMs));
    auto client = connect();
    ASSERT_TRUE(client);
    EXPECT_TRUE(client->set("late", "x", 1).is_ok());
  });
  std::vector<std::vector<uint8_t>> values;
  Status status = reader->get({"late"}, kGetTimeoutMs, &values);
  writer.join();
  ASSERT_TRUE(status.is_ok()) << status.message();
  EXPECT_EQ(values[0], bytes_of("x"));
}

TEST_F(StoreTest, WaitTimesOutNamingMissingKeys) {
  auto client = connect();
  ASSERT_TRUE(client);
  ASSERT_TRUE(client->set("here", "1", 1).is_ok());
  std::vector<uint32_t> missing;
  const auto start = std::chrono::steady_clock::now();
  Status status = client->wait({"gone0", "here", "gone2"}, 200, &missing);
  const auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(status.code(), ZRT_TIMEOUT);
  EXPECT_EQ(missing, (std::vector<uint32_t>{0, 2}));
  EXPECT_GE(elapsed, std::chrono::milliseconds(190));
  EXPECT_LT(elapsed, std::chrono::milliseconds(3000));
  // The connection stays usable after a server-side timeout.
  EXPECT_TRUE(client->wait({"here"}, 0).is_ok());
}

TEST_F(StoreTest, AddIsAtomicAcrossClients) {
  constexpr int kThreads = 4;
  constexpr int kAdds = 50;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([this] {
      auto client = connect();
      ASSERT_TRUE(client);
      for (int i = 0; i < kAdds; ++i) {
        int64_t value = 0;
        ASSERT_TRUE(client->add("counter", 1, &value).is_ok());
      }
    });
  }
  for (auto& thread : threads) thread.join();
  auto client = connect();
  ASSERT_TRUE(client);
  int64_t value = 0;
  ASSERT_TRUE(client->add("counter", 0, &value).is_ok());
  EXPECT_EQ(value, kThreads * kAdds);
  ASSERT_TRUE(client->add("counter", -10, &value).is_ok());
  EXPECT_EQ(value, kThreads * kAdds - 10);
}

TEST_F(StoreTest, AddOnANonCounterIsAnError) {
  auto client = connect();
  ASSERT_TRUE(client);
  ASSERT_TRUE(client->set("text", "abc", 3).is_ok());
  int64_t value = 0;
  Status status = client->add("text", 1, &value);
  EXPECT_EQ(status.code(), ZRT_REMOTE_ERROR);
  EXPECT_NE(status.message().find("not an 8-byte counter"), std::string::npos) << status.message();
}

TEST_F(StoreTest, WrongTokenIsRefusedAndTold) {
  std::unique_ptr<StoreClient> client;
  Status status = StoreClient::connect("127.0.0.1", server_->port(), "wrong", 2000, &client);
  EXPECT_EQ(status.code(), ZRT_REMOTE_ERROR);
  EXPECT_NE(status.message().find("belongs to another job"), std::string::npos) << status.message();
  EXPECT_FALSE(client);
}

// Speaks raw bytes to the server, as a confused or hostile peer would.
class RawPeer {
 public:
  explicit RawPeer(int port) {
    EXPECT_TRUE(connect_tcp("127.0.0.1", port, deadline_after_ms(2000), &fd_).is_ok());
  }
  ~RawPeer() { close(fd_); }
  void send_bytes(const std::vector<uint8_t>& bytes) {
    EXPECT_TRUE(send_all(fd_, bytes.data(), bytes.size(), deadline_after_ms(2000), "raw").is_ok());
  }
  StoreReply read_reply() {
    uint8_t header[4];
    EXPECT_TRUE(recv_all(fd_, header, 4, deadline_after_ms(2000), "raw header").is_ok());
    uint32_t body_bytes = 0;
    EXPECT_TRUE(parse_store_frame_header(header, 4, &body_bytes).is_ok());
    std::vector<uint8_t> body(body_bytes);
    EXPECT_TRUE(recv_all(fd_, body.data(), body.size(), deadline_after_ms(2000), "raw").is_ok());
    StoreReply reply;
    EXPECT_TRUE(parse_store_reply(body.data(), body.size(), &reply).is_ok());
    return reply;
  }
  bool closed_by_server() {
    uint8_t byte = 0;
    return recv_all(fd_, &byte, 1, deadline_after_ms(2000), "raw").code() == ZRT_REMOTE_ERROR;
  }

 private:
  int fd_ = -1;
};

TEST_F(StoreTest, FirstRequestMustBeHello) {
  RawPeer peer(server_->port());
  StoreRequest set;
  set.op = StoreOp::kSet;
  set.keys = {"k"};
  std::vector<uint8_t> frame;
  encode_store_request(set, &frame);
  peer.send_bytes(frame);
  StoreReply reply = peer.read_reply();
  EXPECT_EQ(reply.code, StoreReplyCode::kRefused);
  EXPECT_NE(reply.message.find("not a hello"), std::string::npos) << reply.message;
  EXPECT_TRUE(peer.closed_by_server());

  // A large first message is refused from its header, before its body is buffered.
  RawPeer big(server_->port());
  const uint32_t length = 1 << 20;
  big.send_bytes({0, 0, static_cast<uint8_t>(length >> 16), 0});
  reply = big.read_reply();
  EXPECT_EQ(reply.code, StoreReplyCode::kRefused);
  EXPECT_NE(reply.message.find("is not a hello"), std::string::npos) << reply.message;
  EXPECT_TRUE(big.closed_by_server());
}

TEST_F(StoreTest, OversizedMessageIsRefused) {
  RawPeer peer(server_->port());
  const uint32_t huge = 0x7fffffff;
  peer.send_bytes({static_cast<uint8_t>(huge), static_cast<uint8_t>(huge >> 8),
                   static_cast<uint8_t>(huge >> 16), static_cast<uint8_t>(huge >> 24)});
  StoreReply reply = peer.read_reply();
  EXPECT_EQ(reply.code, StoreReplyCode::kError);
  EXPECT_NE(reply.message.find("exceeds the limit"), std::string::npos) << reply.message;
  EXPECT_TRUE(peer.closed_by_server());
  // A client refuses to send an oversized value in the first place.
  auto client = connect();
  ASSERT_TRUE(client);
  std::vector<uint8_t> big(kStoreMaxValueBytes + 1);
  Status status = client->set("big", big.data(), big.size());
  EXPECT_EQ(status.code(), ZRT_INVALID_ARGUMENT);
  // ...and the largest allowed value goes through.
  big.pop_back();
  EXPECT_TRUE(client->set("big", big.data(), big.size()).is_ok());
}

TEST_F(StoreTest, GarbageIsAnsweredThenDisconnected) {
  RawPeer peer(server_->port());
  peer.send_bytes({5, 0, 0, 0, 42, 1, 2, 3, 4});  // a 5-byte body with version 42
  StoreReply reply = peer.read_reply();
  EXPECT_EQ(reply.code, StoreReplyCode::kError);
  EXPECT_NE(reply.message.find("version 42"), std::string::npos) << reply.message;
  EXPECT_TRUE(peer.closed_by_server());
  // The server is still healthy for everyone else.
  auto client = connect();
  ASSERT_TRUE(client);
  EXPECT_TRUE(client->set("ok", "1", 1).is_ok());
}

TEST(StoreConnect, RetriesUntilTheServerStarts) {
  int port = 0;
  {
    // Reserve a port number, then free it for the server that starts late.
    std::unique_ptr<StoreServer> probe;
    ASSERT_TRUE(StoreServer::start("127.0.0.1", 0, kToken, &probe).is_ok());
    port = probe->port();
  }
  std::unique_ptr<StoreServer> server;
  // The stimulus: the server starts only after the client's first attempts were refused;
  // late by a small fraction of the time the client keeps retrying.
  static constexpr int64_t kConnectTimeoutMs = 5000;
  static constexpr int64_t kLateMs = 300;
  static_assert(kLateMs * 10 < kConnectTimeoutMs);
  std::thread late([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(kLateMs));
    EXPECT_TRUE(StoreServer::start("127.0.0.1", port, kToken, &server).is_ok());
  });
  std::unique_ptr<StoreClient> client;
  Status status = StoreClient::connect("127.0.0.1", port, kToken, kConnectTimeoutMs, &client);
  late.join();
  ASSERT_TRUE(status.is_ok()) << status.message();
  EXPECT_TRUE(client->set("k", "v", 1).is_ok());
}

TEST(StoreConnect, NoServerTimesOut) {
  int port = 0;
  {
    std::unique_ptr<StoreServer> probe;
    ASSERT_TRUE(StoreServer::start("127.0.0.1", 0, kToken, &probe).is_ok());
    port = probe->port();
  }
  std::unique_ptr<StoreClient> client;
  const auto start = std::chrono::steady_clock::now();
  Status status = StoreClient::connect("127.0.0.1", port, kToken, 300, &client);
  EXPECT_EQ(status.code(), ZRT_TIMEOUT);
  EXPECT_NE(status.message().find(std::to_string(port)), std::string::npos) << status.message();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(2000));
}

TEST(StoreConnect, ServerGoneMidCallIsARemoteError) {
  std::unique_ptr<StoreServer> server;
  ASSERT_TRUE(StoreServer::start("127.0.0.1", 0, kToken, &server).is_ok());
  std::unique_ptr<StoreClient> client;
  ASSERT_TRUE(StoreClient::connect("127.0.0.1", server->port(), kToken, 5000, &client).is_ok());
  // The stimulus: the server goes while the wait is parked in it, a small fraction of the
  // wait's timeout after it began, so the wait must end by the loss, not by the timeout.
  static constexpr int64_t kWaitTimeoutMs = 5000;
  static constexpr int64_t kStopAfterMs = 100;
  static_assert(kStopAfterMs * 10 < kWaitTimeoutMs);
  std::thread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(kStopAfterMs));
    server->stop();
  });
  Status status = client->wait({"never"}, kWaitTimeoutMs);
  stopper.join();
  EXPECT_EQ(status.code(), ZRT_REMOTE_ERROR) << status.message();
  // Every later call fails at once with the same reason.
  EXPECT_EQ(client->set("x", "1", 1).code(), ZRT_REMOTE_ERROR);
}

}  // namespace
}  // namespace zrt
