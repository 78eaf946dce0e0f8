// The cma all-gather (collectives/one_shot.h): every rank copies every peer's block straight out
// of the peer's input with process_vm_readv. On real ranks of one host, forced as ZRT_ALGO=cma
// does, after the communicator's probe (collectives/peer_memory.h), which must pass here
// (siblings of one user, no Yama restriction) or say why this kernel forbids it:
//   - exact byte for byte at N = 2, 3 and 4, f32, bf16 and i32, in place and out of place, at
//     odd counts and past the one-shot slot (cma has no slot bound);
//   - every rank rewrites its input the moment a call returns, hundreds of calls back to back:
//     a rank must not complete before its peers have read it, or they read the next call's data;
//   - one rank by cma and another by the slot one-shot for the same collective: an error on both
//     that says so, not a hang or mixed data;
//   - a peer that never calls or dies: every survivor's error within the timeout;
//   - an input in registered memory: read through a mapping of the owner's allocation, which a
//     reader drops once the owner has freed an allocation;
//   - the ring all-reduce's second half by cma where the table gathers so: exact in place and
//     out of place, equal and unequal blocks, a buffer rewritten the moment a call returns.
#include <unistd.h>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "collectives/one_shot.h"
#include "lib/core/dtype.h"
#include "engine/stream_resources.h"
#include "tests/collectives/late_peer.h"
#include "tests/collectives/rig.h"
#include "tests/harness/multirank.h"
#include "tests/harness/status_assert.h"

