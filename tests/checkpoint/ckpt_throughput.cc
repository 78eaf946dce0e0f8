// Save and load throughput of sharded checkpoints, per rank, at a realistic size.
//
//   ckpt_throughput [--ranks N] [--mib-per-rank M] [--dir D] [--drop-caches]
//
// A stage 3 model of 8 equal units is sized so that each rank holds M MiB of checkpointed state
// (f32 master + two Adam slots = 12 bytes per shard element). One rank group saves (timed from
// the call to its return: writes, fsyncs, renames, the manifest), a second group of the same N
// loads (reads, checksum verification, commit); with --drop-caches the page cache is dropped in
// between (needs root), so the load reads from the disk. Each rank prints its own GB/s.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "tests/checkpoint/checkpoint_test_driver.h"
#include "tests/harness/multirank.h"
#include "zrt/zrt.h"

namespace {

using zrt::testing::ckpt_make_comm;

struct Setup {
  int ranks = 2;
  double mib_per_rank = 256;
  std::string dir;
  bool drop_caches = false;
};

bool build(zrt_comm_t comm, const Setup& s, zrt_partition_t* pm, size_t* shard_bytes) {
  zrt_partition_config_t config = ZRT_PARTITION_CONFIG_INIT;
  config.stage = 3;
  config.persistence_threshold = 0;
  if (zrt_partition_create(comm, &config, pm) != ZRT_SUCCESS) return false;
  const size_t shard_elements = static_cast<size_t>(s.mib_per_rank * (1 << 20) / 12);
  const size_t per_unit = shard_elements * static_cast<size_t>(s.ranks) / 8;
  std::vector<int> ids;
  for (int u = 0; u < 8; ++u) {
    int unit = -1, param = -1;
    if (zrt_partition_add_unit(*pm, "block", &unit) != ZRT_SUCCESS) return false;
    if (zrt_partition_add_param(*pm, unit, "w", per_unit, 0, &param) != ZRT_SUCCESS) return false;
    ids.push_back(param);
  }
  if (zrt_partition_finalize(*pm) != ZRT_SUCCESS) return false;
  std::vector<float> values(per_unit);
  for (size_t i = 0; i < per_unit; ++i) values[i] = static_cast<float>(i % 1000) * 1e-3f;
  for (int id : ids) {
    if (zrt_partition_load_param(*pm, id, values.data(), ZRT_F32) != ZRT_SUCCESS) return false;
  }
  *shard_bytes = per_unit * 8 / static_cast<size_t>(s.ranks) * 12;
  return true;
}

void phase(const Setup& s, bool save) {
  const auto outcomes = zrt::testing::run_ranks(s.ranks, [&](int rank, int size) {
    zrt_comm_t comm = ckpt_make_comm(rank, size);
    zrt_partition_t pm = nullptr;
    size_t bytes = 0;
    if (comm == nullptr || !build(comm, s, &pm, &bytes)) {
      std::fprintf(stderr, "rank %d: setup failed: %s\n", rank, zrt_last_error());
      std::exit(1);
    }
    zrt_barrier(comm, nullptr);
    zrt_stream_synchronize(nullptr);
    const auto start = std::chrono::steady_clock::now();
    const zrt_status_t status =
        save ? zrt_partition_save(pm, s.dir.c_str()) : zrt_partition_load(pm, s.dir.c_str());
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (status != ZRT_SUCCESS) {
      std::fprintf(stderr, "rank %d: %s failed: %s\n", rank, save ? "save" : "load",
                   zrt_last_error());
      std::exit(1);
    }
    std::printf("%s rank %d: %.1f MiB in %.3f s = %.2f GB/s per rank\n", save ? "save" : "load",
                rank, bytes / 1048576.0, seconds, bytes / seconds / 1e9);
    std::fflush(stdout);
    zrt_partition_destroy(pm);
    zrt_comm_destroy(comm);
  });
  for (const auto& outcome : outcomes) {
    if (!outcome.passed()) {
      std::fprintf(stderr, "%s\n", outcome.describe().c_str());
      std::exit(1);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  Setup s;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--ranks" && i + 1 < argc) {
      s.ranks = std::atoi(argv[++i]);
    } else if (flag == "--mib-per-rank" && i + 1 < argc) {
      s.mib_per_rank = std::atof(argv[++i]);
    } else if (flag == "--dir" && i + 1 < argc) {
      s.dir = argv[++i];
    } else if (flag == "--drop-caches") {
      s.drop_caches = true;
    } else {
      std::fprintf(stderr,
                   "usage: ckpt_throughput [--ranks N] [--mib-per-rank M] [--dir D] "
                   "[--drop-caches]\n");
      return 2;
    }
  }
  if (s.ranks < 1 || s.mib_per_rank <= 0) return 2;
  const bool temporary = s.dir.empty();
  if (temporary) s.dir = zrt::testing::ckpt_temp_dir();
  std::printf("checkpoint throughput: %d ranks, %.0f MiB of state per rank, folder %s\n", s.ranks,
              s.mib_per_rank, s.dir.c_str());
  phase(s, true);
  if (s.drop_caches) {
    ::sync();
    std::ofstream drop("/proc/sys/vm/drop_caches");
    drop << "3\n";
    std::printf("page cache %s\n", drop.good() ? "dropped" : "NOT dropped (needs root)");
  }
  phase(s, false);
  if (temporary) zrt::testing::ckpt_remove_tree(s.dir);
  return 0;
}
