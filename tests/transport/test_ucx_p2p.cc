// Multi-rank tests of the UCX transport over real UCX between forked ranks, wired through the
// file bootstrap (no dependency on the TCP store).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/harness/multirank.h"
#include "tests/harness/wait_until.h"
#include "tests/transport/transport_test_util.h"
#include "transports/ucx/ucx_transport.h"

namespace zrt::testing {
namespace {

constexpr int64_t kTimeoutMs = 60000;

std::unique_ptr<Transport> make_transport(int rank, int size, int64_t timeout_ms,
                                          const char* name = "t") {
  std::unique_ptr<Bootstrap> bootstrap;
  Status status = create_file_bootstrap(run_dir(), name, rank, size, timeout_ms, &bootstrap);
  EXPECT_TRUE(status.is_ok()) << status.message();
  if (!status.is_ok()) return nullptr;
  std::unique_ptr<Transport> transport;
  TransportOptions options;
  options.timeout_ms = timeout_ms;
  status = create_ucx_transport(*bootstrap, options, &transport);
  EXPECT_TRUE(status.is_ok()) << status.message();
  if (transport != nullptr) {
    EXPECT_EQ(transport->rank(), rank);
    EXPECT_EQ(transport->size(), size);
    status = bootstrap->barrier();  // nobody tears down before everyone wired
    EXPECT_TRUE(status.is_ok()) << status.message();
  }
  return transport;
}

// Every rank exchanges a message of each size with every rank (itself included), one shifted
// round at a time: in round k it sends to rank+k and receives from rank-k.
void all_pairs_body(int rank, int size, const std::vector<size_t>& sizes) {
  std::unique_ptr<Transport> transport = make_transport(rank, size, kTimeoutMs);
  ASSERT_NE(transport, nullptr);
  for (size_t s = 0; s < sizes.size(); ++s) {
    const size_t bytes = sizes[s];
    for (int k = 0; k < size; ++k) {
      const int to = (rank + k) % size;
      const int from = (rank - k + size) % size;
      std::vector<uint8_t> out(bytes), in(bytes, 0);
      fill_pattern(out, rank, to);
      TransportCompletion sent, received;
      ASSERT_TRUE(transport->recv(from, s, in.data(), bytes, &received).is_ok());
      ASSERT_TRUE(transport->send(to, s, out.data(), bytes, &sent).is_ok());
      Status status = wait_all(*transport, {&sent, &received}, kTimeoutMs);
      ASSERT_TRUE(status.is_ok()) << "rank " << rank << " size " << bytes << " to " << to
                                  << " from " << from << ": " << status.message();
      EXPECT_EQ(received.bytes, bytes);
      EXPECT_EQ(first_mismatch(in, from, rank), -1)
          << "rank " << rank << ": data from rank " << from << " (" << bytes << " bytes)";
    }
  }
  EXPECT_TRUE(transport->health().is_ok()) << transport->health().message();
  std::unique_ptr<Bootstrap> bootstrap;
  ASSERT_TRUE(create_file_bootstrap(run_dir(), "end", rank, size, kTimeoutMs, &bootstrap).is_ok());
  EXPECT_TRUE(bootstrap->barrier().is_ok());
}

const std::vector<size_t> kSmallSizes = {0, 1, 4096, 1 << 20};

class UcxAllPairs : public ::testing::TestWithParam<int> {};

TEST_P(UcxAllPairs, SmallAndMediumMessages) {
  expect_ranks_pass(GetParam(),
                    [](int rank, int size) { all_pairs_body(rank, size, kSmallSizes); });
}

INSTANTIATE_TEST_SUITE_P(Ranks, UcxAllPairs, ::testing::Values(1, 2, 3, 4, 8));

// Messages with a header in front (Transport::send_with_header), between processes: over UCX's
// shared memory eager and rendezvous protocols (the iov datatype takes other paths than
// contiguous data), header and data each arrive whole.
TEST(UcxHeader, HeaderAndDataArriveBetweenRanks) {
  expect_ranks_pass(3, [](int rank, int size) {
    std::unique_ptr<Transport> transport = make_transport(rank, size, kTimeoutMs);
    ASSERT_NE(transport, nullptr);
    const int to = (rank + 1) % size;
    const int from = (rank + size - 1) % size;
    for (size_t bytes :
         {size_t{0}, size_t{100}, size_t{16} << 10, size_t{255} << 10, size_t{4} << 20}) {
      std::vector<uint8_t> out(bytes), in(bytes), header_out(40), header_in(40, 0);
      fill_pattern(out, rank, to);
      fill_pattern(header_out, rank + 10, to + 10);
      TransportCompletion sent, received;
      ASSERT_TRUE(
          transport->recv_with_header(from, 3, header_in.data(), 40, in.data(), bytes, &received)
              .is_ok());
      ASSERT_TRUE(
          transport->send_with_header(to, 3, header_out.data(), 40, out.data(), bytes, &sent)
              .is_ok());
      Status status = wait_all(*transport, {&sent, &received}, kTimeoutMs);
      ASSERT_TRUE(status.is_ok()) << bytes << ": " << status.message();
      EXPECT_EQ(received.bytes, bytes + 40);
      EXPECT_EQ(first_mismatch(in, from, rank), -1) << bytes;
      EXPECT_EQ(first_mismatch(header_in, from + 10, rank + 10), -1) << bytes;
    }
    std::unique_ptr<Bootstrap> bootstrap;
    ASSERT_TRUE(
        create_file_bootstrap(run_dir(), "end", rank, size, kTimeoutMs, &bootstrap).is_ok());
    EXPECT_TRUE(bootstrap->barrier().is_ok());
  });
}

// 256 MiB per pair only up to 3 ranks: each rank holds two such buffers, and 8 ranks on two
// cores would take minutes of pattern filling without testing anything new.
class UcxAllPairsLarge : public ::testing::TestWithParam<int> {};

TEST_P(UcxAllPairsLarge, Message256MiB) {
  expect_ranks_pass(GetParam(),
                    [](int rank, int size) { all_pairs_body(rank, size, {size_t{256} << 20}); });
}

INSTANTIATE_TEST_SUITE_P(Ranks, UcxAllPairsLarge, ::testing::Values(1, 2, 3));

// A rank that exits (without closing anything, as a killed process would) before the others
// receive from it: every survivor's receive fails within the timeout instead of hanging.
class UcxPeerDeath : public ::testing::TestWithParam<int> {};

TEST_P(UcxPeerDeath, ReceiveFromDeadRankFails) {
  constexpr int64_t kShortMs = 5000;
  expect_ranks_pass(GetParam(), [](int rank, int size) {
    std::unique_ptr<Transport> transport = make_transport(rank, size, kShortMs);
    ASSERT_NE(transport, nullptr);
    const int dead = size - 1;
    if (rank == dead) _exit(0);
    const auto start = std::chrono::steady_clock::now();
    std::vector<uint8_t> in(64);
    TransportCompletion received;
    ASSERT_TRUE(transport->recv(dead, 7, in.data(), in.size(), &received).is_ok());
    Status status = wait_all(*transport, {&received}, kShortMs);
    const auto elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::steady_clock::now() - start)
                             .count();
    EXPECT_TRUE(status.code() == ZRT_REMOTE_ERROR || status.code() == ZRT_TIMEOUT)
        << static_cast<int>(status.code()) << ": " << status.message();
    EXPECT_LT(elapsed, kShortMs + 3000);
    fprintf(stderr, "rank %d: receive from dead rank ended after %lld ms: code %d: %s\n", rank,
            static_cast<long long>(elapsed), static_cast<int>(status.code()),
            status.message().c_str());
    // Leave without a flush-close towards the dead rank blocking us.
    transport->cancel_all(Status::error(ZRT_REMOTE_ERROR, "test over"));
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, UcxPeerDeath, ::testing::Values(2, 3));

// A message longer than the receive buffer fails the receive with a clear error, both for an
// eager-sized and a rendezvous-sized message, and the sender is not left hanging.
TEST(UcxTruncation, LongerMessageThanReceiveBuffer) {
  expect_ranks_pass(2, [](int rank, int size) {
    std::unique_ptr<Transport> transport = make_transport(rank, size, kTimeoutMs);
    ASSERT_NE(transport, nullptr);
    for (size_t bytes : {size_t{4096}, size_t{4} << 20}) {
      std::vector<uint8_t> buffer(bytes, 1);
      TransportCompletion op;
      if (rank == 0) {
        ASSERT_TRUE(transport->send(1, 3, buffer.data(), bytes, &op).is_ok());
        Status status = wait_all(*transport, {&op}, 10000);
        EXPECT_NE(status.code(), ZRT_TIMEOUT) << status.message();
      } else {
        ASSERT_TRUE(transport->recv(0, 3, buffer.data(), bytes / 2, &op).is_ok());
        Status status = wait_all(*transport, {&op}, 10000);
        EXPECT_EQ(status.code(), ZRT_INVALID_USAGE) << status.message();
        EXPECT_NE(status.message().find("longer than"), std::string::npos) << status.message();
      }
    }
    std::unique_ptr<Bootstrap> bootstrap;
    ASSERT_TRUE(
        create_file_bootstrap(run_dir(), "end", rank, size, kTimeoutMs, &bootstrap).is_ok());
    EXPECT_TRUE(bootstrap->barrier().is_ok());
  });
}

// Registered memory works as a send and receive buffer and is writable right away.
TEST(UcxRegistered, SendBetweenRegisteredBuffers) {
  expect_ranks_pass(2, [](int rank, int size) {
    std::unique_ptr<Transport> transport = make_transport(rank, size, kTimeoutMs);
    ASSERT_NE(transport, nullptr);
    const size_t bytes = 16 << 20;
    void* buffer = nullptr;
    ASSERT_TRUE(transport->alloc_registered(bytes, &buffer).is_ok());
    auto* data = static_cast<uint8_t*>(buffer);
    TransportCompletion op;
    if (rank == 0) {
      for (size_t i = 0; i < bytes; ++i) data[i] = pattern_byte(0, 1, i);
      ASSERT_TRUE(transport->send(1, 1, buffer, bytes, &op).is_ok());
    } else {
      ASSERT_TRUE(transport->recv(0, 1, buffer, bytes, &op).is_ok());
    }
    Status status = wait_all(*transport, {&op}, kTimeoutMs);
    ASSERT_TRUE(status.is_ok()) << status.message();
    if (rank == 1) {
      size_t bad = 0;
      for (size_t i = 0; i < bytes; ++i) bad += data[i] != pattern_byte(0, 1, i);
      EXPECT_EQ(bad, 0u);
    }
    transport->free_registered(buffer);
    std::unique_ptr<Bootstrap> bootstrap;
    ASSERT_TRUE(
        create_file_bootstrap(run_dir(), "end", rank, size, kTimeoutMs, &bootstrap).is_ok());
    EXPECT_TRUE(bootstrap->barrier().is_ok());
  });
}

// Registered memory is zrt's memfd: a peer maps it from its key and sees the owner's bytes
// (and the owner the peer's stores); once the owner is dead, mapping its key again is an error
// naming the gone process, never a crash (UCX's rkey unpack of a dead peer's key segfaulted).
TEST(UcxRegistered, PeerMapsMemoryAndADeadOwnersKeyIsRefused) {
  expect_ranks_pass(2, [](int rank, int size) {
    std::unique_ptr<Transport> transport = make_transport(rank, size, kTimeoutMs);
    ASSERT_NE(transport, nullptr);
    std::unique_ptr<Bootstrap> bootstrap;
    ASSERT_TRUE(
        create_file_bootstrap(run_dir(), "keys", rank, size, kTimeoutMs, &bootstrap).is_ok());
    const size_t bytes = 1 << 20;
    void* buffer = nullptr;
    ASSERT_TRUE(transport->alloc_registered(bytes, &buffer).is_ok());
    auto* data = static_cast<uint8_t*>(buffer);
    for (size_t i = 0; i < bytes; ++i) data[i] = pattern_byte(rank, 0, i);
    std::vector<uint8_t> key;
    ASSERT_TRUE(transport->pack_registered_key(buffer, &key).is_ok());
    // Record: address, pid, key length, key (padded).
    std::vector<uint8_t> mine(256, 0), all(512, 0);
    const uint64_t header[3] = {reinterpret_cast<uintptr_t>(buffer),
                                static_cast<uint64_t>(getpid()), key.size()};
    ASSERT_LE(sizeof(header) + key.size(), mine.size());
    std::memcpy(mine.data(), header, sizeof(header));
    std::memcpy(mine.data() + sizeof(header), key.data(), key.size());
    ASSERT_TRUE(bootstrap->allgather(mine.data(), all.data(), mine.size()).is_ok());
    const int peer = 1 - rank;
    uint64_t theirs[3];
    std::memcpy(theirs, all.data() + peer * 256, sizeof(theirs));
    const std::vector<uint8_t> peer_key(all.data() + peer * 256 + sizeof(theirs),
                                        all.data() + peer * 256 + sizeof(theirs) + theirs[2]);
    void* local = nullptr;
    if (rank == 1) {
      Status mapped = transport->map_peer_registered(peer, peer_key, theirs[0] + 64, &local);
      ASSERT_TRUE(mapped.is_ok()) << mapped.message();
      EXPECT_EQ(static_cast<uint8_t*>(local)[0], pattern_byte(peer, 0, 64));
      static_cast<uint8_t*>(local)[1] = 0xab;  // the owner sees it after the barrier
    }
    ASSERT_TRUE(bootstrap->barrier().is_ok());
    if (rank == 1) _exit(0);  // dies, its key in rank 0's hands
    EXPECT_EQ(data[65], 0xab);
    const auto exited = wait_until(
        [&] {
          std::ifstream stat("/proc/" + std::to_string(theirs[1]) + "/stat");
          std::string line;
          std::getline(stat, line);
          return !stat || line.find(") Z") != std::string::npos;
        },
        std::chrono::milliseconds(10000), "the peer exits");
    ASSERT_TRUE(exited);
    // An exited process has closed its fds (a zombie too): the key leads nowhere.
    const Status refused = transport->map_peer_registered(peer, peer_key, theirs[0], &local);
    EXPECT_EQ(refused.code(), ZRT_REMOTE_ERROR) << refused.message();
    EXPECT_NE(refused.message().find("rank 1"), std::string::npos) << refused.message();
    std::fprintf(stderr, "mapping a dead peer's memory: %s\n", refused.message().c_str());
    transport->free_registered(buffer);
    transport->cancel_all(Status::error(ZRT_REMOTE_ERROR, "test over"));
  });
}

}  // namespace
}  // namespace zrt::testing

namespace zrt::testing {
namespace {

// Whether process `pid` has ended: reaped (gone from /proc) or a zombie awaiting its parent.
bool process_has_exited(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return true;
  std::string line;
  std::getline(stat, line);
  const size_t name_end = line.rfind(')');  // the state follows the parenthesised name
  return name_end == std::string::npos || line.compare(name_end + 1, 2, " Z") == 0;
}

// Wiring to a rank that exited after publishing its address fails cleanly (or succeeds and then
// fails the first receive), never crashes: the teardown of a half-wired transport must not
// touch endpoints that were never made.
TEST(UcxWireUp, PeerGoneBeforeWiring) {
  expect_ranks_pass(3, [](int rank, int size) {
    std::unique_ptr<Bootstrap> bootstrap;
    ASSERT_TRUE(create_file_bootstrap(run_dir(), "gone", rank, size, 10000, &bootstrap).is_ok());
    TransportOptions options;
    options.timeout_ms = 5000;
    std::unique_ptr<UcxWorker> worker;
    ASSERT_TRUE(UcxWorker::create(options, &worker).is_ok());
    std::vector<uint64_t> lengths(size);
    const uint64_t length = worker->address().size();
    ASSERT_TRUE(bootstrap->allgather(&length, lengths.data(), sizeof(length)).is_ok());
    const uint64_t longest = *std::max_element(lengths.begin(), lengths.end());
    std::vector<uint8_t> mine(longest), all(longest * size);
    std::memcpy(mine.data(), worker->address().data(), length);
    ASSERT_TRUE(bootstrap->allgather(mine.data(), all.data(), longest).is_ok());
    const int64_t pid = getpid();
    std::vector<int64_t> pids(size);
    ASSERT_TRUE(bootstrap->allgather(&pid, pids.data(), sizeof(pid)).is_ok());
    if (rank == size - 1) _exit(0);
    // Wiring starts once the peer is gone, not merely about to go.
    ASSERT_TRUE(wait_until([&] { return process_has_exited(static_cast<pid_t>(pids[size - 1])); },
                           std::chrono::seconds(10), "the last rank exiting"));
    std::vector<std::vector<uint8_t>> addresses(size);
    for (int peer = 0; peer < size; ++peer) {
      addresses[peer].assign(all.begin() + longest * peer,
                             all.begin() + longest * peer + lengths[peer]);
    }
    std::unique_ptr<Transport> transport;
    Status status =
        wire_ucx_transport(std::move(worker), rank, size, addresses, options, &transport);
    if (!status.is_ok()) {
      // Names the unreachable rank: the dead one, or a survivor that already gave up and left.
      EXPECT_NE(status.message().find("to rank"), std::string::npos) << status.message();
      return;
    }
    std::vector<uint8_t> in(8);
    TransportCompletion received;
    ASSERT_TRUE(transport->recv(size - 1, 1, in.data(), in.size(), &received).is_ok());
    status = wait_all(*transport, {&received}, 5000);
    EXPECT_TRUE(status.code() == ZRT_REMOTE_ERROR || status.code() == ZRT_TIMEOUT)
        << status.message();
  });
}

}  // namespace
}  // namespace zrt::testing
