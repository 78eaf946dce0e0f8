// A client of the rendezvous store: one blocking TCP connection, requests answered in order.
// Connecting retries until the timeout (rank 0's server may start after its clients), then
// presents the job token. Every call is bounded: by the client's timeout for the exchange
// itself, plus the call's own wait for get/wait. After a transport failure (that the reconnect
// below did not mend) or a timeout the connection's framing can no longer be trusted, so the
// client marks itself broken and every later call fails at once with the original reason.
//
// The hello learns the store's nonce (one per store lifetime). When the store closes or resets
// the connection during a request that may safely be sent twice (set, get, wait, delete; not
// add), the client reconnects once, within kStoreReconnectMs and the call's deadline, presenting
// that nonce and its claim: the same store takes it back and the request is sent again; another
// store on the port (its rank 0 gone, another job's there) refuses it on both sides; nobody
// listening fails the call (docs/ARCHITECTURE.md#bootstrap).
//
// Not thread-safe: one thread at a time per client.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lib/bootstrap/socket_util.h"
#include "lib/bootstrap/store_protocol.h"
#include "lib/core/status.h"

namespace zrt {

// How long a client tries to reach its store again after it lost the connection.
inline constexpr int64_t kStoreReconnectMs = 1000;

// Who joins, beyond the token (StoreHello): a rank claim for jobs without an identity, and the
// nonce of a store lifetime met before (0 = first contact).
struct StoreJoin {
  int rank = -1;  // -1 = no claim
  int size = 0;
  uint64_t nonce = 0;
};

class StoreClient {
 public:
  static Status connect(const std::string& host, int port, const std::string& token,
                        int64_t timeout_ms, std::unique_ptr<StoreClient>* client,
                        const StoreJoin& join = {});

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
  uint64_t nonce() const { return join_.nonce; }  // the store lifetime this client joined

  // Makes a call blocked in another thread (a long wait) return at once with an error, and every
  // later call fail. The one call that may come from another thread than the client's.
  void interrupt();

 private:
  StoreClient() = default;
  Status call(const StoreRequest& request, int64_t extra_wait_ms, StoreReply* reply);
  // One request and its reply over the current connection; ok says only that a reply came.
  Status exchange(const std::vector<uint8_t>& frame, Deadline deadline, const std::string& what,
                  StoreReply* reply);
  // Presents the token (and join_) on the current connection; learns the store's nonce.
  Status hello(Deadline deadline);
  // A new connection to the same store, after the old one was lost (see above).
  Status reconnect(Deadline deadline, const Status& lost);
  // The reply's code as this call's outcome; a refusal or error breaks the client.
  Status outcome(const std::string& what, StoreReply parsed, StoreReply* reply);

  std::atomic<int> fd_{-1};
  std::vector<int> lost_fds_;  // closed by the destructor (interrupt() may still use one)
  std::atomic<bool> interrupted_{false};
  std::string host_;
  int port_ = 0;
  std::string token_;
  StoreJoin join_;  // join_.nonce: the store's, once the hello was answered
  int64_t timeout_ms_ = 0;
  std::string address_;    // host:port, for messages
  Status broken_;          // set once the connection cannot be used any more
  bool answered_ = false;  // the server replied at least once (so it did not shed us)
};

}  // namespace zrt
