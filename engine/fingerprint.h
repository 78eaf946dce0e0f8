// OrderFingerprint: what the collective-order checker (collectives/order_check.h) exchanges
// for every checked collective, and what a stream remembers of the last collective its peers
// matched. A fixed-size, trivially copyable record sent as raw bytes: all ranks of a
// communicator run the same build on hosts of one architecture (UCX host transport).
#pragma once

#include <cstdint>
#include <type_traits>

namespace zrt {

inline constexpr uint32_t kOrderFingerprintMagic = 0x5a434b31;  // "ZCK1"

struct OrderFingerprint {
  uint32_t magic = 0;     // kOrderFingerprintMagic once filled
  int32_t rank = -1;      // the sender
  uint32_t sequence = 0;  // collective number within the stream (0-based)
  int32_t stream = -1;    // stream index within the communicator
  uint64_t count = 0;
  int32_t root = -1;        // rooted kinds only, else -1
  int32_t purpose_id = -1;  // CollectiveArgs::purpose_id
  uint8_t kind = 0;         // zrt_coll_kind_t
  uint8_t dtype = 0;        // zrt_dtype_t; 0 for a barrier
  uint8_t op = 0;           // zrt_op_t for reducing kinds, kPremulOp for premul_sum, else 0
  uint8_t purpose = 0;      // zrt::Purpose
  // How the algorithm runs where ranks that chose differently would wait on each other without
  // a word (ZRT_ALGO or ZRT_ALGO_TABLE differing across ranks): kGatherByCma for a ring
  // all-reduce whose all-gather half runs by cma (collectives/enqueue.cc), else 0.
  uint8_t variant = 0;
  uint8_t reserved[3] = {0, 0, 0};

  static constexpr uint8_t kGatherByCma = 1;

  static constexpr uint8_t kPremulOp = 0xff;
};

static_assert(sizeof(OrderFingerprint) == 40, "the fingerprint is sent as raw bytes");
static_assert(std::is_trivially_copyable_v<OrderFingerprint>);

}  // namespace zrt
