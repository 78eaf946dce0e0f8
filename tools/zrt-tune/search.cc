#include "tools/zrt-tune/search.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include <fmt/format.h>

#include "tools/common/units.h"

namespace zrt::tune {
namespace {

constexpr size_t kMinBucket = size_t{64} << 10;
constexpr size_t kMaxBucket = size_t{1} << 30;
constexpr size_t kBucketGranule = size_t{4} << 10;
constexpr int kMaxDepth = 64;  // the partition manager's limit

size_t round_bucket(double bytes) {
  const double granules = std::max(1.0, std::round(bytes / static_cast<double>(kBucketGranule)));
  return static_cast<size_t>(granules) * kBucketGranule;
}

class Search {
 public:
  Search(const SearchSpace& space, const MeasureFn& measure, const ProgressFn& progress,
         SearchResult* result)
      : space_(space), measure_(measure), progress_(progress), result_(result) {}

  Status run() {
    expected_ = space_.extras.size() + static_cast<size_t>(std::max(space_.confirm, 0)) + 4;
    for (const Candidate& c : space_.extras) ZRT_RETURN_IF_ERROR(try_candidate(c, -1));
    if (space_.stage <= 2) {
      ZRT_RETURN_IF_ERROR(search_buckets());
    } else {
      ZRT_RETURN_IF_ERROR(search_depths());
      ZRT_RETURN_IF_ERROR(search_budgets());
    }
    return confirm();
  }

 private:
  // Measures c unless the same setting was measured already. `axis` is c's value on the axis
  // being swept (memory grows with it), -1 when c is not part of a sweep.
  Status try_candidate(Candidate c, double axis) {
    for (const Trial& t : result_->trials) {
      if (t.candidate.same_setting(c)) return Status::ok();
    }
    Trial trial;
    trial.candidate = std::move(c);
    if (axis >= 0 && over_cap_from_ && axis >= *over_cap_from_) {
      trial.sweep.skipped = true;
      trial.sweep.fits = false;
    } else {
      report_progress(trial.candidate);
      ZRT_RETURN_IF_ERROR(measure_(trial.candidate, false, &trial.sweep));
      ++done_;
      if (!trial.sweep.fits && axis >= 0) {
        over_cap_from_ = std::min(axis, over_cap_from_.value_or(axis));
      }
    }
    result_->trials.push_back(std::move(trial));
    return Status::ok();
  }

  void report_progress(const Candidate& c) {
    expected_ = std::max(expected_, done_ + 1);
    if (progress_) progress_(done_, expected_, describe(c, space_.stage));
  }

  // The fastest fitting trial, optionally only among those `pick` accepts.
  int best_index(const std::function<bool(const Candidate&)>& pick = nullptr) const {
    int best = -1;
    for (size_t i = 0; i < result_->trials.size(); ++i) {
      const Trial& t = result_->trials[i];
      if (t.sweep.skipped || !t.sweep.fits || (pick && !pick(t.candidate))) continue;
      if (best < 0 || t.sweep.step_ms < result_->trials[best].sweep.step_ms) {
        best = static_cast<int>(i);
      }
    }
    return best;
  }

  Candidate bucket_candidate(size_t bytes, const char* origin) const {
    Candidate c;
    c.bucket_bytes = bytes;
    c.prefetch_depth = space_.base_prefetch_depth;
    c.origin = origin;
    return c;
  }

  Status search_buckets() {
    const std::vector<size_t> coarse = coarse_buckets(space_.grad_bytes);
    expected_ += coarse.size();
    for (size_t b : coarse) {
      ZRT_RETURN_IF_ERROR(try_candidate(bucket_candidate(b, "coarse"), static_cast<double>(b)));
    }
    const size_t high = coarse.back();
    auto swept = [&](const Candidate& c) { return c.prefetch_depth == space_.base_prefetch_depth; };
    for (double factor : {2.0, std::sqrt(2.0)}) {
      const int best = best_index(swept);
      if (best < 0) return Status::ok();  // nothing fits: the caller says so
      const double center = static_cast<double>(result_->trials[best].candidate.bucket_bytes);
      for (double b : {center / factor, center * factor}) {
        const size_t bytes = round_bucket(b);
        if (bytes < kMinBucket || bytes > high) continue;
        ZRT_RETURN_IF_ERROR(
            try_candidate(bucket_candidate(bytes, "refine"), static_cast<double>(bytes)));
      }
    }
    return Status::ok();
  }

  Candidate depth_candidate(int depth, size_t budget, const char* origin) const {
    Candidate c;
    c.bucket_bytes = space_.base_bucket_bytes;
    c.prefetch_depth = depth;
    c.prefetch_bytes = budget;
    c.origin = origin;
    return c;
  }

  bool depth_axis(const Candidate& c) const {
    return c.bucket_bytes == space_.base_bucket_bytes && c.prefetch_bytes == 0;
  }

