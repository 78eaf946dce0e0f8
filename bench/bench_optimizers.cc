// The fused optimizers' throughput beside the machine's copy bandwidth, measured in the same
// run. Parameters per second for AdamW on f32 master with a bf16 parameter copy at 1 M, 16 M and
// 128 M elements, on 1 thread and on every CPU of the affinity mask (a zrt_optimizer_pool_t),
// and for Adam, SGD with momentum and Lion at 16 M.
//
// Bytes per element (what one step must move at least, counted for the bandwidth bound):
//   AdamW/Adam: read master, grad, exp_avg, exp_avg_sq (16), write master, exp_avg,
//               exp_avg_sq (12), write the bf16 copy (2): 30
//   SGD + momentum: read master, grad, buf (12), write master, buf (8), copy (2): 22
//   Lion: read master, grad, exp_avg (12), write master, exp_avg (8), copy (2): 22
// The copy bandwidth is BM_Memcpy's (bytes read + bytes written per second, 256 MiB buffers,
// split across the same threads). Counters: params_per_s; moved_GBps = params_per_s x bytes
// per element; after each optimizer row its share of the copy bandwidth, the best memcpy rate
// this run measured (before the optimizer rows) on at most as many threads. 1 M elements fit
// in the caches, so only the larger sizes are bound by memory. Example:
//   build/bench/bench_optimizers --benchmark_min_time=0.3
// bench/torch_adamw.py runs this next to torch.optim.AdamW and prints the ratio.
#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <vector>

#include <benchmark/benchmark.h>

#include "kernels/optim/thread_pool.h"
#include "zrt/zrt.h"

