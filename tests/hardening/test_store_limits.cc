// The rendezvous store under a hostile or unlucky network: a connect whose SYN is never
// answered, a flood of idle connections while a real job bootstraps, fds running out in the
// server, timeouts too large for a clock.
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "lib/bootstrap/bootstrap.h"
#include "lib/bootstrap/socket_util.h"
#include "lib/bootstrap/store_client.h"
#include "lib/bootstrap/store_server.h"

namespace zrt {
namespace {

constexpr const char* kToken = "limits-token";

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

int loopback_listener(int backlog, int* port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) return -1;
  if (listen(fd, backlog) != 0) return -1;
  socklen_t length = sizeof(address);
  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  *port = ntohs(address.sin_port);
  return fd;
}

// A non-blocking connect to 127.0.0.1:port, left as it is.
int start_connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -1;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<uint16_t>(port));
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 &&
      errno != EINPROGRESS) {
    close(fd);
    return -1;
  }
  return fd;
}

// Raises the soft fd limit toward `wanted`; returns what it got.
rlim_t raise_fd_limit(rlim_t wanted) {
  rlimit limit{};
  getrlimit(RLIMIT_NOFILE, &limit);
  if (limit.rlim_cur < wanted) {
    limit.rlim_cur = std::min(wanted, limit.rlim_max);
    setrlimit(RLIMIT_NOFILE, &limit);
    getrlimit(RLIMIT_NOFILE, &limit);
  }
  return limit.rlim_cur;
}

// A listener whose accept queue is full and never drained: the kernel drops further SYNs, and
// a blocking connect would wait for its retries (over two minutes).
TEST(StoreLimits, ConnectToAFullBacklogEndsAtTheDeadline) {
  int port = 0;
  const int listener = loopback_listener(0, &port);
  ASSERT_GE(listener, 0);
  std::vector<int> fillers;
  for (int i = 0; i < 8; ++i) fillers.push_back(start_connect(port));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const auto start = Clock::now();
  int fd = -1;
  Status status = connect_tcp("127.0.0.1", port, deadline_after_ms(1000), &fd);
  const double took = seconds_since(start);
  // A kernel that answers anyway (syncookies on a full queue) gives a connection: then there is
  // no unanswered SYN to test here.
  if (status.is_ok()) {
    close(fd);
    for (int filler : fillers) close(filler);
    close(listener);
    GTEST_SKIP() << "this kernel completed a connection to a full backlog";
  }
  EXPECT_EQ(status.code(), ZRT_TIMEOUT) << status.message();
  EXPECT_LT(took, 3.0) << status.message();
  EXPECT_GE(took, 0.9);
  for (int filler : fillers) close(filler);
  close(listener);
}

TEST(StoreLimits, StoreClientConnectHonoursItsTimeout) {
  int port = 0;
  const int listener = loopback_listener(0, &port);
  ASSERT_GE(listener, 0);
  std::vector<int> fillers;
  for (int i = 0; i < 8; ++i) fillers.push_back(start_connect(port));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const auto start = Clock::now();
  std::unique_ptr<StoreClient> client;
  Status status = StoreClient::connect("127.0.0.1", port, kToken, 800, &client);
  const double took = seconds_since(start);
  EXPECT_FALSE(status.is_ok());
  EXPECT_EQ(status.code(), ZRT_TIMEOUT) << status.message();
  EXPECT_LT(took, 3.0) << status.message();
  for (int filler : fillers) close(filler);
  close(listener);
}

TEST(StoreLimits, HugeWaitsAreClampedNotOverflowed) {
  const auto before = Clock::now();
  const Deadline deadline = deadline_after_ms(INT64_MAX);
  EXPECT_GT(deadline, before + std::chrono::hours(24 * 365));
  EXPECT_GT(remaining_ms(deadline), 1000000);
  EXPECT_EQ(add_wait_ms(INT64_MAX, INT64_MAX), kMaxWaitMs);
  EXPECT_EQ(add_wait_ms(-5, 7), 7);
  // A store client with an INT64_MAX timeout works and does not fail at once.
  std::unique_ptr<StoreServer> server;
  ASSERT_TRUE(StoreServer::start("127.0.0.1", 0, kToken, &server).is_ok());
  std::unique_ptr<StoreClient> client;
  Status status = StoreClient::connect("127.0.0.1", server->port(), kToken, INT64_MAX, &client);
  ASSERT_TRUE(status.is_ok()) << status.message();
  ASSERT_TRUE(client->set("k", "v", 1).is_ok());
  std::vector<std::vector<uint8_t>> values;
  status = client->get({"k"}, INT64_MAX, &values);
  ASSERT_TRUE(status.is_ok()) << status.message();
  ASSERT_EQ(values.size(), 1u);
}

// Two ranks bootstrap through rank 0's store with timeout_ms = INT64_MAX ("wait forever"): the
// timeout is clamped, not overflowed into a deadline in the past.
TEST(StoreLimits, StoreBootstrapWithAnInt64MaxTimeout) {
  int port = 0;
  const int probe = loopback_listener(16, &port);
  ASSERT_GE(probe, 0);
  close(probe);  // a free port for rank 0's store (another process taking it meanwhile is rare)
  std::vector<Status> results(2);
  std::vector<std::vector<int>> gathered(2);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    ranks.emplace_back([&, rank] {
      EnvRanks env;
      env.rank = rank;
      env.size = 2;
      env.local_rank = rank;
      env.local_size = 2;
      env.store_port = port;
      env.job_token = kToken;
      std::unique_ptr<Bootstrap> bootstrap;
      Status status = create_store_bootstrap(env, INT64_MAX, &bootstrap);
      const int mine = 10 + rank;
      gathered[static_cast<size_t>(rank)].resize(2);
      if (status.is_ok()) {
        status =
            bootstrap->allgather(&mine, gathered[static_cast<size_t>(rank)].data(), sizeof(int));
      }
      if (status.is_ok()) status = bootstrap->barrier();
      results[static_cast<size_t>(rank)] = status;
    });
  }
  for (std::thread& rank : ranks) rank.join();
  for (int rank = 0; rank < 2; ++rank) {
    ASSERT_TRUE(results[static_cast<size_t>(rank)].is_ok())
        << "rank " << rank << ": " << results[static_cast<size_t>(rank)].message();
    EXPECT_EQ(gathered[static_cast<size_t>(rank)], (std::vector<int>{10, 11}));
  }
}

