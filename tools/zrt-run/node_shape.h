// What every node of a multi-node zrt-run job must agree on, as node 0 publishes it in the
// job's store and each joining node checks it (pure text functions, unit-tested).
#pragma once

#include <string>

namespace zrt {

struct JobShape {
  int nnodes = 1;
  int nproc_per_node = 1;
  int world() const { return nnodes * nproc_per_node; }
};

// "nnodes=2 nproc_per_node=4"
std::string format_job_shape(const JobShape& shape);
// false when `text` is not what format_job_shape writes.
bool parse_job_shape(const std::string& text, JobShape* shape);

// "" when a node started as `mine` may join the job `served`; else why not, naming the options.
std::string job_shape_mismatch(const JobShape& served, const JobShape& mine);

// Global rank of local rank `local` on node `node_rank` (nodes hold consecutive ranks).
inline int global_rank(const JobShape& shape, int node_rank, int local) {
  return node_rank * shape.nproc_per_node + local;
}

}  // namespace zrt
