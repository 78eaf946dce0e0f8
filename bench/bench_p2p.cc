// Point-to-point bandwidth of the UCX transport between two ranks of this host (the process
// forks its peer before any UCX state exists), plus the wall time of an 8-rank communicator
// init + barrier + destroy. One message per iteration, acknowledged by a 0-byte reply, so the
// figure is the time a receiver waits for a whole message: bytes / (transfer + one latency).
//
//   build-*/bench/bench_p2p                      # both sizes, registered and ordinary memory
//   UCX_TLS=tcp,self build-*/bench/bench_p2p     # what tcp alone gives, for comparison
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "lib/bootstrap/bootstrap.h"
#include "lib/bootstrap/socket_util.h"
#include "transports/transport.h"
#include "zrt/zrt.h"

namespace zrt {
namespace {

// A two-rank Bootstrap over a socketpair made before fork.
class PairBootstrap final : public Bootstrap {
 public:
  PairBootstrap(int rank, int fd) : rank_(rank), fd_(fd) {}
  int rank() const override { return rank_; }
  int size() const override { return 2; }
  int local_rank() const override { return rank_; }
  int local_size() const override { return 2; }
  Status allgather(const void* input, void* output, size_t bytes) override {
    std::memcpy(static_cast<char*>(output) + rank_ * bytes, input, bytes);
    ZRT_RETURN_IF_ERROR(io(true, input, bytes));
    return io(false, static_cast<char*>(output) + (1 - rank_) * bytes, bytes);
  }
  Status barrier() override {
    char in = 0, out[2];
    return allgather(&in, out, 1);
  }

