// The measurement loop, per (collective, dtype, op, size) and per placement:
//
//   warm-up  -w calls, then wait              (connections, caches, first-touch are paid here)
//   barrier  so that all ranks start together
//   timed    -n calls back to back (or each waited for, with -z 1), then one wait;
//            time per call = elapsed / n on each rank, then combined over ranks (-a)
//   check    with -c 1: fill inputs with a known pattern, poison the output, one more call,
//            count wrong elements; summed over ranks
//
// Buffers are allocated once at the largest size and touched before the sweep, as nccl-tests
// does: on this machine first touch of fresh memory costs ~11 µs per page, which would
// otherwise dominate the first iterations of every size.
#include "tools/zrt-bench/bench_runner.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>

#include <fmt/format.h>

#include "tools/common/progress.h"
#include "tools/common/topology.h"
#include "tools/common/units.h"
#include "tools/zrt-bench/bench_data.h"
#include "zrt/zrt.h"

#if defined(ZRT_HAVE_CUDA)
#include <cuda_runtime.h>
#endif

namespace zrt::bench {
namespace {

Status check_zrt(zrt_status_t status, const char* call) {
  if (status == ZRT_SUCCESS) return Status::ok();
  return Status(
      status, fmt::format("{} failed: {} ({})", call, zrt_last_error(), zrt_status_string(status)));
}

#define ZRT_BENCH_CALL(expr) ZRT_RETURN_IF_ERROR(check_zrt((expr), #expr))

// A buffer of one memory kind with a host staging copy for fills and checks.
class Buffer {
 public:
  Buffer() = default;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() {
#if defined(ZRT_HAVE_CUDA)
    if (kind_ == ZRT_MEM_CUDA && data_ != nullptr) cudaFree(data_);
#endif
    // A registered buffer is the communicator's, freed with it (zrt_comm_destroy).
    if (kind_ == ZRT_MEM_HOST && !registered_) std::free(data_);
    std::free(staging_);
  }

  // `registered` (host only): from zrt_mem_alloc on `comm`, as nccl-tests' -R registers.
  Status allocate(zrt_mem_kind_t kind, size_t bytes, const char* name, zrt_comm_t comm = nullptr,
                  bool registered = false) {
    kind_ = kind;
    bytes_ = bytes;
    registered_ = registered;
    if (posix_memalign(&staging_, 4096, bytes) != 0) {
      return Status::error(ZRT_OUT_OF_MEMORY, "cannot allocate {} bytes of host memory for {}",
                           bytes, name);
    }
    std::memset(staging_, 0, bytes);
    if (kind == ZRT_MEM_HOST && registered) {
      ZRT_BENCH_CALL(zrt_mem_alloc(comm, std::max<size_t>(bytes, 1), &data_));
      return Status::ok();  // zeroed and touched by zrt
    }
    if (kind == ZRT_MEM_HOST) {
      if (posix_memalign(&data_, 4096, bytes) != 0) {
        return Status::error(ZRT_OUT_OF_MEMORY, "cannot allocate {} bytes of host memory for {}",
                             bytes, name);
      }
      std::memset(data_, 0, bytes);  // first touch now, not inside the timed loop
      return Status::ok();
    }
#if defined(ZRT_HAVE_CUDA)
    cudaError_t err = cudaMalloc(&data_, bytes);
    if (err != cudaSuccess) {
      data_ = nullptr;
      return Status::error(ZRT_OUT_OF_MEMORY, "cudaMalloc of {} bytes for {}: {}", bytes, name,
                           cudaGetErrorString(err));
    }
    err = cudaMemset(data_, 0, bytes);
    if (err != cudaSuccess) {
      return Status::error(ZRT_SYSTEM_ERROR, "cudaMemset of {}: {}", name, cudaGetErrorString(err));
    }
    return Status::ok();
#else
    return Status::error(ZRT_UNSUPPORTED,
                         "-m cuda: this zrt-bench was built without CUDA; rebuild zrt with CUDA "
                         "and NCCL (meson -Dcuda=enabled -Dnccl=enabled) or use -m host");
#endif
  }

  char* data() {
    return static_cast<char*>(data_);
  }
  char* staging() {
    return static_cast<char*>(staging_);
  }

  // Copies [offset, offset + bytes) between the staging copy and the real buffer.
  Status upload(size_t offset, size_t bytes) {
    return copy(offset, bytes, true);
  }
  Status download(size_t offset, size_t bytes) {
    return copy(offset, bytes, false);
  }

