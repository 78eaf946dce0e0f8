// Every host collective x dtype x op x count x in/out-of-place against a serial f64 reference,
// for N = 1, 2, 3, 4, 8 real ranks over UCX (one fork per N; the whole matrix runs inside it).
// Results that must agree across ranks (all-reduce, all-gather, broadcast) are hashed and the
// hashes compared through an all-gather; all-reduce is also repeated and compared bitwise.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "tests/collectives/rig.h"
#include "tests/collectives/values.h"
#include "tests/harness/multirank.h"
#include "tests/harness/rank_count.h"

namespace zrt::testing {
namespace {

constexpr size_t kLarge = 1048579;
const size_t kCounts[] = {0, 1, 7, 1023, kLarge};

struct Case {
  zrt_coll_kind_t kind;
  zrt_dtype_t dtype;
  zrt_op_t op;
  size_t count;
  bool in_place;
};

std::string name_of(const Case& c) {
  return fmt::format("{} {} {} count={} {}", coll_kind_name(c.kind), dtype_name(c.dtype),
                     op_name(c.op), c.count, c.in_place ? "in-place" : "out-of-place");
}

class MatrixRunner {
 public:
  MatrixRunner(Rig& rig) : rig_(rig) {
    const size_t max_bytes = kLarge * 8 * static_cast<size_t>(rig.size) + 64;
    send_.resize(max_bytes);
    recv_.resize(max_bytes);
  }

  // Runs one case; returns false (after recording a failure) on the first wrong element.
  bool run(const Case& c) {
    const int n = rig_.size;
    const int rank = rig_.rank;
    const size_t esize = dtype_size(c.dtype);
    const int root = c.kind == ZRT_COLL_REDUCE ? n / 2 : n - 1;
    // Poison what the case may write (the whole gathered buffer at most).
    std::memset(recv_.data(), 0xab, std::min(recv_.size(), c.count * esize * n));
    CollectiveArgs args;
    args.kind = c.kind;
    args.dtype = c.dtype;
    args.op = c.op;
    args.count = c.count;
    args.root = root;
    char* send = send_.data();
    char* recv = recv_.data();
    size_t in_count = c.count;  // elements of this rank's input
    size_t in_offset = 0;       // global index of the input's first element (RS blocks)
    switch (c.kind) {
      case ZRT_COLL_REDUCE_SCATTER:
        in_count = c.count * n;
        if (c.in_place) {
          send = recv;
          recv = send + rank * c.count * esize;
        }
        break;
      case ZRT_COLL_ALL_GATHER:
        in_offset = 0;
        if (c.in_place) send = recv + rank * c.count * esize;
        break;
      default:
        if (c.in_place) send = recv;
        break;
    }
    const zrt_op_t value_op =
        (c.kind == ZRT_COLL_ALL_GATHER || c.kind == ZRT_COLL_BROADCAST) ? ZRT_SUM : c.op;
    for (size_t i = 0; i < in_count; ++i) {
      store(c.dtype, send, i, input_value(c.dtype, value_op, rank, n, in_offset + i));
    }
    args.sendbuf = send;
    args.recvbuf = recv;
    Status status = rig_.run(args);
    EXPECT_TRUE(status.is_ok()) << name_of(c) << ": " << status.message();
    if (!status.is_ok()) return false;

    const double tol = tolerance(c.dtype, c.op);
    auto check = [&](size_t out_index, double expected) {
      const double got = load(c.dtype, recv, out_index);
      if (tol == 0 ? got != expected : std::fabs(got - expected) > tol) {
        ADD_FAILURE() << "rank " << rank << " of " << n << ": " << name_of(c) << ": element "
                      << out_index << " is " << got << ", expected " << expected;
        return false;
      }
      return true;
    };
    switch (c.kind) {
      case ZRT_COLL_ALL_REDUCE:
        for (size_t i = 0; i < c.count; ++i) {
          if (!check(i, reference(c.dtype, c.op, n, i))) return false;
        }
        hash_ = fnv1a(recv, c.count * esize, hash_);
        break;
      case ZRT_COLL_REDUCE_SCATTER:
        for (size_t i = 0; i < c.count; ++i) {
          if (!check(i, reference(c.dtype, c.op, n, rank * c.count + i))) return false;
        }
        break;
      case ZRT_COLL_ALL_GATHER:
        for (int b = 0; b < n; ++b) {
          for (size_t i = 0; i < c.count; ++i) {
            if (!check(b * c.count + i, input_value(c.dtype, ZRT_SUM, b, n, i))) return false;
          }
        }
        hash_ = fnv1a(recv, c.count * esize * n, hash_);
        break;
      case ZRT_COLL_BROADCAST:
        for (size_t i = 0; i < c.count; ++i) {
          if (!check(i, input_value(c.dtype, ZRT_SUM, root, n, i))) return false;
        }
        hash_ = fnv1a(recv, c.count * esize, hash_);
        break;
      case ZRT_COLL_REDUCE:
        if (rank == root) {
          for (size_t i = 0; i < c.count; ++i) {
            if (!check(i, reference(c.dtype, c.op, n, i))) return false;
          }
        }
        break;
      default:
        break;
    }
    return true;
  }

