// The rendezvous store's server: a key-value map behind one poll()-driven thread. Served by
// rank 0, or by zrt-run so that a dying rank 0 does not take the store with it.
//
// Every connection must present the job token in its first request (a hello); otherwise it is
// told why and disconnected. Each store lifetime draws a random nonce, sent in every hello
// reply; a hello that presents another nonce (a client that joined an earlier store on this
// port) is refused. Hellos may claim a rank number (jobs without an identity): the first claim
// fixes the world size, another size is refused, and a rank claimed twice poisons the store,
// every later request of every client being refused with the reason
// (docs/ARCHITECTURE.md#bootstrap). Refusals are told to the client and logged here. Get and wait
// requests block server-side (the connection is parked with a deadline, the thread keeps serving
// others) until their keys exist or the deadline passes; the reply to a timeout lists the keys
// still missing. Oversized or malformed messages are answered with an error naming the fault, then
// the connection is closed.
//
// Under a flood (thousands of idle or slow connections) bootstrap goes on: at most
// max_unauthenticated connections wait for their hello, each at most hello_timeout_ms; the
// oldest silent one makes room for a new one and is closed without a reply. When accept() runs
// out of fds, the oldest silent connection is closed, the listener rests 50 ms, and the
// failure is logged once per 10 s with a count, not once per attempt.
//
// Thread-safety: start/port/stop may be called from any one thread; the map is touched only
// by the server thread.
#pragma once

#include <memory>
#include <string>
#include <thread>

#include "lib/core/status.h"

namespace zrt {

struct StoreLimits {
  size_t max_unauthenticated = 1024;  // connections waiting for their hello
  int64_t hello_timeout_ms = 5000;    // how long one may wait before it is closed
};

class StoreServer {
 public:
  struct Counters {
    uint64_t evicted = 0;           // silent connections closed (cap or hello deadline)
    uint64_t accept_log_lines = 0;  // log lines about failed accepts
    uint64_t refused = 0;           // hellos refused: token, nonce or claim
  };

  // Listens on host:port (host empty = any address, port 0 = ephemeral; see port()) and starts
  // the serving thread.
  static Status start(const std::string& host, int port, const std::string& token,
                      std::unique_ptr<StoreServer>* server, const StoreLimits& limits = {});

  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;
  ~StoreServer();  // stop()

  int port() const { return port_; }
  uint64_t nonce() const { return nonce_; }  // this lifetime's, never 0
  Counters counters() const;                 // any thread

  // Stops serving: replies already queued get up to flush_ms to leave, then every connection
  // closes and the thread is joined. Idempotent.
  void stop(int64_t flush_ms = 500);

  struct State;  // the serving thread's world; defined in store_server.cc

 private:
  StoreServer() = default;

  std::unique_ptr<State> state_;
  std::thread thread_;
  int port_ = 0;
  uint64_t nonce_ = 0;
};

}  // namespace zrt
