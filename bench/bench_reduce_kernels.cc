// Reduction kernels beside memcpy, on buffers from 256 KiB (in cache) to 256 MiB (far beyond).
//
// How bytes are counted: `size` (the benchmark argument) is the bytes of OUTPUT each call
// writes; memcpy of the same `size` runs in the same binary for comparison. Two counters:
//   out_GBps   = output bytes written per second (what a reduce-scatter step delivers);
//   moved_GBps = bytes read + bytes written per second (memcpy: 2*size; a+b->c and a+=b:
//                3*size; f32->bf16: 2*size read + size written = 3*size).
// GB = 1e9 bytes. Each kernel runs with the normal stores (stream=0) and with non-temporal
// stores (stream=1, which the dispatcher uses for outputs >= kDefaultStreamMinBytes that do not
// alias an input); in-place sums never stream. The variant is the dispatcher's (ZRT_SIMD
// forces another). Example:
//   build-kernels/bench/bench_reduce_kernels --benchmark_filter='268435456'
#include <cstring>
#include <vector>

#include <benchmark/benchmark.h>

#include "kernels/reduce/kernel_variants.h"
#include "kernels/reduce/reduce_kernels.h"

namespace {

using zrt::ReduceOp;
using zrt::reduce_internal::active_kernel_table;
using zrt::reduce_internal::KernelOptions;

// Buffers are written once before timing: first touch of fresh pages would otherwise dominate.
std::vector<char> touched(size_t bytes, char value) {
  return std::vector<char>(bytes, value);
}

void set_counters(benchmark::State& state, double out_bytes, double moved_bytes) {
  const double iterations = static_cast<double>(state.iterations());
  state.counters["out_GBps"] =
      benchmark::Counter(out_bytes * iterations / 1e9, benchmark::Counter::kIsRate);
  state.counters["moved_GBps"] =
      benchmark::Counter(moved_bytes * iterations / 1e9, benchmark::Counter::kIsRate);
  state.SetLabel(active_kernel_table().name);
}

KernelOptions options_for(benchmark::State& state) {
  KernelOptions options;
  options.stream_min_bytes = state.range(1) != 0 ? 0 : SIZE_MAX;
  return options;
}

void BM_Memcpy(benchmark::State& state) {
  const size_t size = static_cast<size_t>(state.range(0));
  auto src = touched(size, 1), dst = touched(size, 2);
  for (auto _ : state) {
    memcpy(dst.data(), src.data(), size);
    benchmark::ClobberMemory();
  }
  set_counters(state, size, 2.0 * size);
}

void BM_F32Sum(benchmark::State& state) {  // c = a + b
  const size_t size = static_cast<size_t>(state.range(0));
  auto a = touched(size, 0), b = touched(size, 0), c = touched(size, 0);
  const KernelOptions options = options_for(state);
  for (auto _ : state) {
    active_kernel_table().reduce(ZRT_F32, ReduceOp::kSum, a.data(), b.data(), c.data(), size / 4,
                                 1.0, 1.0, options);
    benchmark::ClobberMemory();
  }
  set_counters(state, size, 3.0 * size);
}

void BM_F32SumInPlace(benchmark::State& state) {  // a += b
  const size_t size = static_cast<size_t>(state.range(0));
  auto a = touched(size, 0), b = touched(size, 0);
  for (auto _ : state) {
    active_kernel_table().reduce(ZRT_F32, ReduceOp::kSum, a.data(), b.data(), a.data(), size / 4,
                                 1.0, 1.0, KernelOptions{});
    benchmark::ClobberMemory();
  }
  set_counters(state, size, 3.0 * size);
}

void BM_Bf16Sum(benchmark::State& state) {  // c = a + b in bf16 (widened, rounded once)
  const size_t size = static_cast<size_t>(state.range(0));
  auto a = touched(size, 0), b = touched(size, 0), c = touched(size, 0);
  const KernelOptions options = options_for(state);
  for (auto _ : state) {
    active_kernel_table().reduce(ZRT_BF16, ReduceOp::kSum, a.data(), b.data(), c.data(), size / 2,
                                 1.0, 1.0, options);
    benchmark::ClobberMemory();
  }
  set_counters(state, size, 3.0 * size);
}

void BM_F32ToBf16(benchmark::State& state) {  // size bytes of bf16 out, 2*size of f32 in
  const size_t size = static_cast<size_t>(state.range(0));
  auto in = touched(2 * size, 0), out = touched(size, 0);
  const KernelOptions options = options_for(state);
  for (auto _ : state) {
    active_kernel_table().convert(ZRT_F32, in.data(), ZRT_BF16, out.data(), size / 2, options);
    benchmark::ClobberMemory();
  }
  set_counters(state, size, 3.0 * size);
}

constexpr int64_t kMinBytes = int64_t{256} << 10;
constexpr int64_t kMaxBytes = int64_t{256} << 20;

void sizes(benchmark::internal::Benchmark* b) {
  for (int64_t size = kMinBytes; size <= kMaxBytes; size *= 4) b->Args({size, 0});
}
void sizes_and_stream(benchmark::internal::Benchmark* b) {
  for (int64_t size = kMinBytes; size <= kMaxBytes; size *= 4) {
    b->Args({size, 0});
    b->Args({size, 1});
  }
}

BENCHMARK(BM_Memcpy)->Apply(sizes)->ArgNames({"size", "stream"})->UseRealTime();
BENCHMARK(BM_F32Sum)->Apply(sizes_and_stream)->ArgNames({"size", "stream"})->UseRealTime();
BENCHMARK(BM_F32SumInPlace)->Apply(sizes)->ArgNames({"size", "stream"})->UseRealTime();
BENCHMARK(BM_Bf16Sum)->Apply(sizes_and_stream)->ArgNames({"size", "stream"})->UseRealTime();
BENCHMARK(BM_F32ToBf16)->Apply(sizes_and_stream)->ArgNames({"size", "stream"})->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
