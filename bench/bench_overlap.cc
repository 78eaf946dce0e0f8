// Overlap benchmark: how much of the partition manager's communication hides behind compute.
//
// A synthetic model of `units` units of `numel` f32 elements each is trained on 2 forked ranks
// at stage 2 and stage 3. The framework's work per step (struct Framework below) is by default
// device-like, the model: each unit's forward and backward compute is a wait that
// leaves the CPU free (what a GPU kernel looks like to the host; the backward kernel writes the
// unit's gradient at zrt_partition_grad_data inside its wait), and the optimizer callback only
// launches its kernel (see Framework). With the `host` argument the framework fills each
// gradient and runs an SGD over the shard on the CPU instead.
// Three figures per stage, medians over the timed steps:
//   comm     a step without compute waits, less the framework's own work in it (host mode:
//            the optimizer and the gradient fills): the time zrt's calls take when there is
//            nothing to hide them behind;
//   compute  the framework's work alone, with no zrt call: the waits (host mode: and the
//            optimizer and fills, on buffers of its own), measured;
//   step     both together.
// A calibration run first sets the sleeps so that compute equals comm (balanced), the hardest
// case for overlap; two more rounds correct them for their overshoot and for drift. The target is
// step <= 1.15 x max(compute, comm). The three kinds of step are then timed in turn, round after
// round (each kind two steps, the second timed), so that load from elsewhere on the machine falls
// on all three alike. Each step ends at a barrier the bench waits for, which lines the ranks up
// for the next; a step's time runs until that barrier has passed, so work zrt leaves running when
// a step returns counts in it. Every figure is the slowest rank's median.
//
// Stage 3 also times, in the same rounds, a manager whose units sit at their slots' addresses
// (the path before stable addresses, docs/ARCHITECTURE.md#stable-unit-addresses): the ratio of
// the two is what mapping each fetched unit at its own address costs.
//
// BENCH_OVERLAP_GRAD_WINDOWS=1 (or 2) runs the managers with that many gradient staging windows,
// BENCH_OVERLAP_STEP_BACKUP=0, 1 or 2 with that step_backup (the optimizer here is the
// framework's callback, so the segment backup copies each segment before calling it).
//
// BENCH_OVERLAP_TIMELINE=1 prints, for rank 0's median step of each run, every call of the
// training thread with its start and duration, and the total per kind of call.
//
// The host optimizer is plain SGD, so the managers are configured with no optimizer state slots
// (optimizer_slots 0; the fourth argument sets another count, e.g. 2 to carry Adam's state
// through the step backup without using it). Every other setting is the default but those the
// model needs: prefetch depth 2, no persistent parameters, buckets of half a unit, and (stage 3)
// each step gathering the next forward's first units (prefetch_next_step: steps follow steps).
//
// Usage: bench_overlap [units] [numel] [steps] [optimizer_slots] [device|host|offload]
//        (defaults 16, 1048576, 20, 0, device)
//
// `offload` compares, at stages 1-3 in the device-like model, the step without offload (the
// optimizer a kernel launch, no CPU time) with offload_optimizer = 1 (the optimizer the host
// SGD, run per segment on the CPU as each reduction ends), side by side in the same rounds,
// balanced and with no compute at all, next to the optimizer pass alone over a whole shard
// (timed in the same rounds): the pipeline overlaps the pass with the reductions still running,
// so the step grows by less than the pass. For rank 0's median offloaded step it prints where
// the step call's time went, from the flight recorder's records of it
// (zero/partition/step_trace.h): the per-segment waits for the gradients, the callbacks and the
// conversions back, summed, then the backup, the drain, the vote and the publish. The same
// rounds time the offloaded step armed with zrt_partition_step_in_backward before its forward,
// so the callbacks run on zrt's thread during backward: its growth over the plain step, as a
// multiple of the pass, is what the optimizer during backward leaves exposed.
//
// The default model is 16 units (layers) of 4 MiB, 64 MiB in all. Some communication is exposed
// whatever the overlap: the first unit's gather after the optimizer (stage 2: the step's
// gathers; stage 3: the next step's first fetch, unless the framework works between steps) and
// the last unit's reduction before it, one unit's worth each. Here 8 units of 8 MiB read about
// the same (the per-unit costs of the bench's sleeps and of zrt's calls grow with the count).
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "zero/api/partition_handle.h"
#include "lib/core/environment.h"
#include "engine/flight_recorder.h"
#include "zero/partition/step_trace.h"
#include "zrt/zrt.h"

