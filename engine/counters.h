// CommCounters: calls, bytes and busy time per collective kind, the caller's operations and
// zrt's own (Task::internal) apart, for zrt_comm_stats. Written by the progress thread (and CUDA
// streams) when an operation completes, read by any thread.
#pragma once

#include <atomic>
#include <cstdint>

#include "zrt/zrt.h"

namespace zrt {

class CommCounters {
 public:
  void add(zrt_coll_kind_t kind, bool internal, uint64_t bytes_sent, uint64_t bytes_received,
           uint64_t busy_ns) {
    Entry& entry = entries_[internal ? 1 : 0][kind];
    entry.calls.fetch_add(1, std::memory_order_relaxed);
    entry.bytes_sent.fetch_add(bytes_sent, std::memory_order_relaxed);
    entry.bytes_received.fetch_add(bytes_received, std::memory_order_relaxed);
    entry.busy_ns.fetch_add(busy_ns, std::memory_order_relaxed);
  }

  // The collective-order checker's fingerprint traffic, kept apart from the payload counters so
  // that zrt_comm_stats reports the algorithms' own bytes whether the checker runs or not.
  void add_check(uint64_t messages, uint64_t bytes) {
    check_messages_.fetch_add(messages, std::memory_order_relaxed);
    check_bytes_.fetch_add(bytes, std::memory_order_relaxed);
  }
  uint64_t check_messages() const { return check_messages_.load(std::memory_order_relaxed); }
  uint64_t check_bytes() const { return check_bytes_.load(std::memory_order_relaxed); }

  // Fills every counter of `stats`, a whole struct (its size field is left alone).
  void snapshot(zrt_comm_stats_t* stats) const {
    stats->user = zrt_coll_counters_t{};
    stats->internal = zrt_coll_counters_t{};
    for (int kind = 0; kind < ZRT_COLL_KIND_COUNT; ++kind) {
      zrt_coll_kind_stats_t& out = stats->per_kind[kind];
      read(entries_[0][kind], &out.user, &stats->user);
      read(entries_[1][kind], &out.internal, &stats->internal);
    }
  }

  void reset() {
    for (auto& side : entries_) {
      for (Entry& entry : side) {
        entry.calls = 0;
        entry.bytes_sent = 0;
        entry.bytes_received = 0;
        entry.busy_ns = 0;
      }
    }
    check_messages_ = 0;
    check_bytes_ = 0;
  }

 private:
  struct Entry {
    std::atomic<uint64_t> calls{0};
    std::atomic<uint64_t> bytes_sent{0};
    std::atomic<uint64_t> bytes_received{0};
    std::atomic<uint64_t> busy_ns{0};
  };

  static void read(const Entry& entry, zrt_coll_counters_t* out, zrt_coll_counters_t* total) {
    out->calls = entry.calls.load(std::memory_order_relaxed);
    out->bytes_sent = entry.bytes_sent.load(std::memory_order_relaxed);
    out->bytes_received = entry.bytes_received.load(std::memory_order_relaxed);
    out->busy_ns = entry.busy_ns.load(std::memory_order_relaxed);
    total->calls += out->calls;
    total->bytes_sent += out->bytes_sent;
    total->bytes_received += out->bytes_received;
    total->busy_ns += out->busy_ns;
  }

  Entry entries_[2][ZRT_COLL_KIND_COUNT];  // [0] the caller's, [1] internal
  std::atomic<uint64_t> check_messages_{0};
  std::atomic<uint64_t> check_bytes_{0};
};

}  // namespace zrt
