// TCP helpers for the rendezvous store: listening, connecting with retry, and whole-buffer
// send/receive bounded by a deadline (poll-based: blocking waits, never spinning).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "lib/core/status.h"

namespace zrt {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;

// The longest wait a deadline represents (ZRT_TIMEOUT_MAX_MS); longer ones are clamped to it.
constexpr int64_t kMaxWaitMs = ZRT_TIMEOUT_MAX_MS;

Deadline deadline_after_ms(int64_t milliseconds);  // milliseconds clamped to [0, kMaxWaitMs]
// a + b for waits, both clamped to [0, kMaxWaitMs] and the sum saturating at kMaxWaitMs.
int64_t add_wait_ms(int64_t a, int64_t b);
// Milliseconds left until `deadline`, clamped to [0, INT32_MAX] for poll().
int remaining_ms(Deadline deadline);

// Listens on host:port (host empty = any address; port 0 = an ephemeral port, reported in
// *bound_port). The socket is non-blocking and close-on-exec, with SO_REUSEADDR.
Status listen_tcp(const std::string& host, int port, int* fd, int* bound_port);

// A port free on every IPv4 address now, for a listener another process opens later (a
// launcher choosing MASTER_PORT for rank 0). It is drawn at random below the kernel's
// ephemeral range (ip_local_port_range), as torchrun's default 29500 is: a port from bind(0)
// is free only until the next outgoing connection on the machine takes it as its local port.
// Fails with ZRT_SYSTEM_ERROR when 200 draws find none free.
Status pick_free_port(int* port);

// Connects to host:port, retrying refused or unreachable attempts with a growing back-off
// until the deadline (the server may start after the client). Each attempt is non-blocking and
// bounded by the deadline too (an unanswered SYN does not wait for the kernel's retries). The
// socket returned is blocking.
Status connect_tcp(const std::string& host, int port, Deadline deadline, int* fd);

// Sends / receives exactly `size` bytes before the deadline. `what` names the exchange in
// errors. A peer that closes the connection gives ZRT_REMOTE_ERROR.
Status send_all(int fd, const void* data, size_t size, Deadline deadline, const std::string& what);
Status recv_all(int fd, void* data, size_t size, Deadline deadline, const std::string& what);

}  // namespace zrt