namespace zrt::testing {
namespace {

// Why this kernel forbids cross-memory reads between sibling processes, or "" when it does not.
std::string ptrace_restriction() {
  std::ifstream scope("/proc/sys/kernel/yama/ptrace_scope");
  int value = 0;
  if (scope >> value && value > 0) {
    return fmt::format("kernel.yama.ptrace_scope = {}: siblings may not read each other", value);
  }
  return "";
}

// Rank `rank`'s block for call `call`: distinct per rank, call and element.
void fill(std::vector<char>& block, int rank, int call) {
  for (size_t i = 0; i < block.size(); ++i) {
    block[i] = static_cast<char>((i * 31 + static_cast<size_t>(rank) * 7 + call * 13) & 0xff);
  }
}

Status init_cma(Rig& rig, int rank, int size, const std::string& name, int64_t timeout = 30000) {
  rig.algorithm = AllReduceAlgorithm::kCma;
  rig.peer_memory = true;
  return rig.init(rank, size, name, timeout);
}

// Skips the test in the parent, before any rank starts, where this kernel forbids cross-memory
// reads between siblings; everywhere else a rank whose probe fails is a failure.
#define SKIP_WHERE_THE_KERNEL_FORBIDS_CMA()                          \
  if (const std::string why = ptrace_restriction(); !why.empty()) { \
    GTEST_SKIP() << why;                                             \
  }

// Whether the rig's probe reached every peer (`all`) or at least one; a failure otherwise, since
// the test was skipped where the kernel forbids the probe.
bool probe_passed(const Rig& rig, bool all = true) {
  const size_t reached = rig.engine->options().peer_pids.size();
  if (all ? reached == static_cast<size_t>(rig.size) : reached > 0) return true;
  ADD_FAILURE() << "the cross-memory probe failed between sibling ranks (rank " << rig.rank
                << " reached " << reached << " of " << rig.size << ")";
  return false;
}

void check_gather(Rig& rig, size_t bytes, bool in_place, int call) {
  const int rank = rig.rank, size = rig.size;
  if (bytes == 0) {  // nothing to compare; the call still takes its slot and sequence number
    ASSERT_OK(rig.run(collective_args(ZRT_COLL_ALL_GATHER, nullptr, nullptr, 0, ZRT_I8)));
    return;
  }
  std::vector<char> mine(bytes);
  fill(mine, rank, call);
  std::vector<char> out(bytes * static_cast<size_t>(size), 0x5a);
  const void* send = mine.data();
  if (in_place) {
    std::memcpy(out.data() + rank * bytes, mine.data(), bytes);
    send = out.data() + rank * bytes;
  }
  ASSERT_OK(rig.run(collective_args(ZRT_COLL_ALL_GATHER, send, out.data(), bytes, ZRT_I8)));
  for (int r = 0; r < size; ++r) {
    std::vector<char> theirs(bytes);
    fill(theirs, r, call);
    ASSERT_EQ(std::memcmp(out.data() + r * bytes, theirs.data(), bytes), 0)
        << bytes << " bytes " << (in_place ? "in place" : "out of place") << " N=" << size
        << ": block " << r;
  }
}

class CmaRanks : public ::testing::TestWithParam<int> {};

TEST_P(CmaRanks, ExactInPlaceAndOutOfPlaceAtOddSizesAndPastTheSlot) {
  SKIP_WHERE_THE_KERNEL_FORBIDS_CMA();
  expect_ranks_pass(GetParam(), [](int rank, int size) {
    Rig rig;
    ASSERT_OK(init_cma(rig, rank, size, "cma_exact"));
    if (!probe_passed(rig)) return;
    int call = 0;
    for (size_t bytes : {size_t{0}, size_t{1}, size_t{7}, size_t{4099}, size_t{100003},
                         kOneShotSlotBytes + 3, 3 * kOneShotSlotBytes}) {
      for (bool in_place : {false, true}) {
        check_gather(rig, bytes, in_place, ++call);
        if (::testing::Test::HasFatalFailure()) return;
      }
    }
    // Element types other than bytes: the count is in elements, the read in bytes.
    for (zrt_dtype_t dtype : {ZRT_F32, ZRT_BF16, ZRT_I32}) {
      const size_t count = 1001, esize = dtype_size(dtype);
      std::vector<char> mine(count * esize);
      fill(mine, rank, ++call);
      std::vector<char> out(mine.size() * static_cast<size_t>(size));
      ASSERT_OK(
          rig.run(collective_args(ZRT_COLL_ALL_GATHER, mine.data(), out.data(), count, dtype)));
      for (int r = 0; r < size; ++r) {
        std::vector<char> theirs(mine.size());
        fill(theirs, r, call);
        ASSERT_EQ(std::memcmp(out.data() + r * theirs.size(), theirs.data(), theirs.size()), 0)
            << dtype_name(dtype) << " block " << r;
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, CmaRanks, ::testing::Values(2, 3, 4),
                         [](const auto& info) { return "N" + std::to_string(info.param); });

// A call completes only once every peer has read this rank's input: each rank overwrites its
// input with the next call's data the moment a call returns, and every result must still be the
// call's own. More ranks than cores make a reader late often.
TEST(CmaAllGather, InputsRewrittenTheMomentACallReturnsNeverShowInAPeersResult) {
  SKIP_WHERE_THE_KERNEL_FORBIDS_CMA();
  for (int size : {2, 3}) {
    expect_ranks_pass(size, [](int rank, int size) {
      Rig rig;
      ASSERT_OK(init_cma(rig, rank, size, "cma_reuse"));
      if (!probe_passed(rig)) return;
      constexpr size_t kBytes = 256 << 10;
      constexpr int kCalls = 300;
      std::vector<char> input(kBytes), out(kBytes * static_cast<size_t>(size)), expected(kBytes);
      fill(input, rank, 0);
      for (int call = 0; call < kCalls; ++call) {
        ASSERT_OK(rig.run(
            collective_args(ZRT_COLL_ALL_GATHER, input.data(), out.data(), kBytes, ZRT_I8)));
        fill(input, rank, call + 1);  // at once: a peer still reading would see this
        for (int r = 0; r < size; ++r) {
          fill(expected, r, call);
          ASSERT_EQ(std::memcmp(out.data() + r * kBytes, expected.data(), kBytes), 0)
              << "call " << call << ": block " << r;
        }
      }
    });
  }
}

// Rank 0 gathers by cma, rank 1 by the slot one-shot (ZRT_ALGO differs across ranks): both see
// the other's header and fail, naming the mode.
TEST(CmaAllGather, AModeMismatchAcrossRanksIsAnErrorOnBoth) {
  SKIP_WHERE_THE_KERNEL_FORBIDS_CMA();
  expect_ranks_pass(2, [](int rank, int size) {
    Rig rig;
    rig.peer_memory = true;
    rig.algorithm = rank == 0 ? AllReduceAlgorithm::kCma : AllReduceAlgorithm::kOneShot;
    ASSERT_OK(rig.init(rank, size, "cma_mismatch", 10000));
    if (!probe_passed(rig, /*all=*/false)) return;
    std::vector<char> input(1000, static_cast<char>(rank)), out(2000);
    Status status =
        rig.run(collective_args(ZRT_COLL_ALL_GATHER, input.data(), out.data(), 1000, ZRT_I8));
    ASSERT_FALSE(status.is_ok()) << "rank " << rank << " gathered across modes";
    EXPECT_EQ(status.code(), ZRT_REMOTE_ERROR) << status.message();
    EXPECT_NE(status.message().find("by cma"), std::string::npos) << status.message();
  });
}

// Whether this process maps zrt's registered memfd whose inode is `inode` (a peer's, once mapped
// here). The name counts too: other shared memory (UCX's segments, /dev/shm files) has inode
// numbers of its own.
bool maps_inode(uint64_t inode) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    std::istringstream fields(line);
    std::string range, permissions, offset, device;
    uint64_t node = 0;
    if (fields >> range >> permissions >> offset >> device >> node && node == inode &&
        line.find("memfd:zrt-registered") != std::string::npos) {
      return true;
    }
  }
  return false;
}

// Gathers `bytes` from `input` into `out` for call `call` and checks every block.
void gather_registered(Rig& rig, char* input, char* out, size_t bytes, int call) {
  std::vector<char> block(bytes);
  fill(block, rig.rank, call);
  std::memcpy(input, block.data(), bytes);
  ASSERT_OK(rig.run(collective_args(ZRT_COLL_ALL_GATHER, input, out, bytes, ZRT_I8)));
  for (int r = 0; r < rig.size; ++r) {
    fill(block, r, call);
    ASSERT_EQ(std::memcmp(out + static_cast<size_t>(r) * bytes, block.data(), bytes), 0)
        << "call " << call << ": block " << r;
  }
}

// An input in registered memory (zrt_mem_alloc's) is read through a mapping of the owner's
// allocation: the reader's /proc/self/maps shows it, which a kernel copy would not, and every
// block is exact, out of place and in place. Once the owner frees that allocation, the reader
// drops its mapping at their next gather, so the freed pages do not live on here.
TEST(CmaAllGather, RegisteredInputsAreReadThroughMappingsDroppedOnceTheOwnerFreesThem) {
  SKIP_WHERE_THE_KERNEL_FORBIDS_CMA();
  for (int size : {2, 3}) {
    expect_ranks_pass(size, [](int rank, int size) {
      Rig rig;
      ASSERT_OK(init_cma(rig, rank, size, "cma_mapped"));
      if (!probe_passed(rig)) return;
      constexpr size_t kBytes = 100003;
      const size_t total = kBytes * static_cast<size_t>(size);
      void* first = nullptr;
      void* whole = nullptr;
      ASSERT_OK(rig.transport->alloc_registered(kBytes, &first));
      ASSERT_OK(rig.transport->alloc_registered(total, &whole));
      std::vector<char> out(total);
      int call = 0;
      for (; call < 3; ++call) {
        gather_registered(rig, static_cast<char*>(first), out.data(), kBytes, call);
        if (::testing::Test::HasFatalFailure()) return;
      }
      char* own_block = static_cast<char*>(whole) + static_cast<size_t>(rank) * kBytes;
      gather_registered(rig, own_block, static_cast<char*>(whole), kBytes, call++);
      if (::testing::Test::HasFatalFailure()) return;

      RegisteredRange range;
      ASSERT_TRUE(rig.transport->find_registered(first, kBytes, &range));
      std::vector<uint64_t> ids(static_cast<size_t>(size));
      ASSERT_OK(rig.bootstrap->allgather(&range.id, ids.data(), sizeof(uint64_t)));
      for (int peer = 0; peer < size; ++peer) {
        if (peer != rank) {
          EXPECT_TRUE(maps_inode(ids[peer])) << "rank " << peer << "'s input";
        }
      }

      rig.transport->free_registered(first);
      void* second = nullptr;
      ASSERT_OK(rig.transport->alloc_registered(kBytes, &second));
      for (int again = 0; again < 2; ++again, ++call) {
        gather_registered(rig, static_cast<char*>(second), out.data(), kBytes, call);
        if (::testing::Test::HasFatalFailure()) return;
      }
      for (int peer = 0; peer < size; ++peer) {
        if (peer != rank) {
          EXPECT_FALSE(maps_inode(ids[peer])) << "rank " << peer << "'s freed allocation";
        }
      }
      ASSERT_OK(rig.bootstrap->barrier());
      rig.transport->free_registered(second);
      rig.transport->free_registered(whole);
    });
  }
}

// The ring all-reduce gathers its reduced blocks the way the table's all-gather would (enqueue.cc):
// by cma where it says so (N = 2 by the built-in table; N = 3 forced, as ZRT_ALGO=cma does) and
// the blocks are equal, else the window ring. Sums of small integers are exact in any order, so
// every rank must hold the exact sum; in place, each call's result is the next call's input,
// rewritten the moment the call returns. A registered buffer shows which path ran: only the cma
// all-gather maps a peer's buffer (its memfd's inode in this process's maps).
TEST(CmaAllReduce, RingReduceScatterThenCmaAllGatherIsExact) {
  SKIP_WHERE_THE_KERNEL_FORBIDS_CMA();
  for (int size : {2, 3}) {
    expect_ranks_pass(size, [](int rank, int size) {
      Rig rig;
      rig.peer_memory = true;
      if (size == 3) rig.algorithm = AllReduceAlgorithm::kCma;
      ASSERT_OK(rig.init(rank, size, "cma_all_reduce"));
      if (!probe_passed(rig)) return;
      const size_t equal = size_t{3} << 18;  // 3 MiB of f32 at every N: equal blocks
      for (size_t count : {equal, equal + 1}) {
        void* memory = nullptr;
        ASSERT_OK(rig.transport->alloc_registered(count * sizeof(float), &memory));
        float* data = static_cast<float*>(memory);
        std::vector<float> in(count), out(count);
        auto value = [](int r, size_t i) { return static_cast<float>((i % 97) + r * 3 + 1); };
        for (size_t i = 0; i < count; ++i) in[i] = value(rank, i);
        ASSERT_OK(
            rig.run(collective_args(ZRT_COLL_ALL_REDUCE, in.data(), out.data(), count, ZRT_F32)));
        size_t wrong = 0;
        for (size_t i = 0; i < count; ++i) {
          float sum = 0;
          for (int r = 0; r < size; ++r) sum += value(r, i);
          wrong += out[i] != sum;
        }
        ASSERT_EQ(wrong, 0u) << count << " elements out of place, N=" << size;
        // In place, call after call: every element is N^k after call k, exact in f32.
        for (size_t i = 0; i < count; ++i) data[i] = 1.0f;
        float expected = 1;
        for (int call = 0; call < 6; ++call) {
          ASSERT_OK(rig.run(collective_args(ZRT_COLL_ALL_REDUCE, data, data, count, ZRT_F32)));
          expected *= static_cast<float>(size);
          wrong = 0;
          for (size_t i = 0; i < count; ++i) wrong += data[i] != expected;
          ASSERT_EQ(wrong, 0u) << "call " << call << ", " << count << " elements, N=" << size;
          // Every rank's input is now `expected`; a peer still reading would see the next call's.
        }
        RegisteredRange range;
        ASSERT_TRUE(rig.transport->find_registered(data, count * sizeof(float), &range));
        std::vector<uint64_t> ids(static_cast<size_t>(size));
        ASSERT_OK(rig.bootstrap->allgather(&range.id, ids.data(), sizeof(uint64_t)));
        const bool by_cma = count == equal;
        for (int peer = 0; peer < size; ++peer) {
          if (peer != rank) {
            EXPECT_EQ(maps_inode(ids[peer]), by_cma)
                << "rank " << peer << "'s buffer, " << count << " elements";
          }
        }
        ASSERT_OK(rig.bootstrap->barrier());
        rig.transport->free_registered(memory);
      }
    });
  }
}

// Rank 0 gathers the ring all-reduce's second half by cma (the built-in table), rank 1 by the
// window ring (ZRT_ALGO=ring on that rank only): each would wait for the other's half without a
// word, so the call's fingerprint carries the choice and both fail at once, naming it.
TEST(CmaAllReduce, ASecondHalfChosenDifferentlyAcrossRanksIsAnErrorOnBoth) {
  SKIP_WHERE_THE_KERNEL_FORBIDS_CMA();
  expect_ranks_pass(2, [](int rank, int size) {
    Rig rig;
    rig.peer_memory = true;
    if (rank == 1) rig.algorithm = AllReduceAlgorithm::kRing;
    ASSERT_OK(rig.init(rank, size, "cma_all_reduce_mismatch", 10000));
    if (!probe_passed(rig, /*all=*/false)) return;
    const size_t count = size_t{1} << 20;  // 4 MiB of f32: 2 MiB blocks
    std::vector<float> in(count, 1.0f), out(count);
    const auto started = std::chrono::steady_clock::now();
    Status status =
        rig.run(collective_args(ZRT_COLL_ALL_REDUCE, in.data(), out.data(), count, ZRT_F32));
    ASSERT_FALSE(status.is_ok()) << "rank " << rank << " reduced across second halves";
    EXPECT_EQ(status.code(), ZRT_INVALID_USAGE) << status.message();
    EXPECT_NE(status.message().find("gathering by cma"), std::string::npos) << status.message();
    EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(5))
        << "named at the first message, not at the timeout";
  });
}

// A late or dead peer (tests/collectives/late_peer.h) during a cma all-gather.
void late_or_dead_peer(bool dies) {
  SKIP_WHERE_THE_KERNEL_FORBIDS_CMA();
  constexpr size_t kBytes = 64 << 10;
  std::vector<char> input(kBytes, 1), out(kBytes * 3);
  expect_survivors_fail_without_rank2(
      dies,
      [dies](Rig& rig, int rank, int size, int64_t timeout_ms) {
        Status status = init_cma(rig, rank, size, dies ? "cma_dead" : "cma_late", timeout_ms);
        if (status.is_ok() && !probe_passed(rig)) {
          return Status::error(ZRT_INTERNAL_ERROR, "the cross-memory probe failed");
        }
        return status;
      },
      [&](Rig& rig) {
        return rig.run(
            collective_args(ZRT_COLL_ALL_GATHER, input.data(), out.data(), kBytes, ZRT_I8));
      });
}

TEST(CmaAllGather, ALatePeerTimesOutOnEverySurvivor) {
  late_or_dead_peer(false);
}

TEST(CmaAllGather, ADeadPeerFailsEverySurvivorWithinTheTimeout) {
  late_or_dead_peer(true);
}

}  // namespace
}  // namespace zrt::testing
