// A client of the rendezvous store: one blocking TCP connection, requests answered in order.
// Connecting retries until the timeout (rank 0's server may start after its clients), then
// presents the job token. Every call is bounded: by the client's timeout for the exchange
// itself, plus the call's own wait for get/wait. After a transport failure or a timeout the
// connection's framing can no longer be trusted, so the client marks itself broken and every
// later call fails at once with the original reason.
//
// Not thread-safe: one thread at a time per client.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lib/bootstrap/socket_util.h"
#include "lib/bootstrap/store_protocol.h"
#include "lib/core/status.h"

namespace zrt {

class StoreClient {
 public:
  static Status connect(const std::string& host, int port, const std::string& token,
                        int64_t timeout_ms, std::unique_ptr<StoreClient>* client);

  StoreClient(const StoreClient&) = delete;
  StoreClient& operator=(const StoreClient&) = delete;
  ~StoreClient();

  Status set(const std::string& key, const void* data, size_t bytes);
  // Values of every key, waiting up to wait_ms for all to exist (0 = only what exists now).
  // On ZRT_TIMEOUT, *missing (if not null) lists the indices of the keys that did not exist.
  Status get(const std::vector<std::string>& keys, int64_t wait_ms,
             std::vector<std::vector<uint8_t>>* values, std::vector<uint32_t>* missing = nullptr);
  // Waits up to wait_ms for every key to exist; *missing as for get().
  Status wait(const std::vector<std::string>& keys, int64_t wait_ms,
              std::vector<uint32_t>* missing = nullptr);
  // Atomically adds delta to an 8-byte counter (created at 0) and returns the new value.
  Status add(const std::string& key, int64_t delta, int64_t* value);
  // Removes a key; *existed (if not null) says whether it was there.
  Status remove(const std::string& key, bool* existed = nullptr);

  const std::string& address() const { return address_; }

  // Makes a call blocked in another thread (a long wait) return at once with an error, and every
  // later call fail. The one call that may come from another thread than the client's.
  void interrupt();

 private:
  StoreClient() = default;
  Status call(const StoreRequest& request, int64_t extra_wait_ms, StoreReply* reply);

  int fd_ = -1;
  int64_t timeout_ms_ = 0;
  std::string address_;    // host:port, for messages
  Status broken_;          // set once the connection cannot be used any more
  bool answered_ = false;  // the server replied at least once (so it did not shed us)
};

}  // namespace zrt
