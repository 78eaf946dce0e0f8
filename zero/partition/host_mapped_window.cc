#include "zero/partition/host_mapped_window.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace zrt {
namespace {

size_t round_up(size_t bytes, size_t unit) {
  return (bytes + unit - 1) / unit * unit;
}

Status mmap_error(const char* what, size_t bytes, int err) {
  const zrt_status_t code = err == ENOMEM ? ZRT_OUT_OF_MEMORY : ZRT_SYSTEM_ERROR;
  return Status::error(code, "gather window: {} of {} bytes failed: {}", what, bytes,
                       std::strerror(err));
}

// A range no mapping may take over and no access may read: what a unit's address holds while
// the unit is not fetched.
constexpr int kReserveFlags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;

class HostMappedWindow final : public MappedWindow {
 public:
  ~HostMappedWindow() override {
    if (units_base_ != nullptr) munmap(units_base_, units_total_);
    if (slots_base_ != nullptr) munmap(slots_base_, slots_total_);
    if (fd_ >= 0) close(fd_);
  }

  Status init(const MappedWindowSpec& spec) {
    if (spec.slots < 1 || spec.slot_bytes == 0) {
      return Status::invalid_argument("gather window of {} slots of {} bytes", spec.slots,
                                      spec.slot_bytes);
    }
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    stride_ = round_up(spec.slot_bytes, page);
    slots_total_ = stride_ * static_cast<size_t>(spec.slots);
    fd_ = memfd_create("zrt-gather-window", MFD_CLOEXEC);
    if (fd_ < 0) return Status::system_error("gather window: memfd_create", errno);
    if (ftruncate(fd_, static_cast<off_t>(slots_total_)) != 0) {
      return mmap_error("ftruncate of the memfd", slots_total_, errno);
    }
    void* slots = mmap(nullptr, slots_total_, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
    if (slots == MAP_FAILED) return mmap_error("mapping the slots", slots_total_, errno);
    slots_base_ = static_cast<char*>(slots);
    // Every page written once now: the memfd's pages exist before the first gather, so neither
    // the gathers nor the units' mappings fault them in on the training path.
    std::memset(slots_base_, 0, slots_total_);
    unit_offset_.assign(spec.unit_bytes.size(), 0);
    unit_span_.assign(spec.unit_bytes.size(), 0);
    for (size_t u = 0; u < spec.unit_bytes.size(); ++u) {
      if (spec.unit_bytes[u] > spec.slot_bytes) {
        return Status::invalid_argument("unit {} has {} bytes, more than a slot's {}", u,
                                        spec.unit_bytes[u], spec.slot_bytes);
      }
      unit_offset_[u] = units_total_;
      unit_span_[u] = round_up(spec.unit_bytes[u], page);
      units_total_ += unit_span_[u];
    }
    if (units_total_ > 0) {
      void* units = mmap(nullptr, units_total_, PROT_NONE, kReserveFlags, -1, 0);
      if (units == MAP_FAILED)
        return mmap_error("reserving the units' addresses", units_total_, errno);
      units_base_ = static_cast<char*>(units);
    }
    return Status::ok();
  }

  char* slot_address(int slot) const override {
    return slots_base_ + static_cast<size_t>(slot) * stride_;
  }
  char* unit_address(int unit) const override {
    return unit_span_[unit] == 0 ? nullptr : units_base_ + unit_offset_[unit];
  }
  size_t committed_bytes() const override { return slots_total_; }

  Status map(int unit, int slot) override {
    const size_t span = unit_span_[unit];
    if (span == 0) return Status::ok();
    void* at = mmap(unit_address(unit), span, PROT_READ | PROT_WRITE,
                    MAP_SHARED | MAP_FIXED | MAP_POPULATE, fd_,
                    static_cast<off_t>(static_cast<size_t>(slot) * stride_));
    if (at == MAP_FAILED) return mmap_error("mapping a slot at its unit's address", span, errno);
    return Status::ok();
  }

  Status unmap(int unit) override {
    const size_t span = unit_span_[unit];
    if (span == 0) return Status::ok();
    void* at = mmap(unit_address(unit), span, PROT_NONE, kReserveFlags | MAP_FIXED, -1, 0);
    if (at == MAP_FAILED) return mmap_error("reserving a released unit's address", span, errno);
    return Status::ok();
  }

  // The gathers write through the slot's own mapping and a released unit's address was
  // replaced at once: nothing to wait for.
  Status prepare_gather(int /*slot*/) override { return Status::ok(); }

 private:
  int fd_ = -1;
  size_t stride_ = 0;  // a slot's bytes, rounded up to pages
  char* slots_base_ = nullptr;
  size_t slots_total_ = 0;
  char* units_base_ = nullptr;
  size_t units_total_ = 0;
  std::vector<size_t> unit_offset_;
  std::vector<size_t> unit_span_;  // bytes reserved (0: no segment)
};

}  // namespace

Status create_host_mapped_window(const MappedWindowSpec& spec,
                                 std::unique_ptr<MappedWindow>* window) {
  auto made = std::make_unique<HostMappedWindow>();
  ZRT_RETURN_IF_ERROR(made->init(spec));
  *window = std::move(made);
  return Status::ok();
}

}  // namespace zrt