 private:
  Status copy(size_t offset, size_t bytes, bool to_device) {
    if (offset + bytes > bytes_) {
      return Status::error(ZRT_INTERNAL_ERROR, "buffer copy [{}, {}) beyond its {} bytes", offset,
                           offset + bytes, bytes_);
    }
    char* device = data() + offset;
    char* host = staging() + offset;
    if (kind_ == ZRT_MEM_HOST) {
      if (to_device)
        std::memcpy(device, host, bytes);
      else
        std::memcpy(host, device, bytes);
      return Status::ok();
    }
#if defined(ZRT_HAVE_CUDA)
    cudaError_t err = cudaMemcpy(to_device ? static_cast<void*>(device) : host,
                                 to_device ? static_cast<void*>(host) : device, bytes,
                                 to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost);
    if (err != cudaSuccess) {
      return Status::error(ZRT_SYSTEM_ERROR, "cudaMemcpy: {}", cudaGetErrorString(err));
    }
#endif
    return Status::ok();
  }

  zrt_mem_kind_t kind_ = ZRT_MEM_HOST;
  size_t bytes_ = 0;
  void* data_ = nullptr;
  void* staging_ = nullptr;
  bool registered_ = false;
};

struct RankIdentity {
  int32_t pid;
  char host[60];
};

class Runner {
 public:
  explicit Runner(const BenchOptions& options) : options_(options) {}
  ~Runner() {
    // Streams first, then the communicator; errors here cannot change the results printed.
    if (ctrl_ != nullptr && ctrl_ != stream_) (void)zrt_stream_destroy(ctrl_);
    if (stream_ != nullptr) (void)zrt_stream_destroy(stream_);
    if (comm_ != nullptr) (void)zrt_comm_destroy(comm_);
  }

  Status run(std::vector<BenchRow>* rows, RunInfo* info, bool* is_rank0);

 private:
  Status setup(RunInfo* info);
  Status run_point(Coll coll, zrt_dtype_t dtype, zrt_op_t op, const CollShape& shape, bool in_place,
                   Measure* measure);
  Status issue(Coll coll, zrt_dtype_t dtype, zrt_op_t op, uint64_t count, const void* send,
               void* recv);
  Status prepare_check(Coll coll, zrt_dtype_t dtype, zrt_op_t op, uint64_t count, bool in_place);
  Status agree(double local_time_us, int64_t local_wrong, double* time_us, int64_t* wrong);

