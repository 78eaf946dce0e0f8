#include "tools/zrt-run/node_shape.h"

#include <cstdio>

#include <fmt/format.h>

namespace zrt {

std::string format_job_shape(const JobShape& shape) {
  return fmt::format("nnodes={} nproc_per_node={}", shape.nnodes, shape.nproc_per_node);
}

bool parse_job_shape(const std::string& text, JobShape* shape) {
  JobShape parsed;
  int consumed = 0;
  if (std::sscanf(text.c_str(), "nnodes=%d nproc_per_node=%d%n", &parsed.nnodes,
                  &parsed.nproc_per_node, &consumed) != 2 ||
      static_cast<size_t>(consumed) != text.size() || parsed.nnodes < 1 ||
      parsed.nproc_per_node < 1) {
    return false;
  }
  *shape = parsed;
  return true;
}

std::string job_shape_mismatch(const JobShape& served, const JobShape& mine) {
  if (served.nnodes == mine.nnodes && served.nproc_per_node == mine.nproc_per_node) return "";
  return fmt::format(
      "node 0 runs a job of {} ranks (--nnodes {} --nproc-per-node {}), this node was started "
      "with --nnodes {} --nproc-per-node {} ({} ranks)",
      served.world(), served.nnodes, served.nproc_per_node, mine.nnodes, mine.nproc_per_node,
      mine.world());
}

}  // namespace zrt
