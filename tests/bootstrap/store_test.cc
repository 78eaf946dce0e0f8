// The TCP store, server and client in one process over real loopback sockets.
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>

#include <fmt/format.h>
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

// Each store lifetime has its own nonce, which the hello reply brings to the client.
TEST_F(StoreTest, TheHelloBringsTheStoresNonce) {
  auto client = connect();
  ASSERT_TRUE(client);
  EXPECT_NE(server_->nonce(), 0u);
  EXPECT_EQ(client->nonce(), server_->nonce());
  std::unique_ptr<StoreServer> other;
  ASSERT_TRUE(StoreServer::start("127.0.0.1", 0, kToken, &other).is_ok());
  EXPECT_NE(other->nonce(), server_->nonce());
}

std::unique_ptr<StoreClient> join(int port, int rank, int size, Status* status,
                                  uint64_t nonce = 0) {
  std::unique_ptr<StoreClient> client;
  *status = StoreClient::connect("127.0.0.1", port, kToken, 3000, &client,
                                 StoreJoin{.rank = rank, .size = size, .nonce = nonce});
  return client;
}

bool has(const Status& status, const std::string& text) {
  return status.message().find(text) != std::string::npos;
}

// Two processes claim rank 1: neither can be told to be the real one, so the store refuses the
// second and then every request of everyone, a parked wait included.
TEST_F(StoreTest, ARankClaimedTwicePoisonsTheStore) {
  Status status;
  auto rank0 = join(server_->port(), 0, 2, &status);
  ASSERT_TRUE(status.is_ok()) << status.message();
  auto rank1 = join(server_->port(), 1, 2, &status);
  ASSERT_TRUE(status.is_ok()) << status.message();
  Status waited;
  std::thread waiter([&] { waited = rank0->wait({"never"}, 5000); });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // parked before the clash
  const auto start = std::chrono::steady_clock::now();
  auto again = join(server_->port(), 1, 2, &status);
  EXPECT_FALSE(again);
  EXPECT_EQ(status.code(), ZRT_REMOTE_ERROR);
  EXPECT_TRUE(has(status,
                  "store refused rank 1 of 2: rank 1 of 2 joined the store more than "
                  "once (from 127.0.0.1:"))
      << status.message();
  EXPECT_TRUE(has(status, "two jobs share this store's port")) << status.message();
  EXPECT_TRUE(has(status, "ZRT_JOB_TOKEN")) << status.message();
  waiter.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(2000));
  EXPECT_EQ(waited.code(), ZRT_REMOTE_ERROR);
  EXPECT_TRUE(has(waited, "rank 1 of 2 joined the store more than once")) << waited.message();
  Status later = rank1->set("k", "v", 1);
  EXPECT_EQ(later.code(), ZRT_REMOTE_ERROR);
  EXPECT_TRUE(has(later, "two jobs share this store's port")) << later.message();
  EXPECT_EQ(server_->counters().refused, 1u);
}

// A rank of another world size cannot be one of this job's: it alone is refused.
TEST_F(StoreTest, AnotherWorldSizeIsRefusedAndTheJobGoesOn) {
  Status status;
  auto rank0 = join(server_->port(), 0, 3, &status);
  ASSERT_TRUE(status.is_ok()) << status.message();
  auto stranger = join(server_->port(), 1, 2, &status);
  EXPECT_FALSE(stranger);
  EXPECT_EQ(status.code(), ZRT_REMOTE_ERROR);
  EXPECT_TRUE(has(status,
                  "store refused rank 1 of 2: this store's job has 3 ranks, this rank's "
                  "has 2"))
      << status.message();
  EXPECT_TRUE(rank0->set("k", "v", 1).is_ok());
  auto rank1 = join(server_->port(), 1, 3, &status);
  EXPECT_TRUE(status.is_ok()) << status.message();
  EXPECT_EQ(server_->counters().refused, 1u);
}

// A claim that presents this store's nonce comes from a rank that joined it before: taken back.
TEST_F(StoreTest, AClaimWithTheStoresNonceIsARankComingBack) {
  Status status;
  auto first = join(server_->port(), 1, 2, &status);
  ASSERT_TRUE(status.is_ok()) << status.message();
  auto back = join(server_->port(), 1, 2, &status, first->nonce());
  ASSERT_TRUE(status.is_ok()) << status.message();
  EXPECT_TRUE(back->set("k", "v", 1).is_ok());
  EXPECT_EQ(server_->counters().refused, 0u);
}

// Rank 0's store goes and another takes its port (another job's rank 0): a rank that had joined
// the first and comes back is refused by the second, which logs it, and the rank is told why.
TEST(StoreNonce, AnotherStoreOnThePortIsRefusedOnBothSides) {
  std::unique_ptr<StoreServer> first;
  ASSERT_TRUE(StoreServer::start("127.0.0.1", 0, kToken, &first).is_ok());
  const int port = first->port();
  Status status;
  auto client = join(port, 1, 3, &status);
  ASSERT_TRUE(status.is_ok()) << status.message();
  const uint64_t met = client->nonce();
  first->stop();
  std::unique_ptr<StoreServer> second;
  ASSERT_TRUE(StoreServer::start("127.0.0.1", port, kToken, &second).is_ok());
  std::vector<std::vector<uint8_t>> values;
  status = client->get({"k"}, 0, &values);
  EXPECT_EQ(status.code(), ZRT_REMOTE_ERROR);
  EXPECT_TRUE(has(status, "store refused rank 1 of 3: it joined another store on this port"))
      << status.message();
  EXPECT_TRUE(has(status, fmt::format("store nonce {:016x}", met))) << status.message();
  EXPECT_TRUE(has(status, fmt::format("this store's is {:016x}", second->nonce())))
      << status.message();
  EXPECT_TRUE(has(status, "ZRT_JOB_TOKEN")) << status.message();
  EXPECT_EQ(second->counters().refused, 1u);
  // The same from a fresh connection that presents the old nonce.
  auto fresh = join(port, 2, 3, &status, met);
  EXPECT_FALSE(fresh);
  EXPECT_TRUE(has(status, "store refused rank 2 of 3: it joined another store"))
      << status.message();
  EXPECT_EQ(second->counters().refused, 2u);
}

