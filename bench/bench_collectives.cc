// Collective bandwidth at 2 ranks (forked processes over UCX), beside single-thread memcpy of
// the same size measured in the same run.
//
//   build-*/bench/bench_collectives [max_mib=256] [ranks=2] [check|fingerprint]
//
// For each size S (total bytes: the reduce-scatter input, the all-gather output, the all-reduce
// buffer) it prints the time per call and nccl-tests' bus bandwidth: algbw = S / t; busbw =
// algbw * (N-1)/N for reduce_scatter and all_gather, * 2(N-1)/N for all_reduce. "vs memcpy" is
// busbw over the memcpy rate of S bytes (one thread, pre-touched buffers), measured by rank 0
// while the other ranks wait; "vs memcpyN" over the rate rank 0 gets while every rank copies S
// bytes at once, which is what the ranks of a collective share: on a machine whose memory
// bandwidth one core nearly saturates, memcpyN is about half of memcpy at N = 2. Buffers are
// allocated and touched once, before timing. "ceiling" is the bus bandwidth the memory system
// leaves a collective even if moving bytes between processes cost nothing: every rank at once
// runs a kernel that does only the reads and writes no algorithm can avoid (reduce-scatter:
// read its S input bytes once, write its S/N result with non-temporal stores; all-gather: read
// its S/N block, write the S output, or the N-1 other blocks in place; all-reduce: both), and
// the ceiling is the collective's busbw at that kernel's time (rank 0's). "vs ceiling" is busbw
// over it: how much of what this machine allows the collective reaches. ZRT_WINDOWS=0 runs the
// tagged-message rings instead of the window rings (collectives/ring_window.h), for comparison.
//
// "fingerprint" measures the default mismatch fingerprint the same way: both communicators
// without the checker, one without the fingerprint (EngineOptions::fingerprint) and one with it.
//
// "check" measures the collective-order checker instead, side by side in one run: every rank
// opens two communicators over the same ranks (own transport and engine each), one with the
// checker off and one with it on, and times the same calls on the same buffers on both,
// alternating off/on for 15 rounds per size and kind (about 16 MiB moved per round); it prints
// the best and the median time per call of each, and on/off - 1 (the checker's cost) for both,
// from 64 KiB up to max_mib. On a shared machine the best times are the steadier comparison.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench/file_exchange.h"
#include "collectives/algorithm_plan.h"
#include "collectives/collectives.h"
#include "kernels/reduce/reduce_kernels.h"
#include "collectives/stream_copy.h"
#include "lib/bootstrap/bootstrap.h"
#include "lib/core/settings.h"
#include "engine/engine.h"
#include "transports/transport.h"

