// The host MappedWindow (zero/partition/host_mapped_window.h) on its own: fixed unit addresses,
// a slot's pages shown at a unit's address while mapped (writes through either address are the
// same memory), faults after unmap, odd sizes rounded to pages, and bad specs refused.
#include <gtest/gtest.h>
#include <setjmp.h>
#include <signal.h>
#include <unistd.h>

#include <cstring>

#include "zero/partition/host_mapped_window.h"
#include "tests/harness/status_assert.h"

namespace zrt {
namespace {

sigjmp_buf fault_jump;
void on_fault(int /*signal*/) {
  siglongjmp(fault_jump, 1);
}

bool read_faults(const void* address) {
  struct sigaction action {};
  struct sigaction old_segv {};
  struct sigaction old_bus {};
  action.sa_handler = on_fault;
  sigemptyset(&action.sa_mask);
  sigaction(SIGSEGV, &action, &old_segv);
  sigaction(SIGBUS, &action, &old_bus);
  bool faulted = false;
  if (sigsetjmp(fault_jump, 1) == 0) {
    (void)*static_cast<const volatile char*>(address);
  } else {
    faulted = true;
  }
  sigaction(SIGSEGV, &old_segv, nullptr);
  sigaction(SIGBUS, &old_bus, nullptr);
  return faulted;
}

MappedWindowSpec odd_spec() {
  MappedWindowSpec spec;
  spec.slots = 3;
  spec.slot_bytes = 10000;  // not a multiple of the page size
  spec.unit_bytes = {10000, 0, 4100, 9000, 1};
  return spec;
}

TEST(HostMappedWindow, UnitsShowTheirSlotOnlyWhileMapped) {
  std::unique_ptr<MappedWindow> window;
  ASSERT_OK(create_host_mapped_window(odd_spec(), &window));
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t stride = (10000 + page - 1) / page * page;
  EXPECT_EQ(window->committed_bytes(), 3 * stride);
  EXPECT_EQ(window->unit_address(1), nullptr);  // no segment, no address
  for (int s = 0; s < 3; ++s) {
    EXPECT_EQ(reinterpret_cast<uintptr_t>(window->slot_address(s)) % page, 0u);
    std::memset(window->slot_address(s), 'a' + s, 10000);
  }
  char* const unit0 = window->unit_address(0);
  char* const unit3 = window->unit_address(3);
  ASSERT_NE(unit0, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(unit0) % page, 0u);
  EXPECT_TRUE(read_faults(unit0));  // reserved, not mapped
  ASSERT_OK(window->map(0, 2));
  ASSERT_OK(window->map(3, 1));
  EXPECT_EQ(unit0[0], 'c');
  EXPECT_EQ(unit0[9999], 'c');
  EXPECT_EQ(unit3[8999], 'b');
  // One memory behind two addresses: a gather's write through the slot is the unit's data.
  window->slot_address(2)[5000] = 'z';
  EXPECT_EQ(unit0[5000], 'z');
  ASSERT_OK(window->unmap(0));
  EXPECT_TRUE(read_faults(unit0));
  EXPECT_TRUE(read_faults(unit0 + 9999));
  EXPECT_EQ(unit3[0], 'b');  // the neighbour's mapping is untouched
  // Mapped again elsewhere, at the same address.
  ASSERT_OK(window->map(0, 0));
  EXPECT_EQ(window->unit_address(0), unit0);
  EXPECT_EQ(unit0[0], 'a');
  ASSERT_OK(window->unmap(0));
  ASSERT_OK(window->unmap(3));
  EXPECT_TRUE(read_faults(unit3));
  // A unit of one byte still gets a page of its own.
  ASSERT_OK(window->map(4, 1));
  EXPECT_EQ(window->unit_address(4)[0], 'b');
  ASSERT_OK(window->unmap(4));
}

TEST(HostMappedWindow, RefusesBadSpecs) {
  std::unique_ptr<MappedWindow> window;
  MappedWindowSpec spec = odd_spec();
  spec.slots = 0;
  EXPECT_EQ(create_host_mapped_window(spec, &window).code(), ZRT_INVALID_ARGUMENT);
  spec = odd_spec();
  spec.unit_bytes[2] = 10001;  // larger than a slot
  const Status status = create_host_mapped_window(spec, &window);
  EXPECT_EQ(status.code(), ZRT_INVALID_ARGUMENT);
  EXPECT_NE(status.message().find("unit 2"), std::string::npos) << status.message();
  EXPECT_EQ(window, nullptr);
}

}  // namespace
}  // namespace zrt
