#include "transports/ucx/ucx_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "lib/core/log.h"
#include "lib/core/memory_probe.h"
#include "transports/ucx/ucx_worker.h"

namespace zrt {
namespace {

constexpr uint32_t kKeyMagic = 0x7a72746du;  // "zrtm"

// What a peer needs to find and check the segment; fixed-size, sent as raw bytes.
struct PackedKey {
  uint32_t magic = kKeyMagic;
  int32_t fd = -1;
  int64_t pid = 0;
  uint64_t inode = 0;
  uint64_t length = 0;
  uint64_t base = 0;
  char boot_id[40] = {};
};

std::string read_boot_id() {
  std::ifstream file("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(file, id);
  return id;
}

size_t round_to_pages(size_t bytes) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return (bytes + page - 1) / page * page;
}

}  // namespace

UcxMemory::UcxMemory(ucp_context_h context) : context_(context), boot_id_(read_boot_id()) {}

Status UcxMemory::alloc(size_t bytes, void** buffer) {
  if (buffer == nullptr) return Status::invalid_argument("alloc_registered: buffer is NULL");
  if (bytes == 0) return Status::invalid_argument("alloc_registered: bytes is 0");
  if (bytes > SIZE_MAX / 2) {
    return Status::error(ZRT_OUT_OF_MEMORY, "alloc_registered: {} bytes is beyond any machine",
                         bytes);
  }
  const size_t length = round_to_pages(bytes);
  ZRT_RETURN_IF_ERROR(admit_memory("registered memory", length, MemoryPlace::kSharedAnon));
  const int fd = memfd_create("zrt-registered", MFD_CLOEXEC);
  if (fd < 0) return Status::system_error("alloc_registered: memfd_create", errno);
  auto fail = [&](const char* what, int err) {
    ::close(fd);
    return Status(
        err == ENOMEM || err == ENOSPC ? ZRT_OUT_OF_MEMORY : ZRT_SYSTEM_ERROR,
        fmt::format("alloc_registered: {} of {} bytes: {}", what, length, std::strerror(err)));
  };
  if (ftruncate(fd, static_cast<off_t>(length)) != 0) return fail("ftruncate", errno);
  // Reserves the pages now: a shortage is this error, not a SIGBUS at first touch.
  const int reserved = posix_fallocate(fd, 0, static_cast<off_t>(length));
  if (reserved != 0) return fail("fallocate", reserved);
  void* address = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (address == MAP_FAILED) return fail("mmap", errno);
  // Write-touch every page so that its page-table entry is writable now.
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  volatile char* bytes_ptr = static_cast<volatile char*>(address);
  for (size_t offset = 0; offset < length; offset += page) bytes_ptr[offset] = 0;
  struct stat info {};
  fstat(fd, &info);
  Segment segment{fd, length, static_cast<uint64_t>(info.st_ino), nullptr};
  ucp_mem_map_params_t params{};
  params.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
  params.address = address;
  params.length = length;
  ucs_status_t status = ucp_mem_map(context_, &params, &segment.memh);
  if (status != UCS_OK) {
    munmap(address, length);
    ::close(fd);
    return ucx_status(status == UCS_ERR_NO_MEMORY ? ZRT_OUT_OF_MEMORY : ZRT_SYSTEM_ERROR,
                      "ucp_mem_map(" + std::to_string(length) + " bytes)", status);
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    mapped_[static_cast<const char*>(address)] = segment;
  }
  *buffer = address;
  return Status::ok();
}

void UcxMemory::release(void* address, const Segment& segment) {
  if (segment.memh != nullptr) ucp_mem_unmap(context_, segment.memh);
  munmap(address, segment.length);
  ::close(segment.fd);
}

void UcxMemory::free(void* buffer) {
  if (buffer == nullptr) return;
  Segment segment;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = mapped_.find(static_cast<const char*>(buffer));
    if (it == mapped_.end()) {
      ZRT_LOG_ERROR("free_registered: {} was not allocated by this transport", buffer);
      return;
    }
    segment = it->second;
    mapped_.erase(it);
    ++frees_;
  }
  release(buffer, segment);
}

Status UcxMemory::pack_key(const void* buffer, std::vector<uint8_t>* key) {
  if (key == nullptr) return Status::invalid_argument("pack_registered_key: key is NULL");
  PackedKey packed;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = mapped_.find(static_cast<const char*>(buffer));
    if (it == mapped_.end()) {
      return Status::invalid_argument(
          "pack_registered_key: buffer {} is not the start of a registered allocation", buffer);
    }
    packed.fd = it->second.fd;
    packed.inode = it->second.inode;
    packed.length = it->second.length;
  }
  packed.pid = static_cast<int64_t>(getpid());
  packed.base = reinterpret_cast<uintptr_t>(buffer);
  std::strncpy(packed.boot_id, boot_id_.c_str(), sizeof(packed.boot_id) - 1);
  const auto* bytes = reinterpret_cast<const uint8_t*>(&packed);
  key->assign(bytes, bytes + sizeof(packed));
  return Status::ok();
}

