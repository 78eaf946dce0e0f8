#include "transports/ucx/ucx_memory.h"

#include <unistd.h>

#include "lib/core/log.h"
#include "transports/ucx/ucx_worker.h"

namespace zrt {

Status UcxMemory::alloc(size_t bytes, void** buffer) {
  if (buffer == nullptr) return Status::invalid_argument("alloc_registered: buffer is NULL");
  if (bytes == 0) return Status::invalid_argument("alloc_registered: bytes is 0");
  ucp_mem_map_params_t params{};
  params.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                      UCP_MEM_MAP_PARAM_FIELD_FLAGS;
  params.address = nullptr;
  params.length = bytes;
  params.flags = UCP_MEM_MAP_ALLOCATE;
  ucp_mem_h memh = nullptr;
  ucs_status_t status = ucp_mem_map(context_, &params, &memh);
  if (status != UCS_OK) {
    return ucx_status(status == UCS_ERR_NO_MEMORY ? ZRT_OUT_OF_MEMORY : ZRT_SYSTEM_ERROR,
                      "ucp_mem_map(" + std::to_string(bytes) + " bytes)", status);
  }
  ucp_mem_attr_t attr{};
  attr.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH;
  status = ucp_mem_query(memh, &attr);
  if (status != UCS_OK) {
    ucp_mem_unmap(context_, memh);
    return ucx_status(ZRT_SYSTEM_ERROR, "ucp_mem_query", status);
  }
  // Touch every page once, writing so the kernel backs it with a private page now.
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  volatile char* bytes_ptr = static_cast<volatile char*>(attr.address);
  for (size_t offset = 0; offset < bytes; offset += page) bytes_ptr[offset] = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    mapped_[attr.address] = memh;
  }
  *buffer = attr.address;
  return Status::ok();
}

void UcxMemory::free(void* buffer) {
  if (buffer == nullptr) return;
  ucp_mem_h memh = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = mapped_.find(buffer);
    if (it == mapped_.end()) {
      ZRT_LOG_ERROR("free_registered: {} was not allocated by this transport", buffer);
      return;
    }
    memh = it->second;
    mapped_.erase(it);
  }
  ucp_mem_unmap(context_, memh);
}

Status UcxMemory::pack_key(const void* buffer, std::vector<uint8_t>* key) {
  if (key == nullptr) return Status::invalid_argument("pack_registered_key: key is NULL");
  ucp_mem_h memh = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = mapped_.find(const_cast<void*>(buffer));
    if (it == mapped_.end()) {
      return Status::invalid_argument(
          "pack_registered_key: buffer {} is not the start of a registered allocation", buffer);
    }
    memh = it->second;
  }
  void* packed = nullptr;
  size_t length = 0;
  ucs_status_t status = ucp_rkey_pack(context_, memh, &packed, &length);
  if (status != UCS_OK) return ucx_status(ZRT_SYSTEM_ERROR, "ucp_rkey_pack", status);
  const auto* bytes = static_cast<const uint8_t*>(packed);
  key->assign(bytes, bytes + length);
  ucp_rkey_buffer_release(packed);
  return Status::ok();
}

Status UcxMemory::map_peer(ucp_ep_h endpoint, const std::vector<uint8_t>& key,
                           uint64_t remote_address, void** local) {
  if (local == nullptr) return Status::invalid_argument("map_peer_registered: local is NULL");
  if (key.empty()) return Status::invalid_argument("map_peer_registered: key is empty");
  ucp_rkey_h rkey = nullptr;
  ucs_status_t status = ucp_ep_rkey_unpack(endpoint, key.data(), &rkey);
  if (status != UCS_OK) return ucx_status(ZRT_SYSTEM_ERROR, "ucp_ep_rkey_unpack", status);
  void* address = nullptr;
  status = ucp_rkey_ptr(rkey, remote_address, &address);
  if (status != UCS_OK) {
    ucp_rkey_destroy(rkey);
    return ucx_status(status == UCS_ERR_UNREACHABLE ? ZRT_UNSUPPORTED : ZRT_SYSTEM_ERROR,
                      "ucp_rkey_ptr (the peer's memory cannot be mapped here)", status);
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    peer_keys_[address] = rkey;
  }
  *local = address;
  return Status::ok();
}

void UcxMemory::unmap_peer(void* local) {
  if (local == nullptr) return;
  ucp_rkey_h rkey = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = peer_keys_.find(local);
    if (it == peer_keys_.end()) {
      ZRT_LOG_ERROR("unmap_peer_registered: {} is not a peer mapping", local);
      return;
    }
    rkey = it->second;
    peer_keys_.erase(it);
  }
  ucp_rkey_destroy(rkey);
}

void UcxMemory::unmap_all_peers() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [address, rkey] : peer_keys_) ucp_rkey_destroy(rkey);
  peer_keys_.clear();
}

UcxMemory::~UcxMemory() {
  unmap_all_peers();
  for (auto& [address, memh] : mapped_) ucp_mem_unmap(context_, memh);
}

}  // namespace zrt