  const BenchOptions& options_;
  zrt_comm_t comm_ = nullptr;
  zrt_stream_t stream_ = nullptr;
  zrt_stream_t ctrl_ = nullptr;  // host stream for agreeing on times and counts
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
  Buffer send_, recv_;
  double* ctrl_f64_ = nullptr;
  Buffer ctrl_buffer_;
};

Status Runner::setup(RunInfo* info) {
  zrt_comm_config_t config = ZRT_COMM_CONFIG_INIT;
  config.name = "zrt-bench";
  ZRT_BENCH_CALL(zrt_comm_init_env(&config, &comm_));
  ZRT_BENCH_CALL(zrt_comm_rank(comm_, &rank_));
  ZRT_BENCH_CALL(zrt_comm_size(comm_, &size_));
  ZRT_BENCH_CALL(zrt_comm_local_rank(comm_, &local_rank_));
  ZRT_BENCH_CALL(zrt_comm_local_size(comm_, &local_size_));
  if (options_.root >= size_) {
    return Status::invalid_argument("-r {}: the root must be a rank below {} (the number of ranks)",
                                    options_.root, size_);
  }
#if defined(ZRT_HAVE_CUDA)
  if (options_.mem_kind == ZRT_MEM_CUDA) {
    int devices = 0;
    cudaError_t err = cudaGetDeviceCount(&devices);
    if (err != cudaSuccess || devices == 0) {
      return Status::error(ZRT_UNSUPPORTED, "-m cuda: no CUDA device visible on this host ({})",
                           err != cudaSuccess ? cudaGetErrorString(err) : "0 devices");
    }
    err = cudaSetDevice(local_rank_ % devices);
    if (err != cudaSuccess) {
      return Status::error(ZRT_SYSTEM_ERROR, "cudaSetDevice({}): {}", local_rank_ % devices,
                           cudaGetErrorString(err));
    }
  }
#endif
  // Streams are created in the same order on every rank (zrt pairs stream k with stream k).
  ZRT_BENCH_CALL(zrt_stream_create(comm_, options_.mem_kind, &stream_));
  if (options_.mem_kind == ZRT_MEM_HOST) {
    ctrl_ = stream_;
  } else {
    ZRT_BENCH_CALL(zrt_stream_create(comm_, ZRT_MEM_HOST, &ctrl_));
  }
  ZRT_RETURN_IF_ERROR(ctrl_buffer_.allocate(ZRT_MEM_HOST, 4096, "control values"));
  ctrl_f64_ = reinterpret_cast<double*>(ctrl_buffer_.data());

  // Who is where: the "Using ranks" lines and the host count.
  RankIdentity self{};
  self.pid = static_cast<int32_t>(getpid());
  gethostname(self.host, sizeof(self.host) - 1);
  std::vector<RankIdentity> all(static_cast<size_t>(size_));
  ZRT_BENCH_CALL(zrt_all_gather(comm_, &self, all.data(), sizeof(RankIdentity), ZRT_U8, ctrl_));
  ZRT_BENCH_CALL(zrt_stream_synchronize(ctrl_));
  std::set<std::string> hosts;
  info->rank_lines.clear();
  for (int r = 0; r < size_; ++r) {
    const RankIdentity& id = all[static_cast<size_t>(r)];
    hosts.insert(id.host);
    info->rank_lines.push_back(fmt::format("Rank {:2} Pid {:7} on {:>10}", r, id.pid, id.host));
  }
  info->ranks = size_;
  info->local_ranks = local_size_;
  info->hosts = static_cast<int>(hosts.size());
  info->hostname = self.host;
  tools::Topology topo;
  if (rank_ == 0 && tools::discover_topology(&topo).is_ok()) {
    info->cores = static_cast<int>(topo.cores.size());
    info->numa_nodes = static_cast<int>(topo.numa_nodes.size());
  }

  // One allocation each at the largest size any collective × dtype of the sweep needs.
  uint64_t largest = 0;
  for (Coll coll : options_.collectives) {
    for (zrt_dtype_t dtype : options_.dtypes) {
      largest = std::max(largest, coll_shape(coll, options_.max_bytes, dtype, size_).bytes);
    }
  }
  ZRT_RETURN_IF_ERROR(
      send_.allocate(options_.mem_kind, largest, "the send buffer", comm_, options_.registered));
  ZRT_RETURN_IF_ERROR(
      recv_.allocate(options_.mem_kind, largest, "the receive buffer", comm_, options_.registered));
  return Status::ok();
}

Status Runner::issue(Coll coll, zrt_dtype_t dtype, zrt_op_t op, uint64_t count, const void* send,
                     void* recv) {
  switch (coll) {
    case Coll::kReduceScatter:
      ZRT_BENCH_CALL(zrt_reduce_scatter(comm_, send, recv, count, dtype, op, stream_));
      break;
    case Coll::kAllGather:
      ZRT_BENCH_CALL(zrt_all_gather(comm_, send, recv, count, dtype, stream_));
      break;
    case Coll::kAllReduce:
      ZRT_BENCH_CALL(zrt_all_reduce(comm_, send, recv, count, dtype, op, stream_));
      break;
    case Coll::kBroadcast:
      ZRT_BENCH_CALL(zrt_broadcast(comm_, send, recv, count, dtype, options_.root, stream_));
      break;
    case Coll::kReduce:
      ZRT_BENCH_CALL(zrt_reduce(comm_, send, recv, count, dtype, op, options_.root, stream_));
      break;
  }
  return Status::ok();
}

// Fills the inputs of one checked call (see bench_data.h) and poisons the outputs.
Status Runner::prepare_check(Coll coll, zrt_dtype_t dtype, zrt_op_t op, uint64_t count,
                             bool in_place) {
  const size_t tb = dtype_bytes(dtype);
  const uint64_t n = static_cast<uint64_t>(size_);
  const uint64_t r = static_cast<uint64_t>(rank_);
  const bool root = rank_ == options_.root;
  switch (coll) {
    case Coll::kReduceScatter: {
      Buffer& in = in_place ? recv_ : send_;
      fill_input(dtype, op, rank_, 0, n * count, in.staging());
      ZRT_RETURN_IF_ERROR(in.upload(0, n * count * tb));
      if (!in_place) {
        fill_poison(dtype, count, recv_.staging());
        ZRT_RETURN_IF_ERROR(recv_.upload(0, count * tb));
      }
      break;
    }
    case Coll::kAllGather: {
      fill_poison(dtype, n * count, recv_.staging());
      if (in_place) {
        fill_input(dtype, op, rank_, 0, count, recv_.staging() + r * count * tb);
      } else {
        fill_input(dtype, op, rank_, 0, count, send_.staging());
        ZRT_RETURN_IF_ERROR(send_.upload(0, count * tb));
      }
      ZRT_RETURN_IF_ERROR(recv_.upload(0, n * count * tb));
      break;
    }
    case Coll::kAllReduce:
    case Coll::kReduce:
    case Coll::kBroadcast: {
      // Broadcast's non-root ranks get poison where the root's data must land.
      const bool poison_in = coll == Coll::kBroadcast && !root && in_place;
      Buffer& in = in_place ? recv_ : send_;
      if (poison_in)
        fill_poison(dtype, count, in.staging());
      else
        fill_input(dtype, op, rank_, 0, count, in.staging());
      ZRT_RETURN_IF_ERROR(in.upload(0, count * tb));
      if (!in_place) {
        fill_poison(dtype, count, recv_.staging());
        ZRT_RETURN_IF_ERROR(recv_.upload(0, count * tb));
      }
      break;
    }
  }
  return Status::ok();
}

Status Runner::agree(double local_time_us, int64_t local_wrong, double* time_us, int64_t* wrong) {
  double* t = ctrl_f64_;
  int64_t* w = reinterpret_cast<int64_t*>(ctrl_f64_ + 1);
  *t = local_time_us;
  *w = local_wrong;
  switch (options_.average) {
    case Average::kRank0:
      ZRT_BENCH_CALL(zrt_broadcast(comm_, t, t, 1, ZRT_F64, 0, ctrl_));
      break;
    case Average::kMean:
      ZRT_BENCH_CALL(zrt_all_reduce(comm_, t, t, 1, ZRT_F64, ZRT_SUM, ctrl_));
      break;
    case Average::kMin:
      ZRT_BENCH_CALL(zrt_all_reduce(comm_, t, t, 1, ZRT_F64, ZRT_MIN, ctrl_));
      break;
    case Average::kMax:
      ZRT_BENCH_CALL(zrt_all_reduce(comm_, t, t, 1, ZRT_F64, ZRT_MAX, ctrl_));
      break;
  }
  ZRT_BENCH_CALL(zrt_all_reduce(comm_, w, w, 1, ZRT_I64, ZRT_SUM, ctrl_));
  ZRT_BENCH_CALL(zrt_stream_synchronize(ctrl_));
  *time_us = options_.average == Average::kMean ? *t / size_ : *t;
  *wrong = *w;
  return Status::ok();
}

Status Runner::run_point(Coll coll, zrt_dtype_t dtype, zrt_op_t op, const CollShape& shape,
                         bool in_place, Measure* measure) {
  const size_t tb = dtype_bytes(dtype);
  const uint64_t count = shape.count;
  const size_t slot = static_cast<size_t>(rank_) * count * tb;
  const void* send = send_.data();
  void* recv = recv_.data();
  if (in_place) {
    send = recv_.data();
    if (coll == Coll::kReduceScatter) recv = recv_.data() + slot;
    if (coll == Coll::kAllGather) send = recv_.data() + slot;
  }
  for (int i = 0; i < options_.warmup; ++i)
    ZRT_RETURN_IF_ERROR(issue(coll, dtype, op, count, send, recv));
  ZRT_BENCH_CALL(zrt_barrier(comm_, stream_));
  ZRT_BENCH_CALL(zrt_stream_synchronize(stream_));

  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < options_.iters; ++i) {
    ZRT_RETURN_IF_ERROR(issue(coll, dtype, op, count, send, recv));
    if (options_.blocking) ZRT_BENCH_CALL(zrt_stream_synchronize(stream_));
  }
  ZRT_BENCH_CALL(zrt_stream_synchronize(stream_));
  double local_us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() /
      options_.iters;