namespace {

using Clock = std::chrono::steady_clock;

#define CHECK_ZRT(call)                                                                            \
  do {                                                                                             \
    zrt_status_t status_ = (call);                                                                 \
    if (status_ != ZRT_SUCCESS) {                                                                  \
      std::fprintf(stderr, "%s -> %s: %s\n", #call, zrt_status_string(status_), zrt_last_error()); \
      std::exit(1);                                                                                \
    }                                                                                              \
  } while (0)

struct Model {
  zrt_partition_t pm = nullptr;  // null: the framework's work alone, without zrt
  int units = 0;
  std::vector<int> params;
};

// slot_addresses: stage 3's units at their slots' addresses (PartitionManager::
// set_stable_addresses, not in the C API), the path before stable addresses.
Model build(zrt_comm_t comm, int stage, int units, size_t numel, int slots, bool offload = false,
            bool slot_addresses = false) {
  zrt_partition_config_t config = ZRT_PARTITION_CONFIG_INIT;
  config.stage = stage;
  config.offload_optimizer = offload ? 1 : 0;
  config.optimizer_slots = slots;
  config.prefetch_depth = 2;
  config.persistence_threshold = 0;
  config.bucket_bytes = numel * 4 / 2;  // two buckets per unit
  config.prefetch_next_step = 1;        // a training loop: another step always follows
  // BENCH_OVERLAP_GRAD_WINDOWS=1|2 sets config.grad_windows (one window against two);
  // BENCH_OVERLAP_STEP_BACKUP=0|1|2 config.step_backup (none, full, segment).
  static const char* windows = zrt::read_environment("BENCH_OVERLAP_GRAD_WINDOWS");
  if (windows != nullptr) config.grad_windows = std::atoi(windows);
  static const char* backup = zrt::read_environment("BENCH_OVERLAP_STEP_BACKUP");
  if (backup != nullptr) config.step_backup = std::atoi(backup);
  Model m;
  m.units = units;
  CHECK_ZRT(zrt_partition_create(comm, &config, &m.pm));
  if (slot_addresses) m.pm->impl->set_stable_addresses(false);
  for (int u = 0; u < units; ++u) {
    int unit = 0, param = 0;
    CHECK_ZRT(zrt_partition_add_unit(m.pm, "layer", &unit));
    CHECK_ZRT(zrt_partition_add_param(m.pm, unit, "w", numel, 0, &param));
    m.params.push_back(param);
  }
  CHECK_ZRT(zrt_partition_finalize(m.pm));
  std::vector<float> init(numel, 0.01f);
  for (int p : m.params) CHECK_ZRT(zrt_partition_load_param(m.pm, p, init.data(), ZRT_F32));
  return m;
}

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// Every call of the training thread is timed (two clock reads a call, outside zrt): the
// framework's share of a step comes from it, and BENCH_OVERLAP_TIMELINE=1 prints it.
struct Span {
  const char* what;
  int unit;
  double start_ms, ms;
};

struct Timeline {
  bool on = false;
  Clock::time_point origin;
  std::vector<Span> spans;
  template <typename F>
  void time(const char* what, int unit, F&& body) {
    if (!on) {
      body();
      return;
    }
    const auto start = Clock::now();
    body();
    spans.push_back({what, unit, std::chrono::duration<double, std::milli>(start - origin).count(),
                     ms_since(start)});
  }
};

// How the framework's own work is modelled. Device-like (the default, the model): the
// compute of a unit is a wait that leaves the CPU free, as a GPU kernel looks to the host; the
// backward kernel writes the unit's gradient inside its wait. The optimizer is a kernel too, and
// the callback returns once it is launched (with ZRT_MEM_CUDA zrt orders its publishing after
// the framework's kernels on the device, docs/API.md), so it has no wait: an update kernel
// streams the shard at device memory bandwidth, a small share of a real step's compute (Adam moves
// 16 bytes per shard element; the model's compute is 6 FLOPs per parameter per token). An earlier
// version waited as long as the host SGD below takes, about a fifth of the step here: time in
// which no communication can run (the reductions must end before it, the gathers of stages 1/2
// need its result), a share no device framework spends. Host (`host` argument): the framework
// fills each gradient and runs that SGD on the CPU, memory-bound work that competes with zrt's
// copies for the memory system (on these machines one core nearly saturates it, so that work
// and zrt's cannot overlap).
struct Framework {
  bool host = false;
  bool cpu_optimizer = false;  // offload: the optimizer is the host SGD even in device-like mode
  // offload: zrt_partition_step_in_backward before the step's forward, so the callbacks run on
  // zrt's thread during backward; their time is summed in callback_ns (the timeline belongs to
  // the training thread) and added to the step's spans after it.
  bool in_backward = false;
  std::atomic<int64_t>* callback_ns = nullptr;
  Timeline* timeline = nullptr;
};

void host_sgd(float* master, const float* grad, size_t count) {
  for (size_t i = 0; i < count; ++i) master[i] -= 1e-3f * grad[i];
}

// The framework's optimizer, called by zrt_partition_step (user_data: the Framework).
zrt_status_t optimizer(const zrt_optimizer_args_t* args, void* user_data) {
  const auto* framework = static_cast<const Framework*>(user_data);
  const bool sgd = framework->host || framework->cpu_optimizer;
  if (framework->in_backward) {
    const auto start = Clock::now();
    if (sgd) host_sgd(args->master, args->grad, args->count);
    framework->callback_ns->fetch_add(
        std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count());
    return ZRT_SUCCESS;
  }
  framework->timeline->time("  optimizer", -1, [args, framework, sgd] {
    if (sgd) host_sgd(args->master, args->grad, args->count);
  });
  return ZRT_SUCCESS;
}

void print_timeline(const std::vector<Span>& spans, double step_ms) {
  std::printf("  timeline of the median step (rank 0, ms from its start):\n");
  std::vector<std::pair<std::string, double>> totals;
  for (const Span& s : spans) {
    if (s.unit >= 0) {
      std::printf("    %8.2f %7.2f  %s %d\n", s.start_ms, s.ms, s.what, s.unit);
    } else {
      std::printf("    %8.2f %7.2f  %s\n", s.start_ms, s.ms, s.what);
    }
    auto it = std::find_if(totals.begin(), totals.end(),
                           [&](const auto& t) { return t.first == s.what; });
    if (it == totals.end()) {
      totals.emplace_back(s.what, s.ms);
    } else {
      it->second += s.ms;
    }
  }
  double accounted = 0;
  std::printf("  per kind:");
  for (const auto& [what, ms] : totals) {
    std::printf(" %s %.1f,", what.c_str(), ms);
    if (what[0] != ' ') accounted += ms;  // indented: inside another call (the step)
  }
  std::printf(" other %.1f (step %.1f ms)\n", step_ms - accounted, step_ms);
}

// One step. With m.pm null, the framework's work alone: the same waits, and in host mode the
// fills of a gradient buffer of its own and the SGD over a shard of its own (`scratch`).
double train_step(Model& m, size_t numel, std::chrono::microseconds compute,
                  const Framework& framework, std::vector<float>& scratch) {
  Timeline& tl = *framework.timeline;
  const auto start = Clock::now();
  tl.origin = start;
  tl.spans.clear();
  const bool zrt = m.pm != nullptr;
  const int units = m.units;
  void* self = const_cast<Framework*>(&framework);
  if (zrt && framework.in_backward) {
    framework.callback_ns->store(0);
    tl.time("step_in_backward", -1,
            [&] { CHECK_ZRT(zrt_partition_step_in_backward(m.pm, optimizer, self)); });
  }
  for (int u = 0; u < units; ++u) {
    if (zrt) tl.time("fetch", u, [&] { CHECK_ZRT(zrt_partition_fetch(m.pm, u)); });
    tl.time("compute", u, [&] { std::this_thread::sleep_for(compute); });
    if (zrt) tl.time("release", u, [&] { CHECK_ZRT(zrt_partition_release(m.pm, u)); });
  }
  for (int u = units - 1; u >= 0; --u) {
    if (zrt) tl.time("fetch", u, [&] { CHECK_ZRT(zrt_partition_fetch(m.pm, u)); });
    void* grad = scratch.data();
    if (zrt) {
      tl.time("grad_data", u,
              [&] { CHECK_ZRT(zrt_partition_grad_data(m.pm, m.params[u], &grad)); });
    }
    tl.time("compute", u, [&] { std::this_thread::sleep_for(compute); });
    if (framework.host) {
      tl.time("write_grad", u, [&] { std::fill_n(static_cast<float*>(grad), numel, 1e-3f); });
    }
    if (zrt) tl.time("grad_ready", u, [&] { CHECK_ZRT(zrt_partition_grad_ready(m.pm, u)); });
    if (zrt) tl.time("release", u, [&] { CHECK_ZRT(zrt_partition_release(m.pm, u)); });
  }
  if (zrt) {
    tl.time("step", -1, [&] { CHECK_ZRT(zrt_partition_step(m.pm, optimizer, self)); });
    if (framework.in_backward) {
      // The callbacks ran on zrt's thread, in the step and before it.
      tl.spans.push_back(
          {"  optimizer", -1, 0.0, static_cast<double>(framework.callback_ns->load()) / 1e6});
    }
  } else {
    // Master and gradient of the shard (units x numel / 2 each), as the optimizer sees them.
    const size_t shard = static_cast<size_t>(units) * numel / 2;
    zrt_optimizer_args_t args{};
    args.size = sizeof(args);
    args.master = scratch.data();
    args.grad = scratch.data() + shard;
    args.count = shard;
    optimizer(&args, const_cast<Framework*>(&framework));
  }
  return ms_since(start);
}

// Milliseconds of the step the framework's own work took (gradient writes and optimizer).
double framework_ms(const std::vector<Span>& spans) {
  double ms = 0;
  for (const Span& s : spans) {
    if (std::strcmp(s.what, "write_grad") == 0 || std::strcmp(s.what, "  optimizer") == 0) {
      ms += s.ms;
    }
  }
  return ms;
}

// Where the last offloaded step's time went, from the flight recorder's records of it
// (zero/partition/step_trace.h): milliseconds per part, summed over the segments, and how far
// into the step the last gradient reduction ended.
std::string offload_breakdown(zrt_partition_t pm) {
  const zrt::FlightRecorder& recorder = pm->comm->impl->engine().recorder();
  std::vector<zrt::TraceRecord> records(recorder.depth());
  records.resize(recorder.snapshot(records.data(), records.size()));
  const zrt::TraceRecord* step = nullptr;
  for (const zrt::TraceRecord& r : records) {
    if (r.call.partition && r.call.call != nullptr && std::strcmp(r.call.call, "step") == 0) {
      step = &r;
    }
  }
  if (step == nullptr || step->state != zrt::TraceState::kDone) return "no step in the recorder";
  const char* parts[] = {zrt::kTraceStepBackup,       zrt::kTraceOffloadWait,
                         zrt::kTraceOffloadOptimizer, zrt::kTraceOffloadConvert,
                         zrt::kTraceOffloadDrain,     zrt::kTraceStepVote,
                         zrt::kTraceStepPublish};
  double ms[std::size(parts)] = {};
  double reduced_ms = 0;  // the last gradient reduction's end, from the step's start
  const double step_ms = static_cast<double>(step->done_ns - step->started_ns) / 1e6;
  for (const zrt::TraceRecord& r : records) {
    if (r.state != zrt::TraceState::kDone) continue;
    if (!r.call.partition) {
      const bool gradients = r.call.kind == ZRT_COLL_REDUCE_SCATTER ||
                             (r.call.kind == ZRT_COLL_ALL_REDUCE && r.call.dtype != ZRT_I32 &&
                              r.call.dtype != ZRT_F64);
      if (gradients && r.posted_ns < step->started_ns) {
        reduced_ms = std::max(reduced_ms, static_cast<double>(r.done_ns - step->started_ns) / 1e6);
      }
      continue;
    }
    if (r.posted_ns < step->started_ns || r.done_ns > step->done_ns) continue;
    for (size_t i = 0; i < std::size(parts); ++i) {
      if (std::strcmp(r.call.call, parts[i]) == 0) {
        ms[i] += static_cast<double>(r.done_ns - r.started_ns) / 1e6;
      }
    }
  }
  std::string text;
  double accounted = 0;
  for (size_t i = 0; i < std::size(parts); ++i) {
    text += std::string(i == 0 ? "" : ", ") + parts[i] + " " + std::to_string(ms[i]).substr(0, 5);
    accounted += ms[i];
  }
  char tail[160];
  std::snprintf(tail, sizeof(tail),
                ", other %.2f (step call %.2f ms); last reduction ended %.2f ms into the step",
                step_ms - accounted, step_ms, reduced_ms);
  return text + tail;
}

struct Figure {
  double step_ms;       // the slowest rank's median step
  double framework_ms;  // in that rank's median step: gradient writes and optimizer
};

// One kind of step the bench times: a model (or the framework alone) with a sleep per unit.
struct Kind {
  Model* model;
  std::chrono::microseconds compute;
  bool print;  // BENCH_OVERLAP_TIMELINE: rank 0 prints the median step's timeline
  std::vector<double> times;
  std::vector<std::vector<Span>> timelines;
  bool cpu_optimizer = false;  // Framework::cpu_optimizer for this kind's steps
  bool breakdown = false;      // offloaded: rank 0 prints the median step's offload_breakdown
  std::vector<std::string> breakdowns{};
  bool in_backward = false;  // Framework::in_backward for this kind's steps
};

// Runs rounds + 2 rounds (the first two record the fetch order and warm up), each two steps of
// every kind in turn (the second timed), so that every kind sees the machine in the same state,
// and returns per kind the slowest rank's median. `sync` is a stream of the bench's own:
// collectives return at once, so the barrier that ends each step (and lines the ranks up for the
// next) and the exchange of the results are waited for on it.
std::vector<Figure> measure(zrt_comm_t comm, zrt_stream_t sync, std::vector<Kind> kinds,
                            size_t numel, Framework framework, int rounds,
                            std::vector<float>& scratch) {
  Timeline tl;
  tl.on = true;  // the framework's share of the step is read from the spans
  framework.timeline = &tl;
  std::atomic<int64_t> callback_ns{0};
  framework.callback_ns = &callback_ns;
  auto barrier = [&] {
    CHECK_ZRT(zrt_barrier(comm, sync));
    CHECK_ZRT(zrt_stream_synchronize(sync));
  };
  barrier();
  for (int r = 0; r < rounds + 2; ++r) {
    for (Kind& kind : kinds) {
      // Two steps of a kind: the first takes over what the previous kind's last step left
      // running (post-step gathers, the backup's copy) and is not timed.
      for (int s = 0; s < 2; ++s) {
        // A step counts until the barrier after it: work zrt left running when the step
        // returned would otherwise hide in the barrier's wait.
        framework.cpu_optimizer = kind.cpu_optimizer;
        framework.in_backward = kind.in_backward;
        train_step(*kind.model, numel, kind.compute, framework, scratch);
        tl.time("barrier", -1, barrier);
      }
      if (r < 2) continue;
      kind.times.push_back(ms_since(tl.origin));
      kind.timelines.push_back(tl.spans);
      // Outside the timed step; the ring still holds the step (the barrier adds one record).
      if (kind.breakdown) kind.breakdowns.push_back(offload_breakdown(kind.model->pm));
    }
  }
  static const bool show = zrt::read_environment("BENCH_OVERLAP_TIMELINE") != nullptr;
  std::vector<double> mine;
  for (Kind& kind : kinds) {
    std::vector<size_t> order(kind.times.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(),
              [&](size_t a, size_t b) { return kind.times[a] < kind.times[b]; });
    const size_t median = order[order.size() / 2];
    if (kind.print && show) print_timeline(kind.timelines[median], kind.times[median]);
    if (kind.breakdown) {
      std::printf("  offloaded step%s, %s (rank 0, its median step), ms: %s\n",
                  kind.in_backward ? " (optimizer in backward)" : "",
                  kind.compute.count() > 0 ? "balanced" : "no compute",
                  kind.breakdowns[median].c_str());
    }
    mine.push_back(kind.times[median]);
    mine.push_back(framework_ms(kind.timelines[median]));
  }
  // Every rank reports the slowest rank's median (and that rank's framework share).
  std::vector<double> all(2 * mine.size());
  CHECK_ZRT(zrt_all_gather(comm, mine.data(), all.data(), mine.size(), ZRT_F64, sync));
  CHECK_ZRT(zrt_stream_synchronize(sync));
  std::vector<Figure> figures;
  for (size_t k = 0; k < kinds.size(); ++k) {
    const double* a = &all[2 * k];
    const double* b = &all[mine.size() + 2 * k];
    figures.push_back(a[0] >= b[0] ? Figure{a[0], a[1]} : Figure{b[0], b[1]});
  }
  return figures;
}

// The sleep per unit that balances compute against a step's communication (see rank_main).
std::chrono::microseconds balance(zrt_comm_t comm, zrt_stream_t sync, Model& m, int units,
                                  size_t numel, const Framework& framework, int steps,
                                  std::vector<float>& scratch) {
  using us = std::chrono::microseconds;
  Model alone;
  alone.units = units;
  const std::vector<Figure> calibration =
      measure(comm, sync, {{&m, us(0), false, {}, {}}, {&alone, us(0), false, {}, {}}}, numel,
              framework, steps, scratch);
  const double calls = 2.0 * units;
  double sleep_ms =
      std::max(0.0, calibration[0].step_ms - calibration[0].framework_ms - calibration[1].step_ms);
  for (int round = 0; round < 2; ++round) {
    const us trial_sleep(static_cast<int64_t>(sleep_ms * 1000.0 / calls));
    const std::vector<Figure> trial =
        measure(comm, sync, {{&m, us(0), false, {}, {}}, {&alone, trial_sleep, false, {}, {}}},
                numel, framework, steps, scratch);
    sleep_ms =
        std::max(0.0, sleep_ms + (trial[0].step_ms - trial[0].framework_ms) - trial[1].step_ms);
  }
  return us(static_cast<int64_t>(sleep_ms * 1000.0 / calls));
}

// offload_optimizer against the device-like step (see the top of the file).
void offload_comparison(zrt_comm_t comm, zrt_stream_t sync, int rank, int units, size_t numel,
                        int steps, int slots, std::vector<float>& scratch) {
  using us = std::chrono::microseconds;
  Framework framework;  // device-like
  // The optimizer pass alone: the host SGD over a shard of the framework's own (no zrt call),
  // timed in the same rounds as the steps.
  Model alone;
  alone.units = units;
  for (int stage : {1, 2, 3}) {
    Model plain = build(comm, stage, units, numel, slots);
    Model offloaded = build(comm, stage, units, numel, slots, /*offload=*/true);
    const us per_unit = balance(comm, sync, plain, units, numel, framework, steps, scratch);
    const std::vector<Figure> f =
        measure(comm, sync,
                {{&plain, per_unit, rank == 0, {}, {}, false},
                 {&offloaded, per_unit, rank == 0, {}, {}, true, rank == 0, {}},
                 {&plain, us(0), false, {}, {}, false},
                 {&offloaded, us(0), false, {}, {}, true, rank == 0, {}},
                 {&alone, us(0), false, {}, {}, true},
                 {&offloaded, per_unit, false, {}, {}, true, rank == 0, {}, true},
                 {&offloaded, us(0), false, {}, {}, true, rank == 0, {}, true}},
                numel, framework, steps, scratch);
    const double pass_ms = f[4].framework_ms;
    if (rank == 0) {
      const double balanced = f[1].step_ms - f[0].step_ms;
      const double bare = f[3].step_ms - f[2].step_ms;
      // The callbacks' time inside the offloaded step (the slowest rank's median step) is the
      // pass as the pipeline runs it: growth below it is optimizer time hidden by reductions.
      std::printf(
          "stage %d offload, 2 ranks, %d units x %zu f32, %d state slots, device-like: optimizer "
          "pass alone %.1f ms; balanced: step %.1f ms without offload, %.1f ms with, callbacks "
          "%.1f ms of it, growth %.1f ms = %.2f x the callbacks, %.2f x the pass; no compute: "
          "%.1f ms, %.1f ms, callbacks %.1f ms, growth %.1f ms = %.2f x the callbacks, %.2f x "
          "the pass\n",
          stage, units, numel, slots, pass_ms, f[0].step_ms, f[1].step_ms, f[1].framework_ms,
          balanced, balanced / f[1].framework_ms, balanced / pass_ms, f[2].step_ms, f[3].step_ms,
          f[3].framework_ms, bare, bare / f[3].framework_ms, bare / pass_ms);
      // The optimizer run during backward (zrt_partition_step_in_backward), same rounds.
      const double early = f[5].step_ms - f[0].step_ms;
      const double early_bare = f[6].step_ms - f[2].step_ms;
      std::printf(
          "stage %d offload, optimizer in backward: balanced: step %.1f ms, callbacks %.1f ms, "
          "growth %.1f ms = %.2f x the pass; no compute: step %.1f ms, callbacks %.1f ms, "
          "growth %.1f ms = %.2f x the pass\n",
          stage, f[5].step_ms, f[5].framework_ms, early, early / pass_ms, f[6].step_ms,
          f[6].framework_ms, early_bare, early_bare / pass_ms);
      std::fflush(stdout);
    }
    CHECK_ZRT(zrt_partition_destroy(offloaded.pm));
    CHECK_ZRT(zrt_partition_destroy(plain.pm));
  }
}

void rank_main(int units, size_t numel, int steps, int slots, bool host, bool offload) {
  zrt_comm_t comm = nullptr;
  CHECK_ZRT(zrt_comm_init_env(nullptr, &comm));
  int rank = 0;
  CHECK_ZRT(zrt_comm_rank(comm, &rank));
  zrt_stream_t sync = nullptr;  // created first on every rank, before the managers' streams
  CHECK_ZRT(zrt_stream_create(comm, ZRT_MEM_HOST, &sync));
  // The gradient window of the compute-only run, then master and gradient of its shard.
  std::vector<float> scratch(std::max(numel, static_cast<size_t>(units) * numel), 0.01f);
  using us = std::chrono::microseconds;
  if (offload) {
    offload_comparison(comm, sync, rank, units, numel, steps, slots, scratch);
    CHECK_ZRT(zrt_stream_destroy(sync));
    CHECK_ZRT(zrt_comm_destroy(comm));
    return;
  }
  Framework framework;
  framework.host = host;
  for (int stage : {2, 3}) {
    Model m = build(comm, stage, units, numel, slots);
    // Stage 3 also times the units at their slots' addresses (the path before stable addresses,
    // kept for this comparison only), alternating with the rest round after round.
    Model at_slots;
    if (stage == 3) at_slots = build(comm, stage, units, numel, slots, false, true);
    Model alone;
    alone.units = units;
    const bool print = rank == 0;
    // Calibration: comm is a step without sleeps, less the framework's own work in it; the
    // sleeps make up what the framework's own work leaves of it (balanced). A sleep lasts longer
    // than asked (the wake-up), and comm drifts with the machine, so two more rounds time comm
    // and compute side by side and move the sleeps by what still separates them.
    const std::vector<Figure> calibration =
        measure(comm, sync, {{&m, us(0), false, {}, {}}, {&alone, us(0), false, {}, {}}}, numel,
                framework, steps, scratch);
    const double calls = 2.0 * units;
    double sleep_ms = std::max(
        0.0, calibration[0].step_ms - calibration[0].framework_ms - calibration[1].step_ms);
    for (int round = 0; round < 2; ++round) {
      const us trial_sleep(static_cast<int64_t>(sleep_ms * 1000.0 / calls));
      const std::vector<Figure> trial =
          measure(comm, sync, {{&m, us(0), false, {}, {}}, {&alone, trial_sleep, false, {}, {}}},
                  numel, framework, steps, scratch);
      sleep_ms =
          std::max(0.0, sleep_ms + (trial[0].step_ms - trial[0].framework_ms) - trial[1].step_ms);
    }
    const us per_unit(static_cast<int64_t>(sleep_ms * 1000.0 / calls));
    // The figures: the three kinds of step taken in turn.
    std::vector<Kind> kinds = {{&m, us(0), print, {}, {}},
                               {&alone, per_unit, false, {}, {}},
                               {&m, per_unit, print, {}, {}}};
    if (stage == 3) {
      kinds.push_back({&at_slots, us(0), false, {}, {}});
      kinds.push_back({&at_slots, per_unit, false, {}, {}});
    }
    const std::vector<Figure> figures =
        measure(comm, sync, kinds, numel, framework, steps, scratch);
    const double comm_ms = figures[0].step_ms - figures[0].framework_ms;
    const double compute_ms = figures[1].step_ms;
    const double step_ms = figures[2].step_ms;
    const double bound = std::max(compute_ms, comm_ms);
    if (rank == 0) {
      std::printf(
          "stage %d, 2 ranks, %d units x %zu f32, %d state slots, %s framework: comm alone %.1f "
          "ms, compute "
          "alone %.1f ms (sleeps %.1f + framework work %.1f), step %.1f ms, step / max(compute, "
          "comm) = %.3f (target <= 1.15), step / (compute + comm) = %.3f\n",
          stage, units, numel, slots, host ? "host" : "device-like", comm_ms, compute_ms,
          2.0 * units * static_cast<double>(per_unit.count()) / 1000.0, calibration[1].step_ms,
          step_ms, step_ms / bound, step_ms / (compute_ms + comm_ms));
      if (stage == 3) {
        const double slots_comm_ms = figures[3].step_ms - figures[3].framework_ms;
        const double slots_step_ms = figures[4].step_ms;
        std::printf(
            "stage 3 at slot addresses (no mapping, the path before stable addresses), same "
            "rounds: comm alone %.1f ms, step %.1f ms; stable / slot addresses: comm %.3f, "
            "step %.3f\n",
            slots_comm_ms, slots_step_ms, comm_ms / slots_comm_ms, step_ms / slots_step_ms);
      }
      std::fflush(stdout);
    }
    if (at_slots.pm != nullptr) CHECK_ZRT(zrt_partition_destroy(at_slots.pm));
    CHECK_ZRT(zrt_partition_destroy(m.pm));
  }
  CHECK_ZRT(zrt_stream_destroy(sync));
  CHECK_ZRT(zrt_comm_destroy(comm));
}

int free_port() {
  return 20000 + static_cast<int>(getpid() % 20000);
}

}  // namespace

int main(int argc, char** argv) {
  const int units = argc > 1 ? std::atoi(argv[1]) : 16;
  const size_t numel = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : (size_t{1} << 20);
  const int steps = argc > 3 ? std::atoi(argv[3]) : 20;
  const int slots = argc > 4 ? std::atoi(argv[4]) : 0;
  const bool host = argc > 5 && std::strcmp(argv[5], "host") == 0;
  const bool offload = argc > 5 && std::strcmp(argv[5], "offload") == 0;
  if (argc > 5 && !host && !offload && std::strcmp(argv[5], "device") != 0) {
    std::fprintf(stderr, "bench_overlap: mode '%s': expected device, host or offload\n", argv[5]);
    return 2;
  }
  const int ranks = 2;
  const std::string port = std::to_string(free_port());
  const std::string token = "bench-overlap-" + std::to_string(getpid());
  std::vector<pid_t> children;
  for (int r = 0; r < ranks; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      setenv("RANK", std::to_string(r).c_str(), 1);
      setenv("WORLD_SIZE", std::to_string(ranks).c_str(), 1);
      setenv("LOCAL_RANK", std::to_string(r).c_str(), 1);
      setenv("LOCAL_WORLD_SIZE", std::to_string(ranks).c_str(), 1);
      setenv("MASTER_ADDR", "127.0.0.1", 1);
      setenv("MASTER_PORT", port.c_str(), 1);
      setenv("ZRT_JOB_TOKEN", token.c_str(), 1);
      rank_main(units, numel, steps, slots, host, offload);
      std::fflush(stdout);
      _exit(0);
    }
    children.push_back(pid);
  }
  int failed = 0;
  for (pid_t pid : children) {
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failed;
  }
  return failed == 0 ? 0 : 1;
}