  uint64_t hash() const { return hash_; }

 private:
  Rig& rig_;
  std::vector<char> send_;
  std::vector<char> recv_;
  uint64_t hash_ = 1469598103934665603ull;
};

void run_matrix_on(int rank, int size, bool windows) {
  Rig rig;
  rig.windows = windows;
  Status status = rig.init(rank, size, "matrix");
  ASSERT_TRUE(status.is_ok()) << status.message();
  MatrixRunner runner(rig);
  const zrt_coll_kind_t kinds[] = {ZRT_COLL_ALL_REDUCE, ZRT_COLL_REDUCE_SCATTER,
                                   ZRT_COLL_ALL_GATHER, ZRT_COLL_BROADCAST, ZRT_COLL_REDUCE};
  int cases = 0;
  for (zrt_coll_kind_t kind : kinds) {
    const bool reduces =
        kind == ZRT_COLL_ALL_REDUCE || kind == ZRT_COLL_REDUCE_SCATTER || kind == ZRT_COLL_REDUCE;
    for (int d = 0; d < ZRT_DTYPE_COUNT; ++d) {
      const auto dtype = static_cast<zrt_dtype_t>(d);
      for (int o = 0; o < (reduces ? ZRT_OP_COUNT : 1); ++o) {
        const auto op = static_cast<zrt_op_t>(o);
        if (op == ZRT_AVG && !dtype_is_floating(dtype)) continue;
        for (size_t count : kCounts) {
          // The large count runs the sum and avg of every dtype (the ops differ only in the
          // kernel, tested at every small count); at N = 8 only 4-byte and 2-byte floats.
          if (count == kLarge && op != ZRT_SUM && op != ZRT_AVG) continue;
          if (count == kLarge && size == 8 && dtype != ZRT_F32 && dtype != ZRT_BF16) continue;
          for (bool in_place : {false, true}) {
            ++cases;
            if (!runner.run(Case{kind, dtype, op, count, in_place})) return;
          }
        }
      }
    }
  }
  // Determinism from run to run: the same all-reduce twice, bitwise.
  std::vector<float> a(300007), b(300007);
  for (size_t i = 0; i < a.size(); ++i) a[i] = 0.1f * static_cast<float>((i * 7 + rank) % 97);
  std::vector<float> first(a.size()), second(a.size());
  CollectiveArgs args;
  args.kind = ZRT_COLL_ALL_REDUCE;
  args.dtype = ZRT_F32;
  args.op = ZRT_SUM;
  args.count = a.size();
  args.sendbuf = a.data();
  args.recvbuf = first.data();
  ASSERT_TRUE(rig.run(args).is_ok());
  args.recvbuf = second.data();
  ASSERT_TRUE(rig.run(args).is_ok());
  EXPECT_EQ(0, std::memcmp(first.data(), second.data(), first.size() * sizeof(float)));

  // Bitwise agreement across ranks: all-gather every rank's hash of its replicated results.
  uint64_t hash = fnv1a(first.data(), first.size() * sizeof(float), runner.hash());
  std::vector<uint64_t> hashes(size);
  CollectiveArgs gather;
  gather.kind = ZRT_COLL_ALL_GATHER;
  gather.dtype = ZRT_I64;
  gather.count = 1;
  gather.sendbuf = &hash;
  gather.recvbuf = hashes.data();
  ASSERT_TRUE(rig.run(gather).is_ok());
  for (int r = 0; r < size; ++r) {
    EXPECT_EQ(hashes[0], hashes[r]) << "rank " << r << "'s replicated results differ from rank 0";
  }
  EXPECT_GT(cases, 500);
}

// The rings through peer windows (all ranks on one host, as here), and through tagged
// messages (ranks on several hosts), which must agree bit for bit on the same inputs.
void run_matrix(int rank, int size) {
  run_matrix_on(rank, size, true);
}
void run_matrix_tagged(int rank, int size) {
  run_matrix_on(rank, size, false);
}

RankOptions options() {
  RankOptions options;
  options.deadline_ms = 280000;
  return options;
}

class MatrixThroughWindows : public RankCount {};
TEST_P(MatrixThroughWindows, EveryCaseMatchesTheReference) {
  expect_ranks_pass(GetParam(), run_matrix, options());
}
INSTANTIATE_TEST_SUITE_P(CollectivesMatrix, MatrixThroughWindows, ::testing::Values(1, 2, 3, 4, 8),
                         rank_count_name);

class MatrixThroughTaggedMessages : public RankCount {};
TEST_P(MatrixThroughTaggedMessages, EveryCaseMatchesTheReference) {
  expect_ranks_pass(GetParam(), run_matrix_tagged, options());
}
INSTANTIATE_TEST_SUITE_P(CollectivesMatrix, MatrixThroughTaggedMessages, ::testing::Values(2, 3),
                         rank_count_name);

}  // namespace
}  // namespace zrt::testing