// Ranks of a real job set and get their keys while thousands of idle connections sit on the
// store: the cap and the hello deadline close the idle ones, the ranks are served at once.
TEST(StoreLimits, BootstrapGoesOnUnderAFloodOfIdleConnections) {
  constexpr int kFlood = 3000;
  if (raise_fd_limit(kFlood * 2 + 256) < static_cast<rlim_t>(kFlood * 2 + 64)) {
    GTEST_SKIP() << "RLIMIT_NOFILE's hard limit is below " << kFlood * 2 + 64;
  }
  StoreLimits limits;
  limits.max_unauthenticated = 256;
  limits.hello_timeout_ms = 1000;
  std::unique_ptr<StoreServer> server;
  ASSERT_TRUE(StoreServer::start("127.0.0.1", 0, kToken, &server, limits).is_ok());
  std::vector<int> flood;
  for (int i = 0; i < kFlood; ++i) {
    const int fd = start_connect(server->port());
    ASSERT_GE(fd, 0) << "connection " << i << ": " << strerror(errno);
    flood.push_back(fd);
  }
  const auto start = Clock::now();
  constexpr int kRanks = 4;
  std::vector<std::thread> ranks;
  std::vector<Status> results(kRanks);
  for (int rank = 0; rank < kRanks; ++rank) {
    ranks.emplace_back([&, rank] {
      std::unique_ptr<StoreClient> client;
      Status status = StoreClient::connect("127.0.0.1", server->port(), kToken, 10000, &client);
      if (status.is_ok()) {
        const std::string key = "rank" + std::to_string(rank);
        status = client->set(key, key.data(), key.size());
      }
      std::vector<std::string> keys;
      for (int peer = 0; peer < kRanks; ++peer) keys.push_back("rank" + std::to_string(peer));
      std::vector<std::vector<uint8_t>> values;
      if (status.is_ok()) status = client->get(keys, 10000, &values);
      results[static_cast<size_t>(rank)] = status;
    });
  }
  for (std::thread& rank : ranks) rank.join();
  const double took = seconds_since(start);
  for (int rank = 0; rank < kRanks; ++rank) {
    EXPECT_TRUE(results[static_cast<size_t>(rank)].is_ok())
        << "rank " << rank << ": " << results[static_cast<size_t>(rank)].message();
  }
  EXPECT_LT(took, 5.0);
  // The flood is shed: at most the cap is held, the rest were closed by the server.
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  EXPECT_GE(server->counters().evicted, static_cast<uint64_t>(kFlood - 256));
  // The server holds no more than the cap of them. (Some SYNs of the flood were dropped by the
  // full backlog and are still being retried by the kernel: those never reached the server.)
  int still_open = 0;
  for (int fd : flood) {
    sockaddr_storage peer{};
    socklen_t length = sizeof(peer);
    const bool established = getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &length) == 0;
    pollfd entry{fd, POLLIN, 0};
    bool closed = false;
    if (poll(&entry, 1, 0) == 1 && (entry.revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
      char byte;
      closed = recv(fd, &byte, 1, MSG_DONTWAIT) <= 0;
    }
    if (established && !closed) ++still_open;
    close(fd);
  }
  EXPECT_LE(still_open, 256 + 512) << "idle connections the server kept open";
  server->stop();
}

// The server's fds run out: accept() fails for as long as the flood lasts, the log gets a line
// per 10 s (not one per failure), and once the flood is shed a real client is served.
TEST(StoreLimits, FdExhaustionIsLoggedOnceAndRecovers) {
  rlimit saved{};
  getrlimit(RLIMIT_NOFILE, &saved);
  std::unique_ptr<StoreServer> server;
  StoreLimits limits;
  limits.hello_timeout_ms = 800;
  ASSERT_TRUE(StoreServer::start("127.0.0.1", 0, kToken, &server, limits).is_ok());
  // This process's own fds count: leave the server room for a few dozen connections only.
  const int probe = dup(0);
  ASSERT_GE(probe, 0);
  close(probe);
  rlimit low = saved;
  low.rlim_cur = static_cast<rlim_t>(probe + 64);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  // Client sockets also take fds here, so the flood comes from a child process.
  const int port = server->port();
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    rlimit high = saved;
    setrlimit(RLIMIT_NOFILE, &high);
    std::vector<int> fds;
    for (int i = 0; i < 400; ++i) fds.push_back(start_connect(port));
    sleep(3);
    _exit(0);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  const uint64_t lines = server->counters().accept_log_lines;
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &saved), 0);
  EXPECT_GE(lines, 1u);
  EXPECT_LE(lines, 2u);
  std::unique_ptr<StoreClient> client;
  Status connected = StoreClient::connect("127.0.0.1", port, kToken, 5000, &client);
  ASSERT_TRUE(connected.is_ok()) << connected.message();
  EXPECT_TRUE(client->set("after", "x", 1).is_ok());
  server->stop();
}

}  // namespace
}  // namespace zrt