 private:
  Status io(bool write_side, const void* data, size_t bytes) {
    auto* p = static_cast<char*>(const_cast<void*>(data));
    while (bytes > 0) {
      ssize_t n = write_side ? write(fd_, p, bytes) : read(fd_, p, bytes);
      if (n <= 0) return Status::system_error("pair bootstrap", errno);
      p += n;
      bytes -= static_cast<size_t>(n);
    }
    return Status::ok();
  }
  int rank_;
  int fd_;
};

Status wait(Transport& transport, std::vector<TransportCompletion*> ops) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (;;) {
    bool all = true;
    for (auto* op : ops) all = all && op->done;
    if (all) break;
    if (transport.progress() > 0) continue;
    if (std::chrono::steady_clock::now() > deadline) return Status(ZRT_TIMEOUT, "bench wait");
    if (transport.arm()) {
      pollfd fd{transport.event_fd(), POLLIN, 0};
      poll(&fd, 1, 50);
    }
  }
  for (auto* op : ops) ZRT_RETURN_IF_ERROR(op->status);
  return Status::ok();
}

struct Peer {
  std::unique_ptr<Transport> transport;
  pid_t child = -1;
};
Peer* g_peer = nullptr;  // the benchmark process's one connection (bench-only state)

void* get_buffer(Transport& transport, size_t bytes, bool registered, std::vector<char>* heap) {
  void* buffer = nullptr;
  if (registered) {
    if (!transport.alloc_registered(bytes, &buffer).is_ok()) return nullptr;
    return buffer;
  }
  heap->assign(bytes, 1);  // touched
  return heap->data();
}

// The forked rank: answers each (bytes, registered) control message by receiving that many bytes
// and acknowledging; bytes == ~0 ends it.
int serve(int fd) {
  PairBootstrap bootstrap(1, fd);
  std::unique_ptr<Transport> transport;
  if (!create_ucx_transport(bootstrap, TransportOptions{}, &transport).is_ok()) return 1;
  std::vector<char> heap;
  size_t current = 0;
  bool current_registered = false;
  void* buffer = nullptr;
  for (;;) {
    uint64_t control[2];
    TransportCompletion op;
    if (!transport->recv(0, 1, control, sizeof(control), &op).is_ok()) return 1;
    if (!wait(*transport, {&op}).is_ok()) return 1;
    if (control[0] == ~uint64_t{0}) break;
    if (control[0] != current || (control[1] != 0) != current_registered) {
      if (current_registered && buffer != nullptr) transport->free_registered(buffer);
      current = control[0];
      current_registered = control[1] != 0;
      buffer = get_buffer(*transport, current, current_registered, &heap);
    }
    TransportCompletion data, ack;
    if (!transport->recv(0, 2, buffer, current, &data).is_ok()) return 1;
    if (!wait(*transport, {&data}).is_ok()) return 1;
    if (!transport->send(0, 3, nullptr, 0, &ack).is_ok()) return 1;
    if (!wait(*transport, {&ack}).is_ok()) return 1;
  }
  (void)bootstrap.barrier();
  return 0;
}

void BM_P2P(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  const bool registered = state.range(1) != 0;
  Transport& transport = *g_peer->transport;
  std::vector<char> heap;
  void* buffer = get_buffer(transport, bytes, registered, &heap);
  if (buffer == nullptr) {
    state.SkipWithError("alloc failed");
    return;
  }
  uint64_t control[2] = {bytes, registered ? 1u : 0u};
  for (auto _ : state) {
    TransportCompletion c, data, ack;
    if (!transport.send(1, 1, control, sizeof(control), &c).is_ok() ||
        !transport.send(1, 2, buffer, bytes, &data).is_ok() ||
        !transport.recv(1, 3, nullptr, 0, &ack).is_ok() ||
        !wait(transport, {&c, &data, &ack}).is_ok()) {
      state.SkipWithError("transfer failed");
      break;
    }
  }
  if (registered) transport.free_registered(buffer);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
  state.SetLabel(registered ? "registered" : "heap");
}
BENCHMARK(BM_P2P)
    ->ArgsProduct({{1 << 20, 256 << 20}, {0, 1}})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

// Wall time of `ranks` freshly forked processes running zrt_comm_init_env + barrier +
// zrt_comm_destroy, from the first fork to the last exit; -1 on failure.
double lifecycle_seconds(int ranks) {
  int port = 0;
  if (!pick_free_port(&port).is_ok()) return -1;
  const auto start = std::chrono::steady_clock::now();
  std::vector<pid_t> children;
  for (int rank = 0; rank < ranks; ++rank) {
    pid_t pid = fork();
    if (pid == 0) {
      setenv("RANK", std::to_string(rank).c_str(), 1);
      setenv("WORLD_SIZE", std::to_string(ranks).c_str(), 1);
      setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
      setenv("LOCAL_WORLD_SIZE", std::to_string(ranks).c_str(), 1);
      setenv("MASTER_ADDR", "127.0.0.1", 1);
      setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
      setenv("ZRT_JOB_TOKEN", "bench_p2p", 1);
      zrt_comm_t comm = nullptr;
      zrt_stream_t stream = nullptr;
      bool ok = zrt_comm_init_env(nullptr, &comm) == ZRT_SUCCESS &&
                zrt_stream_create(comm, ZRT_MEM_HOST, &stream) == ZRT_SUCCESS &&
                zrt_barrier(comm, stream) == ZRT_SUCCESS &&
                zrt_stream_synchronize(stream) == ZRT_SUCCESS;
      if (!ok) std::fprintf(stderr, "lifecycle rank %d: %s\n", rank, zrt_last_error());
      ok = zrt_comm_destroy(comm) == ZRT_SUCCESS && ok;
      _exit(ok ? 0 : 1);
    }
    children.push_back(pid);
  }
  bool ok = true;
  for (pid_t pid : children) {
    int status = 0;
    waitpid(pid, &status, 0);
    ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  if (!ok) return -1;
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace
}  // namespace zrt

int main(int argc, char** argv) {
  // Before any UCX state exists in this process (children must not inherit it).
  {
    std::vector<double> times;
    for (int i = 0; i < 5; ++i) times.push_back(zrt::lifecycle_seconds(8));
    std::sort(times.begin(), times.end());
    std::fprintf(stderr,
                 "bench_p2p: 8-rank init_env + barrier + destroy: median %.3f s (min %.3f, max "
                 "%.3f, 5 runs, from first fork to last exit)\n",
                 times[2], times[0], times[4]);
  }
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) return 1;
  pid_t child = fork();
  if (child == 0) {
    close(fds[0]);
    _exit(zrt::serve(fds[1]));
  }
  close(fds[1]);
  zrt::Peer peer;
  peer.child = child;
  zrt::PairBootstrap bootstrap(0, fds[0]);
  zrt::Status status =
      zrt::create_ucx_transport(bootstrap, zrt::TransportOptions{}, &peer.transport);
  if (!status.is_ok()) {
    std::fprintf(stderr, "bench_p2p: %s\n", status.message().c_str());
    return 1;
  }
  std::fprintf(stderr, "bench_p2p: %s\n", peer.transport->describe().c_str());
  zrt::g_peer = &peer;
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  uint64_t stop[2] = {~uint64_t{0}, 0};
  zrt::TransportCompletion c;
  if (peer.transport->send(1, 1, stop, sizeof(stop), &c).is_ok())
    (void)zrt::wait(*peer.transport, {&c});
  (void)bootstrap.barrier();
  peer.transport.reset();
  int wstatus = 0;
  waitpid(child, &wstatus, 0);
  return WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0 ? 0 : 1;
}
