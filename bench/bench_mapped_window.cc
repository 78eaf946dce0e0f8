// What stable stage 3 addresses cost per fetch (docs/ARCHITECTURE.md#stable-unit-addresses): the
// host MappedWindow's map (a slot's memfd pages at the unit's reserved address, page tables
// populated) plus unmap (a PROT_NONE reservation put back), per unit size, beside a memcpy of the
// same bytes (what a copy out of the slot into a fixed buffer would cost instead) and beside
// reading the unit once through the new mapping (the framework's first touch of it).
//   build/bench/bench_mapped_window --benchmark_min_time=0.2s
#include <cstring>
#include <memory>
#include <vector>

#include <benchmark/benchmark.h>

#include "zero/partition/host_mapped_window.h"

namespace {

std::unique_ptr<zrt::MappedWindow> make_window(size_t bytes) {
  zrt::MappedWindowSpec spec;
  spec.slots = 2;
  spec.slot_bytes = bytes;
  spec.unit_bytes = {bytes, bytes};
  std::unique_ptr<zrt::MappedWindow> window;
  if (!zrt::create_host_mapped_window(spec, &window).is_ok()) return nullptr;
  return window;
}

// map + unmap of one unit, alternating between the two slots as the window's rotation does.
void BM_MapUnmap(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  auto window = make_window(bytes);
  if (window == nullptr) {
    state.SkipWithError("create_host_mapped_window failed");
    return;
  }
  int slot = 0;
  for (auto _ : state) {
    if (!window->map(0, slot).is_ok() || !window->unmap(0).is_ok()) {
      state.SkipWithError("map/unmap failed");
      return;
    }
    slot ^= 1;
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
}

// map + one read per 64 bytes through the unit's address + unmap.
void BM_MapReadUnmap(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  auto window = make_window(bytes);
  if (window == nullptr) {
    state.SkipWithError("create_host_mapped_window failed");
    return;
  }
  int slot = 0;
  for (auto _ : state) {
    if (!window->map(0, slot).is_ok()) return state.SkipWithError("map failed");
    const volatile char* unit = window->unit_address(0);
    char sum = 0;
    for (size_t i = 0; i < bytes; i += 64) sum = static_cast<char>(sum + unit[i]);
    benchmark::DoNotOptimize(sum);
    if (!window->unmap(0).is_ok()) return state.SkipWithError("unmap failed");
    slot ^= 1;
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
}

// The alternative a stable address could also have had: copying the slot into a fixed buffer.
void BM_CopySlot(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  std::vector<char> slot(bytes, 1), fixed(bytes, 0);
  for (auto _ : state) {
    std::memcpy(fixed.data(), slot.data(), bytes);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
}

}  // namespace

BENCHMARK(BM_MapUnmap)->RangeMultiplier(4)->Range(64 << 10, 64 << 20);
BENCHMARK(BM_MapReadUnmap)->RangeMultiplier(4)->Range(64 << 10, 64 << 20);
BENCHMARK(BM_CopySlot)->RangeMultiplier(4)->Range(64 << 10, 64 << 20);
BENCHMARK_MAIN();