// A relay between a client and the store that can reset the client's connection while the
// store lives on (a middlebox dropping a flow, say).
class CuttableRelay {
 public:
  explicit CuttableRelay(int upstream_port) : upstream_(upstream_port) {
    EXPECT_TRUE(listen_tcp("127.0.0.1", 0, &listen_fd_, &port_).is_ok());
    thread_ = std::thread([this] { run(); });
  }
  ~CuttableRelay() {
    stop_ = true;
    thread_.join();
    close(listen_fd_);
  }
  int port() const { return port_; }
  int accepted() const { return accepted_; }
  // Resets the relayed connection now (call it while one is relayed).
  void cut() {
    cut_ = true;
    while (cut_) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }

 private:
  void run() {
    while (!stop_) {
      pollfd entry{listen_fd_, POLLIN, 0};
      if (poll(&entry, 1, 10) <= 0) continue;
      const int client = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (client < 0) continue;
      ++accepted_;
      int server = -1;
      if (connect_tcp("127.0.0.1", upstream_, deadline_after_ms(2000), &server).is_ok()) {
        pump(client, server);
        close(server);
      }
      const linger reset{1, 0};  // close with a reset, as a dropped flow ends
      setsockopt(client, SOL_SOCKET, SO_LINGER, &reset, sizeof(reset));
      close(client);
      cut_ = false;
    }
  }
  void pump(int client, int server) {
    char buffer[65536];
    while (!stop_ && !cut_) {
      pollfd entries[2] = {{client, POLLIN, 0}, {server, POLLIN, 0}};
      if (poll(entries, 2, 10) <= 0) continue;
      for (int i = 0; i < 2; ++i) {
        if ((entries[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
        const ssize_t n = recv(entries[i].fd, buffer, sizeof(buffer), 0);
        if (n <= 0) return;
        const int to = entries[1 - i].fd;
        if (!send_all(to, buffer, static_cast<size_t>(n), deadline_after_ms(2000), "relay")
                 .is_ok()) {
          return;
        }
      }
    }
  }

  int upstream_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<bool> cut_{false};
  std::atomic<int> accepted_{0};
  std::thread thread_;
};

// The connection is lost mid-wait while the store lives: the client comes back with the nonce
// and its claim, the same store takes it back, and the wait is asked again and answered.
TEST_F(StoreTest, ALostConnectionComesBackToTheSameStore) {
  CuttableRelay relay(server_->port());
  Status status;
  auto client = join(relay.port(), 1, 2, &status);
  ASSERT_TRUE(status.is_ok()) << status.message();
  ASSERT_TRUE(client->set("a", "1", 1).is_ok());
  auto writer = connect();
  ASSERT_TRUE(writer);
  std::thread stimulus([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    relay.cut();
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    EXPECT_TRUE(writer->set("late", "2", 1).is_ok());
  });
  status = client->wait({"late"}, 5000);
  stimulus.join();
  EXPECT_TRUE(status.is_ok()) << status.message();
  EXPECT_EQ(relay.accepted(), 2);
  std::vector<std::vector<uint8_t>> values;
  ASSERT_TRUE(client->get({"a", "late"}, 0, &values).is_ok());
  EXPECT_EQ(values[1], bytes_of("2"));
  EXPECT_EQ(server_->counters().refused, 0u);
}

// An add lost with its connection may have counted already: never sent twice.
TEST_F(StoreTest, ALostAddIsNotSentAgain) {
  CuttableRelay relay(server_->port());
  auto client = [&] {
    std::unique_ptr<StoreClient> made;
    EXPECT_TRUE(StoreClient::connect("127.0.0.1", relay.port(), kToken, 3000, &made).is_ok());
    return made;
  }();
  ASSERT_TRUE(client);
  int64_t value = 0;
  ASSERT_TRUE(client->add("n", 1, &value).is_ok());
  relay.cut();
  Status status = client->add("n", 1, &value);
  EXPECT_EQ(status.code(), ZRT_REMOTE_ERROR) << status.message();
  EXPECT_EQ(relay.accepted(), 1);
}

// A port from bind(0) is lent to the next outgoing connection; the launchers' ports come from
// below that range and must be bindable at once.
TEST(PickFreePort, DrawsBelowTheEphemeralRangeAPortThatBinds) {
  int low = 32768, high = 60999;
  if (FILE* file = std::fopen("/proc/sys/net/ipv4/ip_local_port_range", "r")) {
    ASSERT_EQ(std::fscanf(file, "%d %d", &low, &high), 2);
    std::fclose(file);
  }
  for (int draw = 0; draw < 20; ++draw) {
    int port = 0;
    ASSERT_TRUE(pick_free_port(&port).is_ok());
    EXPECT_TRUE(port < low || port > high) << port << " is in " << low << "-" << high;
    int fd = -1, bound = 0;
    Status listened = listen_tcp("", port, &fd, &bound);
    ASSERT_TRUE(listened.is_ok()) << listened.message();
    EXPECT_EQ(bound, port);
    close(fd);
  }
}

}  // namespace
}  // namespace zrt
