// Where the time of one small or medium collective goes (issue 18): forked ranks on this host
// over UCX, each call synchronized on its own (a latency, not a throughput), phase by phase.
//
//   build/bench/bench_breakdown [ranks=2] [iters=200] [rounds=3] [poll_us=0,50]
//
// Every rank opens one communicator per poll_us value (EngineOptions::busy_poll_us; 0 = the
// progress thread sleeps as soon as a turn finds nothing, as before issue 18) and times the
// same calls on each, alternating round after round, so that a machine others load slows all
// alike. For each of reduce_scatter, all_gather and all_reduce (out of place, f32 sum) at 64 KiB
// and 1 MiB (nccl-tests' size: the reduce-scatter input, the all-gather output), it prints rank
// 0's mean per call, in microseconds (the median over rounds):
//   call       enqueue to synchronize's return, as the caller sees it;
//   queue      posted to started (flight recorder): the progress thread's wake-up and the start;
//   task       in Task::start/progress: posting, copies into and out of windows, reductions;
//   transport  in Transport::progress;
//   poll       the bounded poll's turns that found nothing yet;
//   sleep      blocked in poll() with the collective in flight, and how many sleeps per call
//              (each one a wake-up paid when the peer's notification arrives);
//   other      started to done minus the four above (the loop's own bookkeeping, preemption);
//   return     done (flight recorder) to synchronize's return: the caller's wake-up.
// The columns come from engine/phase_clock.h and the flight recorder; both are on only here.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/file_exchange.h"
#include "collectives/algorithm_plan.h"
#include "collectives/collectives.h"
#include "lib/bootstrap/bootstrap.h"
#include "lib/core/settings.h"
#include "engine/engine.h"
#include "engine/engine_impl.h"
#include "engine/flight_recorder.h"
#include "transports/transport.h"