  Status search_depths() {
    const std::vector<int> coarse = coarse_depths(space_.units);
    expected_ += coarse.size();
    for (int d : coarse) ZRT_RETURN_IF_ERROR(try_candidate(depth_candidate(d, 0, "coarse"), d));
    auto on_axis = [&](const Candidate& c) { return depth_axis(c); };
    // Halve the gaps around the best until its measured neighbours are adjacent integers.
    for (int round = 0; round < 8; ++round) {
      const int best = best_index(on_axis);
      if (best < 0) return Status::ok();
      const int d = result_->trials[best].candidate.prefetch_depth;
      int below = -1, above = std::numeric_limits<int>::max();
      for (const Trial& t : result_->trials) {
        if (!depth_axis(t.candidate)) continue;
        const int x = t.candidate.prefetch_depth;
        if (x < d) below = std::max(below, x);
        if (x > d) above = std::min(above, x);
      }
      std::vector<int> next;
      if (below >= 0 && d - below > 1) next.push_back((below + d) / 2);
      if (above != std::numeric_limits<int>::max() && above - d > 1)
        next.push_back((d + above) / 2);
      if (next.empty()) break;
      for (int x : next) ZRT_RETURN_IF_ERROR(try_candidate(depth_candidate(x, 0, "refine"), x));
    }
    return Status::ok();
  }

  Status search_budgets() {
    auto on_axis = [&](const Candidate& c) { return depth_axis(c); };
    const int best = best_index(on_axis);
    if (best < 0 || space_.typical_unit_bytes == 0) return Status::ok();
    const int d = result_->trials[best].candidate.prefetch_depth;
    if (d < 1) return Status::ok();  // nothing is prefetched: a budget changes nothing
    // A budget of d typical units or more rarely binds; try tighter ones.
    for (int k = 1; k < std::max(d, 2) && k <= 16; k *= 2) {
      ZRT_RETURN_IF_ERROR(try_candidate(
          depth_candidate(d, static_cast<size_t>(k) * space_.typical_unit_bytes, "budget"), -1));
    }
    return Status::ok();
  }

  Status confirm() {
    std::vector<int> order;
    for (size_t i = 0; i < result_->trials.size(); ++i) {
      const Trial& t = result_->trials[i];
      if (!t.sweep.skipped && t.sweep.fits) order.push_back(static_cast<int>(i));
    }
    if (order.empty()) {
      result_->best = -1;
      return Status::ok();
    }
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
      return result_->trials[a].sweep.step_ms < result_->trials[b].sweep.step_ms;
    });
    const size_t count = std::min(order.size(), static_cast<size_t>(std::max(space_.confirm, 0)));
    expected_ = done_ + count;
    for (size_t i = 0; i < count; ++i) {
      Trial& t = result_->trials[order[i]];
      if (progress_) progress_(done_, expected_, "confirm " + describe(t.candidate, space_.stage));
      Measurement m;
      ZRT_RETURN_IF_ERROR(measure_(t.candidate, true, &m));
      t.confirm_ms = m.step_ms;
      ++done_;
    }
    if (progress_) progress_(done_, expected_, "done");
    int best = order[0];
    for (size_t i = 1; i < count; ++i) {
      if (result_->trials[order[i]].confirm_ms < result_->trials[best].confirm_ms) best = order[i];
    }
    result_->best = best;
    return Status::ok();
  }

  const SearchSpace& space_;
  const MeasureFn& measure_;
  const ProgressFn& progress_;
  SearchResult* result_;
  size_t done_ = 0;
  size_t expected_ = 0;
  std::optional<double> over_cap_from_;
};

}  // namespace

std::vector<size_t> coarse_buckets(uint64_t grad_bytes) {
  size_t high = kMinBucket;
  while (high < grad_bytes && high < kMaxBucket) high *= 2;
  std::vector<size_t> sizes;
  for (size_t b = kMinBucket; b < high; b *= 4) sizes.push_back(b);
  sizes.push_back(high);
  return sizes;
}

std::vector<int> coarse_depths(int units) {
  const int max_depth = std::clamp(units - 1, 0, kMaxDepth);
  std::vector<int> depths = {0};
  for (int d = 1; d <= max_depth; d *= 2) depths.push_back(d);
  if (depths.back() != max_depth) depths.push_back(max_depth);
  return depths;
}

std::string describe(const Candidate& c, int stage) {
  if (stage <= 2) return "bucket " + tools::format_size(c.bucket_bytes);
  std::string text = fmt::format("depth {}", c.prefetch_depth);
  if (c.prefetch_bytes > 0) text += ", budget " + tools::format_size(c.prefetch_bytes);
  return text;
}

Status run_search(const SearchSpace& space, const MeasureFn& measure, const ProgressFn& progress,
                  SearchResult* result) {
  if (space.stage < 0 || space.stage > 3) {
    return Status::invalid_argument("stage {} is not 0..3", space.stage);
  }
  if (!measure) return Status::invalid_argument("run_search: no measure function");
  SearchResult out;
  Search search(space, measure, progress, &out);
  ZRT_RETURN_IF_ERROR(search.run());
  *result = std::move(out);
  return Status::ok();
}

}  // namespace zrt::tune
