// AlgorithmPlan: choose_algorithm's answers for one communicator, resolved when it is created.
// The choice depends on the call only through its op, its byte count and which of one-shot and
// cma the call can run; for a given rank count, forced algorithm and table it is constant between
// the table's row boundaries. The plan evaluates choose_algorithm once per interval between
// boundaries and answers a call with an enum from a short scan of integer bounds: resolving each
// call from the table compared algorithm names as strings, a visible share of an 8-byte
// all-reduce's time on the submitting thread (perf; measured: docs/ARCHITECTURE.md#measured-costs).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "collectives/algorithm.h"
#include "lib/core/settings.h"
#include "lib/core/status.h"
#include "engine/engine.h"

namespace zrt {

class AlgorithmPlan {
 public:
  // `forced`: ZRT_ALGO's resolved value (kAuto: none); `table`: ZRT_ALGO_TABLE's (null: the
  // built-in table alone); `ranks`: the communicator's size; `hosts`: how many hosts its ranks
  // are on.
  AlgorithmPlan(AllReduceAlgorithm forced, const AlgorithmTable* table, int ranks, int hosts);

  // What choose_algorithm(forced, table, op, ranks, bytes, unavailable, hosts) returns, where
  // `unavailable` holds one-shot unless `one_shot`, and cma unless `cma`. Never kAuto.
  AllReduceAlgorithm choose(TableOp op, uint64_t bytes, bool one_shot, bool cma) const {
    for (const Span& span : spans_[index(op, one_shot, cma)]) {
      if (bytes <= span.last_bytes) return span.algorithm;
    }
    return AllReduceAlgorithm::kRing;  // unreachable: the last span ends at kAnyBytes
  }

  int ranks() const { return ranks_; }
  int hosts() const { return hosts_; }
  // One line per op and availability, "all_reduce (oneshot, cma): 0-64K oneshot, ...", for logs.
  std::string describe() const;

 private:
  struct Span {
    uint64_t last_bytes;  // inclusive; the span starts after the previous one's
    AllReduceAlgorithm algorithm;
  };
  static constexpr int kOps = 3;
  static size_t index(TableOp op, bool one_shot, bool cma) {
    return static_cast<size_t>(op) * 4 + (one_shot ? 2 : 0) + (cma ? 1 : 0);
  }

  int ranks_;
  int hosts_;
  std::array<std::vector<Span>, kOps * 4> spans_;
};

// Sets options->algorithm_plan from its all_reduce_algorithm (unset: ZRT_ALGO, as the engine
// resolves it), algorithm_table, size and hosts: what every creator of an engine does before
// create_progress_engine, so that no collective resolves its algorithm per call. Errors: a
// ZRT_ALGO value the registry refuses.
Status add_algorithm_plan(EngineOptions* options);

// The enum of an algorithm name that algorithms() lists ("ring" -> kRing, ...).
AllReduceAlgorithm algorithm_from_name(std::string_view name);

}  // namespace zrt
