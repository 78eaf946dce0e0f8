#include "zero/partition/bucket_pool.h"

namespace zrt {

GradRoute route_segment(const RouteFacts& facts) {
  // A segment's reduction reads the window itself when the window holds it whole: no bucket
  // copy doubles the memory traffic of backward, and the first reduction after a step sends
  // the reduced slice straight into the gradient shard (the later ones add it there, as from
  // a bucket).
  if (!facts.full_grads && facts.sync && facts.in_window) return GradRoute::kReduceFromWindow;
  return facts.full_grads ? GradRoute::kAccumulateFull : GradRoute::kCopyToBucket;
}

BucketPool::BucketPool(int buckets, int segments)
    : bucket_of_(static_cast<size_t>(segments)), segment_of_(static_cast<size_t>(buckets), -1) {}

std::optional<int> BucketPool::take_free() {
  for (size_t tries = 0; tries < segment_of_.size(); ++tries) {
    const int b = next_;
    next_ = (next_ + 1) % static_cast<int>(segment_of_.size());
    if (segment_of_[b] < 0) return b;
  }
  return std::nullopt;
}

int BucketPool::free_count() const {
  int free = 0;
  for (int segment : segment_of_) free += segment < 0 ? 1 : 0;
  return free;
}

void BucketPool::bind(int segment, Bucket bucket) {
  bucket_of_[segment] = bucket;
  if (!bucket.persistent) segment_of_[bucket.index] = segment;
}

void BucketPool::unbind(int segment) {
  const std::optional<Bucket>& bucket = bucket_of_[segment];
  if (bucket && !bucket->persistent) segment_of_[bucket->index] = -1;
  bucket_of_[segment].reset();
}

}  // namespace zrt