namespace {

constexpr size_t kCopyBytes = size_t{256} << 20;

int all_threads() {
  return zrt::optim::affinity_cpu_count();
}

// The best copy rate (GB/s moved) seen per thread count; BM_Memcpy fills it.
std::map<int, double>& copy_rates() {
  static std::map<int, double> rates;
  return rates;
}

// One pool per thread count, made before timing.
zrt_optimizer_pool_t pool_of(int threads) {
  static std::map<int, zrt_optimizer_pool_t> pools;
  auto it = pools.find(threads);
  if (it != pools.end()) return it->second;
  zrt_optimizer_pool_t pool = nullptr;
  if (zrt_optimizer_pool_create(threads, &pool) != ZRT_SUCCESS) return nullptr;
  pools[threads] = pool;
  return pool;
}

void BM_Memcpy(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  std::vector<char> src(kCopyBytes, 1), dst(kCopyBytes, 2);
  std::unique_ptr<zrt::optim::ThreadPool> pool;
  if (!zrt::optim::ThreadPool::create(threads, &pool).is_ok()) {
    state.SkipWithError("no thread pool");
    return;
  }
  const size_t share = kCopyBytes / static_cast<size_t>(threads) / 64 * 64;
  const std::function<void(int)> copy = [&](int t) {
    const size_t begin = share * static_cast<size_t>(t);
    const size_t end = t == threads - 1 ? kCopyBytes : begin + share;
    std::memcpy(dst.data() + begin, src.data() + begin, end - begin);
  };
  for (auto _ : state) {
    pool->run(threads, copy);
    benchmark::ClobberMemory();
  }
  const double moved = 2.0 * kCopyBytes * static_cast<double>(state.iterations());
  state.counters["moved_GBps"] = benchmark::Counter(moved / 1e9, benchmark::Counter::kIsRate);
  state.counters["threads"] = threads;
}

// A shard of `n` elements with its state and copy, touched before timing.
struct Shard {
  explicit Shard(size_t n) : master(n, 0.5f), grad(n, 0.01f), s0(n, 0.0f), s1(n, 0.0f), copy(n, 0) {
    states[0] = s0.data();
    states[1] = s1.data();
    piece = {0, 0, 0, n};
    span = {0, n, copy.data()};
    args.size = sizeof(args);
    args.master = master.data();
    args.grad = grad.data();
    args.state = states;
    args.num_state = 2;
    args.count = n;
    args.pieces = &piece;
    args.num_pieces = 1;
    args.mem_kind = ZRT_MEM_HOST;
    args.param_dtype = ZRT_BF16;
    args.param_spans = &span;
    args.num_param_spans = 1;
    args.params_written = &written;
  }
  std::vector<float> master, grad, s0, s1;
  std::vector<uint16_t> copy;
  float* states[2];
  zrt_shard_piece_t piece;
  zrt_param_span_t span;
  int written = 0;
  zrt_optimizer_args_t args{};
};

void run_optimizer(benchmark::State& state, zrt_optimizer_fn fn, zrt_optimizer_kind_t kind,
                   double bytes_per_element) {
  const size_t n = static_cast<size_t>(state.range(0));
  const int threads = static_cast<int>(state.range(1));
  Shard shard(n);
  zrt_optimizer_config_t config{};
  zrt_optimizer_config_init(&config, sizeof(config), kind);
  if (kind == ZRT_OPTIMIZER_SGD) config.momentum = 0.9;
  config.pool = pool_of(threads);
  if (config.pool == nullptr) {
    state.SkipWithError("no optimizer pool");
    return;
  }
  int64_t step = 0;
  for (auto _ : state) {
    shard.args.step = ++step;
    if (fn(&shard.args, &config) != ZRT_SUCCESS) {
      state.SkipWithError(zrt_last_error());
      return;
    }
    benchmark::ClobberMemory();
  }
  const double elements = static_cast<double>(n) * static_cast<double>(state.iterations());
  state.counters["params_per_s"] = benchmark::Counter(elements, benchmark::Counter::kIsRate);
  state.counters["moved_GBps"] =
      benchmark::Counter(elements * bytes_per_element / 1e9, benchmark::Counter::kIsRate);
  state.counters["bytes_per_elem"] = bytes_per_element;
  state.counters["threads"] = threads;
}

void BM_AdamW(benchmark::State& state) {
  run_optimizer(state, zrt_optimizer_adamw, ZRT_OPTIMIZER_ADAMW, 30);
}
void BM_Adam(benchmark::State& state) {
  run_optimizer(state, zrt_optimizer_adam, ZRT_OPTIMIZER_ADAM, 30);
}
void BM_SgdMomentum(benchmark::State& state) {
  run_optimizer(state, zrt_optimizer_sgd, ZRT_OPTIMIZER_SGD, 22);
}
void BM_Lion(benchmark::State& state) {
  run_optimizer(state, zrt_optimizer_lion, ZRT_OPTIMIZER_LION, 22);
}

// Prints every row, and after the optimizer rows their share of the copy bandwidth of the same
// thread count (the memcpy rows run first).
class BoundReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& run : runs) {
      const auto moved = run.counters.find("moved_GBps");
      const auto threads = run.counters.find("threads");
      if (moved == run.counters.end() || threads == run.counters.end()) continue;
      const int t = static_cast<int>(threads->second.value);
      if (run.benchmark_name().rfind("BM_Memcpy", 0) == 0) {
        copy_rates()[t] = std::max(copy_rates()[t], moved->second.value);
      }
    }
    ConsoleReporter::ReportRuns(runs);
    for (const Run& run : runs) {
      const auto moved = run.counters.find("moved_GBps");
      const auto threads = run.counters.find("threads");
      if (run.benchmark_name().rfind("BM_Memcpy", 0) == 0 || moved == run.counters.end() ||
          threads == run.counters.end()) {
        continue;
      }
      // The bound of t threads: the best copy rate of at most t threads (on a loaded machine
      // a run on more threads can come out slower; the bound never should).
      const int t = static_cast<int>(threads->second.value);
      double copy = 0;
      for (const auto& [copy_threads, rate] : copy_rates()) {
        if (copy_threads <= t) copy = std::max(copy, rate);
      }
      if (copy > 0) {
        GetOutputStream() << "    " << run.benchmark_name() << ": " << moved->second.value
                          << " GB/s moved = " << 100.0 * moved->second.value / copy << "% of the "
                          << copy << " GB/s copy bandwidth on " << t << " thread(s)\n";
      }
    }
  }
};

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  const int all = all_threads();
  std::vector<int> thread_counts = {1};
  if (all > 1) thread_counts.push_back(all);
  for (int t : thread_counts) {
    benchmark::RegisterBenchmark("BM_Memcpy", BM_Memcpy)->Arg(t)->UseRealTime()->MinTime(0.5);
  }
  for (int t : thread_counts) {
    for (int64_t n : {int64_t{1} << 20, int64_t{16} << 20, int64_t{128} << 20}) {
      benchmark::RegisterBenchmark("BM_AdamW", BM_AdamW)->Args({n, t})->UseRealTime();
    }
  }
  for (int t : thread_counts) {
    const int64_t n = int64_t{16} << 20;
    benchmark::RegisterBenchmark("BM_Adam", BM_Adam)->Args({n, t})->UseRealTime();
    benchmark::RegisterBenchmark("BM_SgdMomentum", BM_SgdMomentum)->Args({n, t})->UseRealTime();
    benchmark::RegisterBenchmark("BM_Lion", BM_Lion)->Args({n, t})->UseRealTime();
  }
  BoundReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}
