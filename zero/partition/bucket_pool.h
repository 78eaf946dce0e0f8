// The decisions of the gradient path that need no communication (gradient_pipeline.h): which
// way a segment's gradients go, and which reduction bucket a segment collects in.
#pragma once

#include <optional>
#include <vector>

namespace zrt {

// Where one unit's gradients for one segment go, in grad_ready.
enum class GradRoute {
  // Reduced straight out of the gradient window into the gradient shard: no copy at all.
  kReduceFromWindow,
  // Accumulated into the full local gradient buffer, reduced there in place.
  kAccumulateFull,
  // Converted into a reduction bucket bound to the segment, reduced in the bucket.
  kCopyToBucket,
};

struct RouteFacts {
  bool full_grads = false;  // the stage keeps a full local gradient buffer
  bool sync = true;         // this micro-batch reduces (set_sync)
  bool in_window = false;   // the window holds the segment whole, in the reduce dtype
};

// Without a full gradient buffer every micro-batch synchronises (set_sync refuses otherwise).
GradRoute route_segment(const RouteFacts& facts);

// A reduction bucket: one of the pool's, or the persistent segment's own (stage 3).
struct Bucket {
  bool persistent = false;
  int index = 0;  // in the pool
};

// Binds segments to buckets of a pool, round robin, so the bucket handed out is the one whose
// reduction started first.
class BucketPool {
 public:
  BucketPool(int buckets, int segments);

  std::optional<Bucket> bound(int segment) const { return bucket_of_[segment]; }
  // The next bucket not filling for a segment, in round-robin order (its last reduction may
  // still run: wait for it before writing); nullopt when every bucket is filling.
  std::optional<int> take_free();
  void bind(int segment, Bucket bucket);
  // The segment's reduction was launched: its bucket can be bound again.
  void unbind(int segment);
  int size() const { return static_cast<int>(segment_of_.size()); }
  int free_count() const;  // buckets not filling for any segment

 private:
  std::vector<std::optional<Bucket>> bucket_of_;  // per segment
  std::vector<int> segment_of_;                   // per pool bucket: segment, or -1
  int next_ = 0;
};

}  // namespace zrt
