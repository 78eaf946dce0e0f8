#include "lib/bootstrap/socket_util.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <random>
#include <thread>

namespace zrt {
namespace {

// getaddrinfo for TCP over IPv4 or IPv6; host empty = the wildcard address (passive).
Status resolve(const std::string& host, int port, bool passive, addrinfo** result) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  const std::string service = std::to_string(port);
  const int rc =
      getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, result);
  if (rc != 0) {
    return Status::error(ZRT_SYSTEM_ERROR, "cannot resolve store address '{}:{}': {}", host, port,
                         gai_strerror(rc));
  }
  return Status::ok();
}

// ip_local_port_range: every outgoing connection and bind(0) takes its local port from it.
std::pair<int, int> ephemeral_port_range() {
  std::pair<int, int> range{32768, 60999};
  if (FILE* file = std::fopen("/proc/sys/net/ipv4/ip_local_port_range", "r")) {
    int low = 0, high = 0;
    if (std::fscanf(file, "%d %d", &low, &high) == 2 && 0 < low && low <= high) range = {low, high};
    std::fclose(file);
  }
  return range;
}

bool port_is_free(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_ANY);
  address.sin_port = htons(static_cast<uint16_t>(port));
  const bool bound = bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
  close(fd);
  return bound;
}

}  // namespace

Status pick_free_port(int* port) {
  const auto [ephemeral_low, ephemeral_high] = ephemeral_port_range();
  int low = 10000, high = ephemeral_low - 1;
  if (high - low < 1000) low = ephemeral_high + 1, high = 65535;  // a range set unusually low
  if (high - low < 1000) {
    return Status::error(ZRT_SYSTEM_ERROR,
                         "no port range outside the ephemeral one ({}-{}) to draw a free port from",
                         ephemeral_low, ephemeral_high);
  }
  std::random_device entropy;
  std::uniform_int_distribution<int> draw(low, high);
  for (int attempt = 0; attempt < 200; ++attempt) {
    const int candidate = draw(entropy);
    if (port_is_free(candidate)) {
      *port = candidate;
      return Status::ok();
    }
  }
  return Status::error(ZRT_SYSTEM_ERROR, "no free port in {}-{} after 200 draws", low, high);
}

Deadline deadline_after_ms(int64_t milliseconds) {
  // Clamped so that the sum cannot overflow the clock's nanoseconds (INT64_MAX ms would).
  return Clock::now() + std::chrono::milliseconds(std::clamp<int64_t>(milliseconds, 0, kMaxWaitMs));
}

int64_t add_wait_ms(int64_t a, int64_t b) {
  const int64_t x = std::clamp<int64_t>(a, 0, kMaxWaitMs);
  const int64_t y = std::clamp<int64_t>(b, 0, kMaxWaitMs);
  return std::min<int64_t>(x + y, kMaxWaitMs);
}

int remaining_ms(Deadline deadline) {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  if (left <= 0) return 0;
  return static_cast<int>(std::min<int64_t>(left, INT_MAX));
}

Status listen_tcp(const std::string& host, int port, int* fd, int* bound_port) {
  addrinfo* addresses = nullptr;
  ZRT_RETURN_IF_ERROR(resolve(host, port, true, &addresses));
  int last_error = EADDRNOTAVAIL;
  int listener = -1;
  for (addrinfo* address = addresses; address != nullptr; address = address->ai_next) {
    listener = socket(address->ai_family, address->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                      address->ai_protocol);
    if (listener < 0) {
      last_error = errno;
      continue;
    }
    const int one = 1;
    setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(listener, address->ai_addr, address->ai_addrlen) == 0 && listen(listener, 512) == 0) {
      break;
    }
    last_error = errno;
    close(listener);
    listener = -1;
    // The port is taken: trying the next family would bind [::]:port beside another job's
    // 0.0.0.0:port (Linux allows it with SO_REUSEADDR), and two stores would split the job.
    if (last_error == EADDRINUSE) break;
  }
  freeaddrinfo(addresses);
  if (listener < 0) {
    return Status::system_error(fmt::format("cannot listen on '{}:{}'", host, port), last_error);
  }
  sockaddr_storage local{};
  socklen_t length = sizeof(local);
  if (getsockname(listener, reinterpret_cast<sockaddr*>(&local), &length) != 0) {
    const int err = errno;
    close(listener);
    return Status::system_error("getsockname on the store socket", err);
  }
  *bound_port = local.ss_family == AF_INET6
                    ? ntohs(reinterpret_cast<sockaddr_in6*>(&local)->sin6_port)
                    : ntohs(reinterpret_cast<sockaddr_in*>(&local)->sin_port);
  *fd = listener;
  return Status::ok();
}