namespace {

using Clock = std::chrono::steady_clock;

using bench::file_allgather;
using bench::file_free;
using bench::file_test;
using bench::FileExchange;

void check(const zrt::Status& status, const char* what) {
  if (!status.is_ok()) {
    std::fprintf(stderr, "bench_collectives: %s: %s\n", what, status.message().c_str());
    std::exit(1);
  }
}

double memcpy_gbps(size_t bytes) {
  std::vector<char> a(bytes, 1), b(bytes, 2);
  std::memcpy(b.data(), a.data(), bytes);  // warm
  int iterations = 0;
  const auto start = Clock::now();
  double elapsed = 0;
  do {
    std::memcpy(iterations % 2 ? a.data() : b.data(), iterations % 2 ? b.data() : a.data(), bytes);
    ++iterations;
    elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  } while (elapsed < 0.3 || iterations < 3);
  return static_cast<double>(bytes) * iterations / elapsed / 1e9;
}

// The unavoidable memory traffic of one rank in a collective over S bytes at N ranks (see the
// header), done with the collectives' own kernels: reduce_floor reads S and writes S/N,
// gather_floor reads S/N and writes S (or, in place, the N-1 blocks that are not its own).
// Results are written with non-temporal stores, as the collectives write large results.
constexpr size_t kFloorChunk = 16384;  // floats: a chunk's partial sum stays in L1/L2

void reduce_floor(const float* in, float* out, size_t block, int n) {
  std::vector<float> partial(kFloorChunk);
  for (size_t base = 0; base < block; base += kFloorChunk) {
    const size_t count = std::min(kFloorChunk, block - base);
    const float* first = in + base;
    for (int j = 1; j < n; ++j) {
      const bool last = j == n - 1;
      float* to = last ? out + base : partial.data();
      zrt::reduce_elements(ZRT_F32, zrt::ReduceOp::kSum, first,
                           in + static_cast<size_t>(j) * block + base, to, count, 1.0, 1.0, last);
      first = partial.data();
    }
  }
}

void gather_floor(const float* own, float* out, size_t block, int n, int rank, bool in_place) {
  for (size_t base = 0; base < block; base += kFloorChunk) {
    const size_t count = std::min(kFloorChunk, block - base);
    for (int j = 0; j < n; ++j) {
      if (in_place && j == rank) continue;
      zrt::stream_copy(out + static_cast<size_t>(j) * block + base, own + base,
                       count * sizeof(float));
    }
  }
}

// Seconds per call of the floor kernel of `kind` over S = bytes (every rank runs it at once).
double floor_seconds(zrt_coll_kind_t kind, bool in_place, size_t bytes, int n, int rank,
                     std::vector<char>& input, std::vector<char>& output) {
  const size_t block = bytes / sizeof(float) / static_cast<size_t>(n);
  const auto* in = reinterpret_cast<const float*>(input.data());
  auto* out = reinterpret_cast<float*>(output.data());
  auto once = [&] {
    if (kind != ZRT_COLL_ALL_GATHER) reduce_floor(in, out, block, n);
    if (kind != ZRT_COLL_REDUCE_SCATTER) {
      // All-reduce: its reduced block, then the gather of it in place.
      gather_floor(kind == ZRT_COLL_ALL_GATHER ? in : out + static_cast<size_t>(rank) * block, out,
                   block, n, rank, in_place);
    }
  };
  once();  // warm
  int iterations = 0;
  const auto start = Clock::now();
  double elapsed = 0;
  do {
    once();
    ++iterations;
    elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  } while (elapsed < 0.3 || iterations < 3);
  return elapsed / iterations;
}

// One communicator's pieces below the C API (transport, engine, one stream).
struct Endpoint {
  std::unique_ptr<zrt::Bootstrap> bootstrap;
  std::unique_ptr<zrt::Transport> transport;
  std::unique_ptr<zrt::ProgressEngine> engine;
  zrt::Stream* stream = nullptr;
};

void open_endpoint(FileExchange& exchange, int check_order, Endpoint* endpoint,
                   bool fingerprint = true) {
  const int rank = exchange.rank;
  const int size = exchange.size;
  zrt_oob_t oob{sizeof(zrt_oob_t),
                file_allgather,
                file_test,
                file_free,
                &exchange,
                rank,
                size,
                size > 0 ? rank : 0,
                size};
  check(zrt::create_oob_bootstrap(oob, 60000, &endpoint->bootstrap), "bootstrap");
  zrt::TransportOptions transport_options;
  check(zrt::create_ucx_transport(*endpoint->bootstrap, transport_options, &endpoint->transport),
        "transport");
  zrt::EngineOptions engine_options;
  engine_options.rank = rank;
  engine_options.size = size;
  engine_options.check_order = check_order;
  engine_options.fingerprint = fingerprint;
  // All ranks are forked on this host: windows as a communicator would choose them, unless
  // ZRT_WINDOWS=0 asks for the tagged-message path (for comparison).
  zrt::SettingValue windows;
  check(zrt::load_setting(zrt::SettingId::kWindows, &windows), "ZRT_WINDOWS");
  engine_options.peer_windows = size > 1 && windows.integer != 0;
  check(zrt::add_algorithm_plan(&engine_options), "ZRT_ALGO");
  check(zrt::create_progress_engine(*endpoint->transport, engine_options, &endpoint->engine),
        "engine");
  check(endpoint->engine->create_stream(ZRT_MEM_HOST, &endpoint->stream), "stream");
}

void sync_barrier(zrt::Stream& stream, int rank, int size) {
  zrt::CollectiveArgs args;
  args.kind = ZRT_COLL_BARRIER;
  check(zrt::enqueue_collective(stream, rank, size, args), "barrier");
  check(stream.synchronize(), "barrier");
}

// The checker's cost: the same calls timed on a communicator without and one with it. With
// `fingerprint`, the default fingerprint's instead (collectives/fingerprint_check.h): both
// communicators run without the checker, one without and one with the fingerprint.
void run_check_rank(const std::string& dir, int rank, int size, size_t max_mib, bool fingerprint) {
  FileExchange exchange{dir, rank, size, 0};
  Endpoint endpoints[2];
  if (fingerprint) {
    open_endpoint(exchange, 0, &endpoints[0], false);
    open_endpoint(exchange, 0, &endpoints[1], true);
  } else {
    open_endpoint(exchange, 0, &endpoints[0]);
    open_endpoint(exchange, 1, &endpoints[1]);
  }
  const size_t max_bytes = max_mib << 20;
  std::vector<char> input(max_bytes, 1), output(max_bytes, 2);
  if (rank == 0) {
    std::printf("%-16s %8s %10s %10s %9s %10s %10s %9s\n", "collective", "KiB", "best_off",
                "best_on", "cost", "med_off", "med_on", "cost");
  }
  struct Variant {
    const char* name;
    zrt_coll_kind_t kind;
  };
  const Variant variants[] = {{"reduce_scatter", ZRT_COLL_REDUCE_SCATTER},
                              {"all_gather", ZRT_COLL_ALL_GATHER},
                              {"all_reduce", ZRT_COLL_ALL_REDUCE}};
  constexpr int kRounds = 15;
  for (size_t bytes = size_t{64} << 10; bytes <= max_bytes; bytes *= 4) {
    const size_t elements = bytes / sizeof(float);
    for (const Variant& variant : variants) {
      zrt::CollectiveArgs args;
      args.kind = variant.kind;
      args.dtype = ZRT_F32;
      args.op = ZRT_SUM;
      args.sendbuf = input.data();
      args.recvbuf = output.data();
      args.count = variant.kind == ZRT_COLL_ALL_REDUCE ? elements : elements / size;
      const int iterations =
          std::max(2, static_cast<int>((size_t{16} << 20) / bytes));  // about 16 MiB per round
      std::vector<double> times[2];
      for (int round = -1; round < kRounds; ++round) {
        for (int mode = 0; mode < 2; ++mode) {
          Endpoint& endpoint = endpoints[(round + mode) % 2 == 0 ? 0 : 1];
          const int which = &endpoint == &endpoints[0] ? 0 : 1;
          sync_barrier(*endpoint.stream, rank, size);
          const auto start = Clock::now();
          for (int i = 0; i < iterations; ++i) {
            check(zrt::enqueue_collective(*endpoint.stream, rank, size, args), variant.name);
          }
          check(endpoint.stream->synchronize(), variant.name);
          const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
          if (round >= 0) times[which].push_back(seconds / iterations);  // round -1 warms up
        }
      }
      for (auto& list : times) std::sort(list.begin(), list.end());
      const double best_off = times[0][0], best_on = times[1][0];
      const double off = times[0][kRounds / 2], on = times[1][kRounds / 2];
      if (rank == 0) {
        std::printf("%-16s %8zu %10.1f %10.1f %+8.1f%% %10.1f %10.1f %+8.1f%%\n", variant.name,
                    bytes >> 10, best_off * 1e6, best_on * 1e6, 100.0 * (best_on / best_off - 1.0),
                    off * 1e6, on * 1e6, 100.0 * (on / off - 1.0));
        std::fflush(stdout);
      }
    }
  }
  const zrt::CommCounters& counters = endpoints[1].engine->counters();
  if (rank == 0) {
    std::printf("checker traffic (checked communicator, rank 0): %llu messages, %llu bytes\n",
                static_cast<unsigned long long>(counters.check_messages()),
                static_cast<unsigned long long>(counters.check_bytes()));
  }
  for (Endpoint& endpoint : endpoints) {
    sync_barrier(*endpoint.stream, rank, size);
    check(endpoint.engine->shutdown(), "shutdown");
  }
}

void run_rank(const std::string& dir, int rank, int size, size_t max_mib) {
  FileExchange exchange{dir, rank, size, 0};
  Endpoint endpoint;
  open_endpoint(exchange, -1, &endpoint);
  std::unique_ptr<zrt::ProgressEngine>& engine = endpoint.engine;
  zrt::Stream* stream = endpoint.stream;

  const size_t max_bytes = max_mib << 20;
  std::vector<char> input(max_bytes, 1), output(max_bytes, 2);
  std::vector<float> seed(max_bytes / 4);
  for (size_t i = 0; i < seed.size(); ++i) seed[i] = static_cast<float>(i % 7);
  std::memcpy(input.data(), seed.data(), max_bytes);

  auto barrier = [&] {
    zrt::CollectiveArgs args;
    args.kind = ZRT_COLL_BARRIER;
    check(zrt::enqueue_collective(*stream, rank, size, args), "barrier");
    check(stream->synchronize(), "barrier");
  };
  if (rank == 0) {
    std::printf("%-22s %6s %10s %8s %12s %10s %12s %10s %9s %10s\n", "collective", "MiB", "time_us",
                "busbw", "memcpy_GB/s", "vs_memcpy", "memcpyN_GB/s", "vs_memcpyN", "ceiling",
                "vs_ceiling");
  }
  for (size_t mib = 1; mib <= max_mib; mib *= 4) {
    const size_t bytes = mib << 20;
    const size_t elements = bytes / sizeof(float);
    // memcpy first, then one untimed pass over every variant, so that no variant pays for
    // waking the other rank from its wait at the barrier.
    // memcpy_rate: rank 0 alone (the yardstick); concurrent_rate: every rank at once,
    // as in a collective, where the ranks share the memory system (rank 0's rate).
    double memcpy_rate = 0, concurrent_rate = 0;
    barrier();
    if (rank == 0) memcpy_rate = memcpy_gbps(bytes);
    barrier();
    concurrent_rate = memcpy_gbps(bytes);
    barrier();
    struct Variant {
      const char* name;
      zrt_coll_kind_t kind;
      bool in_place;
      double factor;
    };
    const double ring = static_cast<double>(size - 1) / size;
    const Variant variants[] = {
        {"reduce_scatter", ZRT_COLL_REDUCE_SCATTER, false, ring},
        {"reduce_scatter(inpl)", ZRT_COLL_REDUCE_SCATTER, true, ring},
        {"all_gather", ZRT_COLL_ALL_GATHER, false, ring},
        {"all_gather(inpl)", ZRT_COLL_ALL_GATHER, true, ring},
        {"all_reduce(inpl)", ZRT_COLL_ALL_REDUCE, true, 2 * ring},
    };
    std::vector<double> ceilings;  // per variant, in order
    for (int pass = 0; pass < 2; ++pass)
      for (const Variant& variant : variants) {
        const bool warm_pass = pass == 0;
        zrt::CollectiveArgs args;
        args.kind = variant.kind;
        args.dtype = ZRT_F32;
        args.op = ZRT_SUM;
        const size_t block = elements / size;
        char* in = input.data();
        char* out = output.data();
        switch (variant.kind) {
          case ZRT_COLL_REDUCE_SCATTER:
            args.count = block;
            args.sendbuf = in;
            args.recvbuf = variant.in_place ? in + rank * block * 4 : out;
            break;
          case ZRT_COLL_ALL_GATHER:
            args.count = block;
            args.sendbuf = variant.in_place ? out + rank * block * 4 : in;
            args.recvbuf = out;
            break;
          default:
            args.count = elements;
            args.sendbuf = out;
            args.recvbuf = out;
            break;
        }
        if (warm_pass) {
          // The ceiling of this variant: its floor kernel on every rank at once.
          barrier();
          ceilings.push_back(
              static_cast<double>(bytes) * variant.factor / 1e9 /
              floor_seconds(variant.kind, variant.in_place, bytes, size, rank, input, output));
          barrier();
          for (int i = 0; i < 2; ++i) {
            check(zrt::enqueue_collective(*stream, rank, size, args), "warm");
          }
          check(stream->synchronize(), "warm");
          continue;
        }
        barrier();
        int iterations = std::max(10, static_cast<int>(256 / mib));
        const auto start = Clock::now();
        for (int i = 0; i < iterations; ++i) {
          check(zrt::enqueue_collective(*stream, rank, size, args), variant.name);
        }
        check(stream->synchronize(), variant.name);
        const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
        const double per_call = seconds / iterations;
        const double busbw = static_cast<double>(bytes) / per_call / 1e9 * variant.factor;
        if (rank == 0) {
          const double ceiling = ceilings[static_cast<size_t>(&variant - variants)];
          std::printf("%-22s %6zu %10.1f %8.2f %12.2f %9.0f%% %12.2f %9.0f%% %9.2f %9.0f%%\n",
                      variant.name, mib, per_call * 1e6, busbw, memcpy_rate,
                      100.0 * busbw / memcpy_rate, concurrent_rate, 100.0 * busbw / concurrent_rate,
                      ceiling, 100.0 * busbw / ceiling);
          std::fflush(stdout);
        }
      }
  }
  barrier();
  check(engine->shutdown(), "shutdown");
}

}  // namespace

int main(int argc, char** argv) {
  const size_t max_mib = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 256;
  const int size = argc > 2 ? std::atoi(argv[2]) : 2;
  const bool fingerprint_mode = argc > 3 && std::strcmp(argv[3], "fingerprint") == 0;
  const bool check_mode = fingerprint_mode || (argc > 3 && std::strcmp(argv[3], "check") == 0);
  char dir_template[] = "/tmp/zrt-bench-XXXXXX";
  if (mkdtemp(dir_template) == nullptr) {
    std::perror("mkdtemp");
    return 1;
  }
  const std::string dir = dir_template;
  std::vector<pid_t> pids;
  for (int rank = 0; rank < size; ++rank) {
    const pid_t pid = fork();
    if (pid == 0) {
      if (check_mode) {
        run_check_rank(dir, rank, size, max_mib, fingerprint_mode);
      } else {
        run_rank(dir, rank, size, max_mib);
      }
      std::fflush(stdout);
      _exit(0);
    }
    pids.push_back(pid);
  }
  int failures = 0;
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    failures += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  std::filesystem::remove_all(dir);
  return failures == 0 ? 0 : 1;
}