  int64_t local_wrong = -1;
  if (options_.check) {
    ZRT_RETURN_IF_ERROR(prepare_check(coll, dtype, op, count, in_place));
    ZRT_RETURN_IF_ERROR(issue(coll, dtype, op, count, send, recv));
    ZRT_BENCH_CALL(zrt_stream_synchronize(stream_));
    size_t out_bytes =
        coll == Coll::kAllGather ? static_cast<size_t>(size_) * count * tb : count * tb;
    size_t out_offset = static_cast<const char*>(recv) - recv_.data();
    ZRT_RETURN_IF_ERROR(recv_.download(out_offset, out_bytes));
    local_wrong = count_wrong(coll, dtype, op, rank_, size_, options_.root, count,
                              recv_.staging() + out_offset);
  }
  double time_us = 0;
  int64_t wrong = 0;
  ZRT_RETURN_IF_ERROR(agree(local_us, local_wrong, &time_us, &wrong));
  *measure = make_measure(coll, shape.bytes, size_, time_us, options_.check ? wrong : -1);
  return Status::ok();
}

Status Runner::run(std::vector<BenchRow>* rows, RunInfo* info, bool* is_rank0) {
  ZRT_RETURN_IF_ERROR(setup(info));
  *is_rank0 = rank_ == 0;
  const bool print = rank_ == 0 && options_.json_path != "-";
  if (print) fmt::print("{}", format_settings(options_, *info));

  const std::vector<uint64_t> sizes = sweep_sizes(options_);
  size_t total =
      options_.collectives.size() * options_.dtypes.size() * options_.ops.size() * sizes.size();
  size_t done = 0;
  tools::ProgressLine progress(stderr, rank_ == 0 && options_.progress);
  for (Coll coll : options_.collectives) {
    std::vector<BenchRow> coll_rows;
    if (print) fmt::print("# Collective: {}\n{}", coll_name(coll), format_table_header());
    std::fflush(stdout);
    for (zrt_dtype_t dtype : options_.dtypes) {
      // Reductions without ops (all_gather, broadcast) run once per dtype, not once per op.
      std::vector<zrt_op_t> ops = coll_has_op(coll) ? options_.ops : std::vector<zrt_op_t>{ZRT_SUM};
      for (zrt_op_t op : ops) {
        if (op == ZRT_AVG && !dtype_is_float(dtype)) {
          if (print)
            fmt::print("# (avg skipped for {}: zrt averages floating types only)\n",
                       dtype_display_name(dtype));
          done += sizes.size();
          continue;
        }
        uint64_t previous = 0;
        for (uint64_t requested : sizes) {
          ++done;
          CollShape shape = coll_shape(coll, requested, dtype, size_);
          if (shape.bytes == previous) continue;  // rounding to whole elements merged two sizes
          previous = shape.bytes;
          progress.update(done - 1, total,
                          fmt::format("{} {} {}", coll_name(coll), dtype_display_name(dtype),
                                      tools::format_size(shape.bytes)));
          BenchRow row;
          row.coll = coll;
          row.bytes = shape.bytes;
          row.count = shape.count;
          row.dtype = dtype;
          row.op = op;
          row.root = options_.root;
          ZRT_RETURN_IF_ERROR(run_point(coll, dtype, op, shape, false, &row.out_of_place)
                                  .with_context(fmt::format("{} of {} bytes (out-of-place)",
                                                            coll_name(coll), shape.bytes)));
          ZRT_RETURN_IF_ERROR(run_point(coll, dtype, op, shape, true, &row.in_place)
                                  .with_context(fmt::format("{} of {} bytes (in-place)",
                                                            coll_name(coll), shape.bytes)));
          if (print) {
            progress.finish();
            fmt::print("{}", format_row(row));
            std::fflush(stdout);
          }
          coll_rows.push_back(row);
        }
      }
    }
    progress.finish();
    if (print) {
      int64_t wrong = total_wrong(coll_rows);
      if (wrong < 0) {
        fmt::print("# Out of bounds values : not checked (validation off: -c 0)\n");
      } else {
        fmt::print("# Out of bounds values : {} {}\n", wrong, wrong > 0 ? "FAILED" : "OK");
      }
      fmt::print("# Avg bus bandwidth    : {:.4g}\n#\n", average_busbw(coll_rows));
    }
    rows->insert(rows->end(), coll_rows.begin(), coll_rows.end());
  }
  return Status::ok();
}

}  // namespace

Status run_benchmark(const BenchOptions& options, std::vector<BenchRow>* rows, RunInfo* info,
                     bool* is_rank0) {
  Runner runner(options);
  return runner.run(rows, info, is_rank0);
}

}  // namespace zrt::bench