namespace {

// One non-blocking connect attempt bounded by the deadline: a SYN that is never answered (a
// dropped packet, a full backlog) costs the deadline, not the kernel's two minutes of retries.
// Returns 0 and the connected socket in *fd, or the errno of the failure (ETIMEDOUT when the
// deadline passed first).
int connect_once(const addrinfo& address, Deadline deadline, int* fd) {
  const int sock = socket(address.ai_family, address.ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                          address.ai_protocol);
  if (sock < 0) return errno;
  int err = 0;
  if (connect(sock, address.ai_addr, address.ai_addrlen) != 0) {
    err = errno;
    while (err == EINPROGRESS || err == EINTR) {
      pollfd entry{sock, POLLOUT, 0};
      const int ready = poll(&entry, 1, remaining_ms(deadline));
      if (ready < 0 && errno == EINTR) continue;
      if (ready < 0) {
        err = errno;
        break;
      }
      if (ready == 0) {
        err = ETIMEDOUT;
        break;
      }
      socklen_t length = sizeof(err);
      if (getsockopt(sock, SOL_SOCKET, SO_ERROR, &err, &length) != 0) err = errno;
    }
  }
  if (err != 0) {
    close(sock);
    return err;
  }
  // The callers' exchanges poll before every send/recv; blocking mode is what the header says.
  const int flags = fcntl(sock, F_GETFL);
  if (flags >= 0) fcntl(sock, F_SETFL, flags & ~O_NONBLOCK);
  const int one = 1;
  setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  *fd = sock;
  return 0;
}

}  // namespace

Status connect_tcp(const std::string& host, int port, Deadline deadline, int* fd) {
  // Back-off from 5 ms to 200 ms: quick when the server is just starting, cheap when it is late.
  auto pause = std::chrono::milliseconds(5);
  int last_error = 0;
  std::string last_failure;
  while (true) {
    addrinfo* addresses = nullptr;
    Status resolved = resolve(host, port, false, &addresses);
    if (resolved.is_ok()) {
      for (addrinfo* address = addresses; address != nullptr; address = address->ai_next) {
        const int err = connect_once(*address, deadline, fd);
        if (err == 0) {
          freeaddrinfo(addresses);
          return Status::ok();
        }
        last_error = err;
      }
      freeaddrinfo(addresses);
      last_failure.clear();
    } else {
      last_failure = resolved.message();  // name resolution may also come up late (DNS)
    }
    const auto now = Clock::now();
    if (now >= deadline) break;
    std::this_thread::sleep_for(std::min<Clock::duration>(pause, deadline - now));
    pause = std::min(pause * 2, std::chrono::milliseconds(200));
  }
  if (!last_failure.empty()) return Status(ZRT_TIMEOUT, "gave up connecting: " + last_failure);
  char text[128];
  return Status::error(ZRT_TIMEOUT, "cannot connect to the store at {}:{} before the timeout: {}",
                       host, port, strerror_r(last_error, text, sizeof(text)));
}

Status send_all(int fd, const void* data, size_t size, Deadline deadline, const std::string& what) {
  const auto* bytes = static_cast<const uint8_t*>(data);
  size_t sent = 0;
  while (sent < size) {
    pollfd entry{fd, POLLOUT, 0};
    const int ready = poll(&entry, 1, remaining_ms(deadline));
    if (ready < 0) {
      if (errno == EINTR) continue;
      return Status::system_error("poll while sending " + what, errno);
    }
    if (ready == 0) return Status::error(ZRT_TIMEOUT, "timed out sending {}", what);
    const ssize_t n = ::send(fd, bytes + sent, size - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      if (errno == EPIPE || errno == ECONNRESET) {
        return Status::error(ZRT_REMOTE_ERROR, "the store closed the connection while sending {}",
                             what);
      }
      return Status::system_error("send " + what, errno);
    }
    sent += static_cast<size_t>(n);
  }
  return Status::ok();
}

Status recv_all(int fd, void* data, size_t size, Deadline deadline, const std::string& what) {
  auto* bytes = static_cast<uint8_t*>(data);
  size_t received = 0;
  while (received < size) {
    pollfd entry{fd, POLLIN, 0};
    const int ready = poll(&entry, 1, remaining_ms(deadline));
    if (ready < 0) {
      if (errno == EINTR) continue;
      return Status::system_error("poll while receiving " + what, errno);
    }
    if (ready == 0) return Status::error(ZRT_TIMEOUT, "timed out receiving {}", what);
    const ssize_t n = ::recv(fd, bytes + received, size - received, MSG_DONTWAIT);
    if (n == 0) {
      return Status::error(ZRT_REMOTE_ERROR, "the store closed the connection while receiving {}",
                           what);
    }
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      if (errno == ECONNRESET) {
        return Status::error(ZRT_REMOTE_ERROR, "the store reset the connection while receiving {}",
                             what);
      }
      return Status::system_error("recv " + what, errno);
    }
    received += static_cast<size_t>(n);
  }
  return Status::ok();
}

}  // namespace zrt
