#include "collectives/algorithm_plan.h"

#include <algorithm>

#include <fmt/format.h>

namespace zrt {
namespace {

constexpr TableOp kTableOps[] = {TableOp::kReduceScatter, TableOp::kAllGather, TableOp::kAllReduce};

// Where a row of `op` at `ranks` and `hosts` starts or stops applying: the choice is constant
// between them.
void add_boundaries(const AlgorithmTable& table, TableOp op, int ranks, int hosts,
                    std::vector<uint64_t>* starts) {
  for (const AlgorithmRow& row : table.rows()) {
    if (row.op != op || !row.applies_to(ranks, hosts)) continue;
    starts->push_back(row.min_bytes);
    if (row.max_bytes != kAnyBytes) starts->push_back(row.max_bytes + 1);
  }
}

}  // namespace

Status add_algorithm_plan(EngineOptions* options) {
  if (!options->all_reduce_algorithm.has_value()) {
    SettingValue forced;
    ZRT_RETURN_IF_ERROR(load_setting(SettingId::kAlgo, &forced));
    options->all_reduce_algorithm = all_reduce_algorithm(forced.text);
  }
  options->algorithm_plan = std::make_shared<AlgorithmPlan>(*options->all_reduce_algorithm,
                                                            options->algorithm_table.get(),
                                                            options->size, options->hosts);
  return Status::ok();
}

AllReduceAlgorithm algorithm_from_name(std::string_view name) {
  if (name == "direct") return AllReduceAlgorithm::kDirect;
  if (name == "rd") return AllReduceAlgorithm::kRecursiveDoubling;
  if (name == kOneShotAlgorithm) return AllReduceAlgorithm::kOneShot;
  if (name == kCmaAlgorithm) return AllReduceAlgorithm::kCma;
  if (name == kTwoShotAlgorithm) return AllReduceAlgorithm::kTwoShot;
  return AllReduceAlgorithm::kRing;
}

AlgorithmPlan::AlgorithmPlan(AllReduceAlgorithm forced, const AlgorithmTable* table, int ranks,
                             int hosts)
    : ranks_(ranks), hosts_(hosts) {
  const char* forced_name = algorithm_name(forced);
  for (TableOp op : kTableOps) {
    std::vector<uint64_t> starts{0};
    add_boundaries(AlgorithmTable::builtin(), op, ranks, hosts, &starts);
    if (table != nullptr) add_boundaries(*table, op, ranks, hosts, &starts);
    std::sort(starts.begin(), starts.end());
    starts.erase(std::unique(starts.begin(), starts.end()), starts.end());
    for (int available = 0; available < 4; ++available) {
      const bool one_shot = (available & 2) != 0;
      const bool cma = (available & 1) != 0;
      const Unavailable unavailable(one_shot ? "" : kOneShotAlgorithm, cma ? "" : kCmaAlgorithm);
      std::vector<Span>& spans = spans_[index(op, one_shot, cma)];
      for (size_t i = 0; i < starts.size(); ++i) {
        const AllReduceAlgorithm algorithm = algorithm_from_name(
            choose_algorithm(forced_name, table, op, ranks, starts[i], unavailable, hosts));
        const uint64_t last = i + 1 < starts.size() ? starts[i + 1] - 1 : kAnyBytes;
        if (!spans.empty() && spans.back().algorithm == algorithm) {
          spans.back().last_bytes = last;
        } else {
          spans.push_back(Span{last, algorithm});
        }
      }
    }
  }
}

std::string AlgorithmPlan::describe() const {
  std::string out;
  for (TableOp op : kTableOps) {
    for (int available = 3; available >= 0; --available) {
      const bool one_shot = (available & 2) != 0;
      const bool cma = (available & 1) != 0;
      out += fmt::format("{}{} ({}{}{}):", out.empty() ? "" : "\n", table_op_name(op),
                         one_shot ? "oneshot" : "", one_shot && cma ? ", " : "", cma ? "cma" : "");
      uint64_t first = 0;
      for (const Span& span : spans_[index(op, one_shot, cma)]) {
        if (span.last_bytes == kAnyBytes) {
          out += fmt::format(" {}-* {}", first, algorithm_name(span.algorithm));
        } else {
          out += fmt::format(" {}-{} {}", first, span.last_bytes, algorithm_name(span.algorithm));
        }
        first = span.last_bytes + 1;
      }
    }
  }
  return out;
}

}  // namespace zrt
