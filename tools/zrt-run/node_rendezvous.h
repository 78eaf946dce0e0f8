// How the zrt-runs of a multi-node job meet, start together and fall together.
//
// Node 0's zrt-run serves the job's store (every interface, port --port or MASTER_PORT+1) for
// the whole job; every other node's zrt-run joins it, and all ranks of all nodes use it. Keys,
// all under "zrt-run/":
//   job            node 0's shape (node_shape.h); a joiner with another shape is refused
//   claim/K        a counter: node K may join once (a second --node-rank K, or another job's
//                  node on this port, is refused, and fails the job if it has not started)
//   node/K         node K's host name: it has joined
//   refused        why a node was refused before the start; node 0 fails on it
//   go             node 0 has seen every node: start the ranks
//   failed         the first failure anywhere: "node K (host H): rank R exited with code C";
//                  every node's watcher thread sees it and brings its ranks down
//   over/K         node K's ranks have ended; node 0 stops serving once every node is over
// The store's hello token is the job's identity (--rdzv-id, or the launcher's job id,
// lib/bootstrap/job_identity.h), so another job's nodes are refused at the door when there is one.
#pragma once

#include <signal.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "lib/bootstrap/store_client.h"
#include "lib/bootstrap/store_server.h"
#include "lib/core/status.h"
#include "tools/zrt-run/node_shape.h"

namespace zrt {

struct NodeOptions {
  JobShape shape;
  int node_rank = 0;
  std::string master_addr;
  int store_port = 0;
  std::string token;         // the store's hello token; "" = no job identity
  std::string token_source;  // for messages
  int64_t join_timeout_ms = 60000;
};

class NodeRendezvous {
 public:
  // Returns once every node has joined and node 0 said go. Errors name the node (and, for a
  // refused one, why). Gives up early when a signal of `interrupting` is pending.
  static Status form(const NodeOptions& options, const sigset_t& interrupting,
                     std::unique_ptr<NodeRendezvous>* rendezvous);
  ~NodeRendezvous();

  const std::string& host() const { return host_; }

  // Readable when the watcher has news for take_event().
  int event_fd() const { return event_read_; }
  // Another node's failure, or the loss of the store, as a sentence.
  std::string take_event();

  // Publishes this node's failure (the first report of the job wins).
  void report_failure(const std::string& text);

  // This node's ranks have ended. Node 0 waits up to wait_ms for every other node to end before
  // it stops serving; an error names the nodes that did not. *failed_elsewhere: the job's
  // failure report, if another node made one after this node's watcher stopped.
  Status finish(int64_t wait_ms, std::string* failed_elsewhere);

 private:
  NodeRendezvous() = default;
  Status serve_or_join(const sigset_t& interrupting);
  Status wait_for_nodes(const sigset_t& interrupting);
  Status wait_for_go(const sigset_t& interrupting);
  Status refuse(const std::string& why);
  void watch();

  NodeOptions options_;
  std::string host_;
  std::unique_ptr<StoreServer> server_;   // node 0
  std::unique_ptr<StoreClient> client_;   // this thread's
  std::unique_ptr<StoreClient> watcher_;  // the watch thread's
  std::thread watch_thread_;
  std::atomic<bool> stopping_{false};
  std::mutex mutex_;
  std::string event_;  // guarded by mutex_
  int event_read_ = -1;
  int event_write_ = -1;
};

}  // namespace zrt