Status UcxMemory::map_peer(const std::vector<uint8_t>& key, uint64_t remote_address, void** local) {
  if (local == nullptr) return Status::invalid_argument("map_peer_registered: local is NULL");
  PackedKey packed;
  if (key.size() != sizeof(packed)) {
    return Status::error(ZRT_REMOTE_ERROR, "map_peer_registered: a key of {} bytes, expected {}",
                         key.size(), sizeof(packed));
  }
  std::memcpy(&packed, key.data(), sizeof(packed));
  packed.boot_id[sizeof(packed.boot_id) - 1] = '\0';
  if (packed.magic != kKeyMagic) {
    return Status::error(ZRT_REMOTE_ERROR, "map_peer_registered: the key is not a zrt memory key");
  }
  if (boot_id_.empty() || boot_id_ != packed.boot_id) {
    return Status::error(ZRT_UNSUPPORTED,
                         "the peer's memory is on another host (boot id {} here, {} there)",
                         boot_id_, packed.boot_id);
  }
  if (remote_address < packed.base || remote_address - packed.base >= packed.length) {
    return Status::error(ZRT_REMOTE_ERROR,
                         "map_peer_registered: address {:#x} is outside the peer's {}-byte "
                         "segment at {:#x}",
                         remote_address, packed.length, packed.base);
  }
  const uint64_t offset = remote_address - packed.base;
  // The base and length too: an inode number may come back once its memfd is freed, while a
  // stream still maps the old one.
  const std::string id =
      fmt::format("{}:{}:{:#x}:{}", packed.pid, packed.inode, packed.base, packed.length);
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = peers_.find(id);
  if (found == peers_.end()) {
    const std::string path = fmt::format("/proc/{}/fd/{}", packed.pid, packed.fd);
    const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) {
      const int err = errno;
      if (err == ENOENT || err == ESRCH) {
        return Status::error(ZRT_REMOTE_ERROR,
                             "the peer's process (pid {}) is gone: it died or closed its memory "
                             "({}: {})",
                             packed.pid, path, std::strerror(err));
      }
      return Status::error(ZRT_UNSUPPORTED,
                           "cannot open the peer's memory {}: {} (another user, another pid "
                           "namespace or a ptrace restriction)",
                           path, std::strerror(err));
    }
    struct stat info {};
    if (fstat(fd, &info) != 0 || static_cast<uint64_t>(info.st_ino) != packed.inode ||
        static_cast<uint64_t>(info.st_size) != packed.length) {
      ::close(fd);
      return Status::error(ZRT_REMOTE_ERROR,
                           "the peer's memory {} is not the segment it described (pid {} died "
                           "and was reused, or another pid namespace)",
                           path, packed.pid);
    }
    void* base = mmap(nullptr, packed.length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    const int err = errno;
    ::close(fd);
    if (base == MAP_FAILED) {
      return Status(
          err == ENOMEM ? ZRT_OUT_OF_MEMORY : ZRT_SYSTEM_ERROR,
          fmt::format("mapping the peer's {}-byte memory: {}", packed.length, std::strerror(err)));
    }
    found = peers_.emplace(id, PeerSegment{static_cast<char*>(base), packed.length, packed.base, 0})
                .first;
  }
  ++found->second.uses;
  *local = found->second.base + offset;
  return Status::ok();
}

void UcxMemory::unmap_peer(void* local) {
  if (local == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto it = peers_.begin(); it != peers_.end(); ++it) {
    PeerSegment& segment = it->second;
    char* address = static_cast<char*>(local);
    if (address >= segment.base && address < segment.base + segment.length) {
      // The last user gone: a peer's freed buffer must not stay alive through this mapping.
      if (segment.uses > 0 && --segment.uses == 0) {
        munmap(segment.base, segment.length);
        peers_.erase(it);
      }
      return;
    }
  }
  ZRT_LOG_ERROR("unmap_peer_registered: {} is not a peer mapping", local);
}

bool UcxMemory::find(const void* address, size_t bytes, RegisteredRange* range) {
  const char* start = static_cast<const char*>(address);
  std::lock_guard<std::mutex> lock(mutex_);
  range->frees = frees_;
  auto it = mapped_.upper_bound(start);
  if (it == mapped_.begin()) return false;
  --it;
  const size_t offset = static_cast<size_t>(start - it->first);
  if (offset >= it->second.length || bytes > it->second.length - offset) return false;
  range->id = it->second.inode;
  range->base = reinterpret_cast<uintptr_t>(it->first);
  range->length = it->second.length;
  return true;
}

void UcxMemory::unmap_all_peers() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [id, segment] : peers_) munmap(segment.base, segment.length);
  peers_.clear();
}

UcxMemory::~UcxMemory() {
  unmap_all_peers();
  for (auto& [address, segment] : mapped_) release(const_cast<char*>(address), segment);
}

}  // namespace zrt
