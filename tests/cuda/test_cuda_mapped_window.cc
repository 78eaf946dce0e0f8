// The device MappedWindow (device/device_mapped_window.h) on one GPU, skipped with the
// runtime's reason where none is usable: fixed unit addresses that show their slot's memory while
// mapped (a write through the slot is the unit's data), a release that takes effect once the
// kernels queued before it are done (the slot's next gather), and a unit mapped again elsewhere.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <vector>

#include "tests/cuda/cuda_test_util.h"
#include "tests/harness/status_assert.h"
#include "device/device_mapped_window.h"

namespace zrt {
namespace {

std::vector<unsigned char> download(const void* device, size_t bytes) {
  std::vector<unsigned char> host(bytes);
  EXPECT_EQ(cudaMemcpy(host.data(), device, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  return host;
}

TEST(CudaMappedWindow, UnitsShowTheirSlotWhileMapped) {
  ZRT_SKIP_WITHOUT_CUDA();
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  MappedWindowSpec spec;
  spec.slots = 2;
  spec.slot_bytes = 3 << 20;  // not a multiple of the 2 MiB granularity
  spec.unit_bytes = {3 << 20, 0, 1000};
  std::unique_ptr<MappedWindow> window;
  ASSERT_OK(create_device_mapped_window(0, 10000, spec, &window));
  EXPECT_GE(window->committed_bytes(), size_t{2} * (3 << 20));
  EXPECT_EQ(window->unit_address(1), nullptr);
  char* const unit0 = window->unit_address(0);
  char* const unit2 = window->unit_address(2);
  ASSERT_NE(unit0, nullptr);
  ASSERT_NE(unit2, nullptr);
  ASSERT_EQ(cudaMemset(window->slot_address(0), 7, 3 << 20), cudaSuccess);
  ASSERT_EQ(cudaMemset(window->slot_address(1), 9, 3 << 20), cudaSuccess);
  ASSERT_OK(window->map(0, 1));
  ASSERT_OK(window->map(2, 0));
  EXPECT_EQ(download(unit0, 3 << 20), std::vector<unsigned char>(3 << 20, 9));
  EXPECT_EQ(download(unit2, 1000), std::vector<unsigned char>(1000, 7));
  // The same memory behind two addresses.
  ASSERT_EQ(cudaMemset(window->slot_address(1), 5, 4096), cudaSuccess);
  EXPECT_EQ(download(unit0, 4096), std::vector<unsigned char>(4096, 5));
  // Released, then slot 1 is gathered into: unit 0's range is unmapped first.
  ASSERT_OK(window->unmap(0));
  ASSERT_OK(window->prepare_gather(1));
  ASSERT_OK(window->map(0, 1));  // mapped again (the same slot), at the same address
  EXPECT_EQ(window->unit_address(0), unit0);
  EXPECT_EQ(download(unit0, 16), std::vector<unsigned char>(16, 5));
  // Released and fetched from another slot: remapped there.
  ASSERT_OK(window->unmap(2));
  ASSERT_OK(window->unmap(0));
  ASSERT_OK(window->map(0, 0));
  EXPECT_EQ(download(unit0, 16), std::vector<unsigned char>(16, 7));
  // A gather into a slot a fetched unit shows is a bug of the caller: refused.
  EXPECT_EQ(window->prepare_gather(0).code(), ZRT_INTERNAL_ERROR);
  ASSERT_OK(window->unmap(0));
  window.reset();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

TEST(CudaMappedWindow, RefusesBadSpecs) {
  ZRT_SKIP_WITHOUT_CUDA();
  MappedWindowSpec spec;
  spec.slots = 0;
  spec.slot_bytes = 4096;
  std::unique_ptr<MappedWindow> window;
  EXPECT_EQ(create_device_mapped_window(0, 10000, spec, &window).code(), ZRT_INVALID_ARGUMENT);
}

}  // namespace
}  // namespace zrt