namespace {

using Clock = std::chrono::steady_clock;

using bench::file_allgather;
using bench::file_free;
using bench::file_test;
using bench::FileExchange;

void check(const zrt::Status& status, const char* what) {
  if (!status.is_ok()) {
    std::fprintf(stderr, "bench_breakdown: %s: %s\n", what, status.message().c_str());
    std::exit(1);
  }
}

struct Endpoint {
  std::unique_ptr<zrt::Bootstrap> bootstrap;
  std::unique_ptr<zrt::Transport> transport;
  std::unique_ptr<zrt::ProgressEngine> engine;
  zrt::EngineImpl* impl = nullptr;
  zrt::Stream* stream = nullptr;
};

void open_endpoint(FileExchange& exchange, int64_t poll_us, Endpoint* endpoint) {
  zrt_oob_t oob{sizeof(zrt_oob_t), file_allgather, file_test,     file_free,    &exchange,
                exchange.rank,     exchange.size,  exchange.rank, exchange.size};
  check(zrt::create_oob_bootstrap(oob, 60000, &endpoint->bootstrap), "bootstrap");
  zrt::TransportOptions transport_options;
  check(zrt::create_ucx_transport(*endpoint->bootstrap, transport_options, &endpoint->transport),
        "transport");
  zrt::EngineOptions options;
  options.rank = exchange.rank;
  options.size = exchange.size;
  options.check_order = 0;  // as a release build runs (the default fingerprint stays on)
  options.busy_poll_us = poll_us;
  options.trace_depth = 1024;
  zrt::SettingValue windows;
  check(zrt::load_setting(zrt::SettingId::kWindows, &windows), "ZRT_WINDOWS");
  options.peer_windows = exchange.size > 1 && windows.integer != 0;
  check(zrt::add_algorithm_plan(&options), "ZRT_ALGO");
  check(zrt::create_progress_engine(*endpoint->transport, options, &endpoint->engine), "engine");
  endpoint->impl = dynamic_cast<zrt::EngineImpl*>(endpoint->engine.get());
  if (endpoint->impl == nullptr)
    check(zrt::Status::error(ZRT_INTERNAL_ERROR, "not the host engine"), "engine");
  endpoint->impl->phase_clock().enable(true);
  check(endpoint->engine->create_stream(ZRT_MEM_HOST, &endpoint->stream), "stream");
}

// Microseconds per call of each column, in the header's order.
struct Breakdown {
  double call = 0, queue = 0, task = 0, transport = 0, poll = 0, sleep = 0, sleeps = 0, other = 0,
         ret = 0;
};

struct Variant {
  const char* name;
  zrt_coll_kind_t kind;
  size_t bytes;
};

Breakdown measure(Endpoint& endpoint, const Variant& variant, int rank, int size, int iters,
                  std::vector<char>& input, std::vector<char>& output) {
  zrt::Stream& stream = *endpoint.stream;
  zrt::CollectiveArgs args;
  args.kind = variant.kind;
  args.dtype = ZRT_F32;
  args.op = ZRT_SUM;
  const size_t elements = variant.bytes / sizeof(float);
  args.count = variant.kind == ZRT_COLL_ALL_REDUCE ? elements : elements / size;
  args.sendbuf = input.data();
  args.recvbuf = output.data();
  zrt::CollectiveArgs barrier;
  barrier.kind = ZRT_COLL_BARRIER;
  for (int i = 0; i < 5; ++i) {
    check(zrt::enqueue_collective(stream, rank, size, args), "warm");
    check(stream.synchronize(), "warm");
  }
  check(zrt::enqueue_collective(stream, rank, size, barrier), "barrier");
  check(stream.synchronize(), "barrier");

  zrt::FlightRecorder& recorder = endpoint.engine->recorder();
  zrt::PhaseClock& clock = endpoint.impl->phase_clock();
  const uint64_t first_id = recorder.recorded() + 1;
  std::vector<int64_t> returned(static_cast<size_t>(iters));
  clock.reset();
  const auto start = Clock::now();
  for (int i = 0; i < iters; ++i) {
    check(zrt::enqueue_collective(stream, rank, size, args), variant.name);
    check(stream.synchronize(), variant.name);
    returned[static_cast<size_t>(i)] = zrt::FlightRecorder::now_ns();
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  const zrt::PhaseClock::Totals totals = clock.read();

  std::vector<zrt::TraceRecord> records(recorder.depth());
  records.resize(recorder.snapshot(records.data(), records.size()));
  double queue_ns = 0, run_ns = 0, return_ns = 0;
  int matched = 0;
  for (const zrt::TraceRecord& record : records) {
    if (record.id < first_id || record.id >= first_id + static_cast<uint64_t>(iters)) continue;
    queue_ns += static_cast<double>(record.started_ns - record.posted_ns);
    run_ns += static_cast<double>(record.done_ns - record.started_ns);
    return_ns += static_cast<double>(returned[record.id - first_id] - record.done_ns);
    ++matched;
  }
  Breakdown out;
  const double per = 1e-3 / std::max(1, matched);  // ns totals -> us per call
  const double per_call = 1e-3 / iters;
  out.call = seconds * 1e6 / iters;
  out.queue = queue_ns * per;
  out.ret = return_ns * per;
  out.task = static_cast<double>(totals.task_ns) * per_call;
  out.transport = static_cast<double>(totals.transport_ns) * per_call;
  out.poll = static_cast<double>(totals.poll_ns) * per_call;
  out.sleep = static_cast<double>(totals.sleep_ns) * per_call;
  out.sleeps = static_cast<double>(totals.sleeps) / iters;
  out.other = std::max(0.0, run_ns * per - out.task - out.transport - out.poll - out.sleep);
  return out;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values.empty() ? 0 : values[values.size() / 2];
}

void run_rank(const std::string& dir, int rank, int size, int iters, int rounds,
              const std::vector<int64_t>& polls) {
  FileExchange exchange{dir, rank, size, 0};
  std::vector<Endpoint> endpoints(polls.size());
  for (size_t i = 0; i < polls.size(); ++i) open_endpoint(exchange, polls[i], &endpoints[i]);
  const Variant variants[] = {
      {"reduce_scatter", ZRT_COLL_REDUCE_SCATTER, size_t{64} << 10},
      {"reduce_scatter", ZRT_COLL_REDUCE_SCATTER, size_t{1} << 20},
      {"all_gather", ZRT_COLL_ALL_GATHER, size_t{64} << 10},
      {"all_gather", ZRT_COLL_ALL_GATHER, size_t{1} << 20},
      {"all_reduce", ZRT_COLL_ALL_REDUCE, size_t{64} << 10},
      {"all_reduce", ZRT_COLL_ALL_REDUCE, size_t{1} << 20},
  };
  std::vector<char> input(size_t{1} << 20, 0), output(size_t{1} << 20, 0);
  for (size_t i = 0; i < input.size(); i += 4) {
    const float value = static_cast<float>(i % 7);
    std::memcpy(input.data() + i, &value, sizeof(value));
  }
  if (rank == 0) {
    std::printf("# %d ranks, %d calls per figure, median of %d rounds; microseconds per call\n",
                size, iters, rounds);
    std::printf("%-15s %5s %7s %8s %7s %7s %9s %7s %7s %7s %7s %7s\n", "collective", "KiB",
                "poll_us", "call", "queue", "task", "transport", "poll", "sleep", "sleeps", "other",
                "return");
  }
  for (const Variant& variant : variants) {
    std::vector<std::vector<Breakdown>> samples(polls.size());
    for (int round = 0; round < rounds; ++round) {
      for (size_t e = 0; e < endpoints.size(); ++e) {
        samples[e].push_back(measure(endpoints[e], variant, rank, size, iters, input, output));
      }
    }
    if (rank != 0) continue;
    for (size_t e = 0; e < endpoints.size(); ++e) {
      auto col = [&](double Breakdown::*field) {
        std::vector<double> values;
        for (const Breakdown& sample : samples[e]) values.push_back(sample.*field);
        return median(values);
      };
      std::printf("%-15s %5zu %7lld %8.1f %7.1f %7.1f %9.1f %7.1f %7.1f %7.2f %7.1f %7.1f\n",
                  variant.name, variant.bytes >> 10, static_cast<long long>(polls[e]),
                  col(&Breakdown::call), col(&Breakdown::queue), col(&Breakdown::task),
                  col(&Breakdown::transport), col(&Breakdown::poll), col(&Breakdown::sleep),
                  col(&Breakdown::sleeps), col(&Breakdown::other), col(&Breakdown::ret));
      std::fflush(stdout);
    }
  }
  for (Endpoint& endpoint : endpoints) check(endpoint.engine->shutdown(), "shutdown");
}

}  // namespace

int main(int argc, char** argv) {
  const int size = argc > 1 ? std::atoi(argv[1]) : 2;
  const int iters = argc > 2 ? std::atoi(argv[2]) : 200;
  const int rounds = argc > 3 ? std::atoi(argv[3]) : 3;
  std::vector<int64_t> polls;
  std::stringstream list(argc > 4 ? argv[4] : "0,50");
  for (std::string item; std::getline(list, item, ',');) polls.push_back(std::atoll(item.c_str()));
  if (size < 2 || iters < 1 || iters > 1000 || rounds < 1 || polls.empty()) {
    std::fprintf(stderr,
                 "usage: bench_breakdown [ranks>=2] [iters 1..1000] [rounds>=1] [poll_us,...]\n");
    return 2;
  }
  char dir_template[] = "/tmp/zrt-breakdown-XXXXXX";
  if (mkdtemp(dir_template) == nullptr) {
    std::perror("mkdtemp");
    return 1;
  }
  const std::string dir = dir_template;
  std::vector<pid_t> pids;
  for (int rank = 0; rank < size; ++rank) {
    const pid_t pid = fork();
    if (pid == 0) {
      run_rank(dir, rank, size, iters, rounds, polls);
      std::fflush(stdout);
      _exit(0);
    }
    pids.push_back(pid);
  }
  int failures = 0;
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    failures += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  std::filesystem::remove_all(dir);
  return failures == 0 ? 0 : 1;
}
