// train_lm: trains a small character-level language model with ZeRO sharding through zrt's C API
// alone. The model, its kernels (OpenBLAS sgemm) and its optimizer (AdamW) are this program's
// own, as they would be a framework's; zrt owns the flat sharded buffers and all communication.
//
//   zrt-run -n 2 train_lm --stage 3 --steps 40
//
// Per step it prints the loss and tokens/s; at the end each rank's zrt memory per category
// beside the ZeRO formula, its measured peak RSS growth beside zrt's total (rss.h), and bytes
// sent per step beside 2P(N-1)/N or 3P(N-1)/N. It exits non-zero when the loss did not fall or
// a figure disagrees with its formula (the RSS growth with --check-rss), so it doubles as an
// end-to-end test.
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "adamw.h"
#include "corpus.h"
#include "fused_optimizer.h"
#include "kernels.h"
#include "model.h"
#include "options.h"
#include "rss.h"
#include "zrt/zrt.h"

namespace train_lm {
namespace {

#define CHECK_ZRT(call)                                                                        \
  do {                                                                                         \
    zrt_status_t status_ = (call);                                                             \
    if (status_ != ZRT_SUCCESS) {                                                              \
      std::fprintf(stderr, "train_lm: %s failed: %s: %s\n", #call, zrt_status_string(status_), \
                   zrt_last_error());                                                          \
      return 1;                                                                                \
    }                                                                                          \
  } while (0)

struct Tensor {
  int param = -1;  // zrt's parameter id
  size_t numel = 0;
  bool decay = false;
};

// What the optimizer callback needs: the AdamW settings and which parameters decay.
struct OptimizerContext {
  AdamWConfig adamw;
  std::vector<bool> decay_of_param;
  float grad_multiplier = 1.0f;  // gradient clipping: min(1, clip / global norm)
};

zrt_status_t adamw_callback(const zrt_optimizer_args_t* args, void* user_data) {
  const auto* context = static_cast<const OptimizerContext*>(user_data);
  // The shard is contiguous; pieces say which parameter each range belongs to, so weight decay
  // applies to matrices only. Padding (not in any piece) has zero gradient and stays zero.
  for (size_t i = 0; i < args->num_pieces; ++i) {
    const zrt_shard_piece_t& piece = args->pieces[i];
    const size_t at = piece.shard_offset;
    adamw_update(context->adamw, static_cast<int>(args->step), context->decay_of_param[piece.param],
                 context->grad_multiplier, args->master + at, args->grad + at, args->state[0] + at,
                 args->state[1] + at, piece.count);
  }
  return ZRT_SUCCESS;
}

// --check-rss: how far the measured growth may be from zrt's total.
constexpr double kRssTolerance = 0.05;

double bytes_of(zrt_dtype_t dtype) {
  size_t bytes = 0;
  zrt_dtype_size(dtype, &bytes);
  return static_cast<double>(bytes);
}

std::string human_bytes(double bytes) {
  char text[64];
  if (bytes >= 1 << 20) {
    std::snprintf(text, sizeof(text), "%.2f MiB", bytes / (1 << 20));
  } else {
    std::snprintf(text, sizeof(text), "%.1f KiB", bytes / 1024);
  }
  return text;
}

// The end-of-run figures: memory per category beside the ZeRO formula, the measured peak RSS
// growth beside zrt's total, bytes sent per step beside 2P(N-1)/N or 3P(N-1)/N, and the loss
// trend. Returns the exit status.
int report(const Options& options, zrt_comm_t comm, zrt_comm_t side_comm, zrt_stream_t stream,
           zrt_partition_t pm, int rank, int size, size_t parameters,
           const std::vector<double>& losses, double seconds, const Model& model, int first_step,
           const RssProbe& rss) {
  zrt_partition_memory_t memory;
  memory.size = sizeof(memory);
  CHECK_ZRT(zrt_partition_memory(pm, &memory));
  // Hybrid sharding's collectives run on the manager's own communicators: read its split once
  // the last step's gathers landed.
  CHECK_ZRT(zrt_partition_wait_params(pm));
  zrt_partition_traffic_t split;
  split.size = sizeof(split);
  CHECK_ZRT(zrt_partition_traffic(pm, &split));
  // hpZ: the manager is flat on comm (its counters hold the gathers from the shard and the
  // reduce-scatters), the secondary copy's gathers are the split's intra-group bytes.
  const bool hpz = memory.param_secondary > 0;
  const bool hybrid = !hpz && split.replica_groups > 1;
  // Destroying the manager waits for its last communication (stages 1/2 gather the updated
  // parameters after the final step): then the counters hold whole steps.
  CHECK_ZRT(zrt_partition_destroy(pm));
  zrt_comm_stats_t stats;
  stats.size = sizeof(stats);
  CHECK_ZRT(zrt_comm_stats(comm, &stats));
  uint64_t zero_bytes = stats.per_kind[ZRT_COLL_REDUCE_SCATTER].user.bytes_sent +
                        stats.per_kind[ZRT_COLL_ALL_GATHER].user.bytes_sent;
  if (options.stage == 0) zero_bytes += stats.per_kind[ZRT_COLL_ALL_REDUCE].user.bytes_sent;
  if (hybrid) zero_bytes = split.intra_group_bytes;
  // A run resumed from a checkpoint (--resume) trained from first_step on.
  const double bytes_per_step =
      static_cast<double>(zero_bytes) / std::max(1, options.steps - first_step);
  bool ok = true;

  // Traffic: stages 0-2 reduce the gradients (reduce-scatter, or all-reduce at stage 0 which is
  // a reduce-scatter plus an all-gather) and gather the parameters once: 2P(N-1)/N elements.
  // Stage 3 gathers each unit for forward and for backward and reduce-scatters: 3P(N-1)/N, plus
  // one more gather per recomputed unit. P counts padded elements (zrt pads each segment to
  // N x alignment); the unpadded figure is the formula itself.
  // Hybrid sharding: the group's G ranks shard as a flat manager on G would, and the shard
  // (Ppad/G elements) is all-reduced across the R groups once per step: 2(R-1)/R of it.
  const double n = hybrid ? split.shard_group_size : size;
  const double param_bytes = bytes_of(options.dtype);
  const double reduce_bytes = 4.0;  // reduce_dtype f32
  auto traffic_for = [&](double p, double recomputed) {
    const double share = (n - 1) / n;
    const double micro = options.micro_batches;
    const double syncs = options.no_sync ? 1 : micro;
    // Stage 0 all-reduces the gradients of every synchronised micro-batch (a reduce-scatter
    // plus an all-gather of reduce_dtype); stages 1/2 reduce-scatter them and gather the updated
    // parameters once per step.
    if (options.stage == 0) return share * p * 2 * reduce_bytes * syncs;
    if (options.stage <= 2) return share * p * (syncs * reduce_bytes + param_bytes);
    // hpZ: over the world only the step's first gather of each unit; the rest come from the
    // secondary copy (hpz_traffic_for).
    if (hpz) return share * p * (param_bytes + syncs * reduce_bytes);
    return share * (p * (2 * micro * param_bytes + syncs * reduce_bytes) +
                    recomputed * micro * param_bytes);
  };
  // hpZ inside the H ranks: every gather but the first of each unit, (2 micro - 1) of them plus
  // the recomputed ones, of the unit parameters (the persistent ones stay gathered).
  const double h = split.shard_group_size;
  auto hpz_traffic_for = [&](double units, double recomputed) {
    return (h - 1) / h * param_bytes *
           (units * (2.0 * options.micro_batches - 1) + recomputed * options.micro_batches);
  };
  double recomputed = 0;  // parameters of units gathered a third time
  if (options.checkpoint_activations) {
    for (int u = 1; u + 1 < model.unit_count(); ++u) {
      for (const TensorSpec& spec : model.unit_tensors(u)) recomputed += spec.numel;
    }
  }
  const double padding = static_cast<double>(memory.padded_parameters) / memory.parameters;
  const double traffic_formula = traffic_for(static_cast<double>(parameters), recomputed);
  const double traffic_padded =
      traffic_for(static_cast<double>(memory.padded_parameters), recomputed * padding);
  // Stage 0's all-reduce picks its algorithm by size: a small bucket may go by direct exchange,
  // which sends a bucket to each of the N-1 peers instead of the ring's 2(N-1)/N, so the ring
  // figure is a lower bound there and N/2 times it the upper bound. (The clipping norm's
  // all-reduce is internal traffic, not in these user counters.) Stages 1-3 must match exactly.
  const double slack = options.stage == 0 ? traffic_padded * (n / 2 - 1) + 0.5 : 0.5;
  const bool traffic_ok = size == 1 ? bytes_per_step == 0
                                    : bytes_per_step + 0.5 >= traffic_formula &&
                                          bytes_per_step <= traffic_padded + slack;
  const double replicas = split.replica_groups;
  const double inter_per_step =
      static_cast<double>(split.inter_group_bytes) / std::max(1, options.steps - first_step);
  const double inter_formula = 2 * (replicas - 1) / replicas *
                               static_cast<double>(memory.padded_parameters) / n * reduce_bytes;
  const bool inter_ok = !hybrid || std::fabs(inter_per_step - inter_formula) <= 0.5;
  double persistent = 0;
  for (int u = 0; u < model.unit_count(); ++u) {
    for (const TensorSpec& spec : model.unit_tensors(u)) {
      if (spec.numel < options.persistence_threshold) persistent += spec.numel;
    }
  }
  const double hpz_intra_per_step =
      static_cast<double>(split.intra_group_bytes) / std::max(1, options.steps - first_step);
  const double hpz_units_padded =
      hpz ? static_cast<double>(memory.param_secondary) * h / param_bytes : 0;
  const double hpz_intra_formula =
      hpz_traffic_for(static_cast<double>(parameters) - persistent, recomputed);
  const double hpz_intra_padded = hpz_traffic_for(hpz_units_padded, recomputed * padding);
  const bool hpz_ok = !hpz || (hpz_intra_per_step + 0.5 >= hpz_intra_formula &&
                               hpz_intra_per_step <= hpz_intra_padded + 0.5);
  const bool memory_ok = memory.model_state + 0.5 >= memory.theoretical_model_state &&
                         memory.model_state <= memory.theoretical_model_state * padding + 0.5;
  // What the kernel saw against what zrt reports (rss.h). The peers' pages mapped here are
  // in their owners' totals; the residual is what neither figure names.
  const double mib = 1 << 20;
  const double rss_own = rss.growth() - rss.peers_grown();
  const double rss_total = static_cast<double>(memory.total);
  const double rss_ratio = rss_total > 0 ? rss_own / rss_total : 0.0;
  const bool rss_ok =
      !options.check_rss || (rss.known() && std::fabs(rss_ratio - 1.0) <= kRssTolerance);

  for (int r = 0; r < size; ++r) {
    // Ranks print in turn (a barrier each) so their tables do not interleave.
    if (r == rank) {
      std::printf(
          "rank %d memory: params %s, param shard %s, grads %s, grad shard %s, master %s, "
          "optimizer %s | buckets %s, gather window %s, grad staging %s\n"
          "rank %d model state %s = formula %s x padding %.4f (%s)\n",
          rank, human_bytes(memory.full_params).c_str(), human_bytes(memory.param_shard).c_str(),
          human_bytes(memory.gradients).c_str(), human_bytes(memory.grad_shard).c_str(),
          human_bytes(memory.master).c_str(), human_bytes(memory.optimizer_state).c_str(),
          human_bytes(memory.buckets).c_str(), human_bytes(memory.gather_window).c_str(),
          human_bytes(memory.grad_staging).c_str(), rank, human_bytes(memory.model_state).c_str(),
          human_bytes(memory.theoretical_model_state).c_str(), padding,
          memory_ok ? "ok" : "MISMATCH");
      // The whole footprint beside the formula: the buffers and the step backup come on top
      // of the model state. With offload both figures sum the device and the host side.
      const std::string where =
          memory.host_total > 0 ? " (device " + human_bytes(memory.device_total) + ", host " +
                                      human_bytes(memory.host_total) + ")"
                                : "";
      std::printf("rank %d zrt total %s%s, step backup %s; total / ZeRO formula %.2fx\n", rank,
                  human_bytes(memory.total).c_str(), where.c_str(),
                  human_bytes(memory.step_backup).c_str(),
                  memory.theoretical_model_state > 0
                      ? static_cast<double>(memory.total) / memory.theoretical_model_state
                      : 0.0);
      if (!options.check_rss) {
        // Small models' totals drown in allocator and thread noise: measured on request.
      } else if (rss.known()) {
        std::printf(
            "rank %d measured peak RSS growth %.1f MiB - peers' memory mapped here %.1f MiB = "
            "%.1f MiB, zrt total %.1f MiB: %.3fx, residual %+.1f MiB%s\n",
            rank, rss.growth() / mib, rss.peers_grown() / mib, rss_own / mib, rss_total / mib,
            rss_ratio, (rss_own - rss_total) / mib,
            !options.check_rss ? ""
            : rss_ok           ? " (ok)"
                               : " (MISMATCH)");
      } else {
        std::printf("rank %d measured peak RSS: /proc/self has no VmRSS, VmHWM or smaps\n", rank);
      }
      if (!rss_ok) {
        std::fprintf(stderr,
                     "train_lm: rank %d: --check-rss: measured peak RSS growth %.1f MiB (%.1f MiB "
                     "without peers' memory) is %.3fx zrt's total of %.1f MiB, more than %.0f %% "
                     "off\n",
                     rank, rss.growth() / mib, rss_own / mib, rss_ratio, rss_total / mib,
                     kRssTolerance * 100);
      }
      std::printf("rank %d sent %s per step; formula %s%s (padded %s): %s\n", rank,
                  human_bytes(bytes_per_step).c_str(), human_bytes(traffic_formula).c_str(),
                  hpz                  ? " = 2P(N-1)/N (hpZ)"
                  : options.stage == 3 ? " = 3P(N-1)/N"
                                       : " = 2P(N-1)/N",
                  human_bytes(traffic_padded).c_str(), traffic_ok ? "ok" : "MISMATCH");
      if (hpz) {
        std::printf(
            "rank %d hpZ, secondary copy %s in groups of %d: intra-group %s per step; formula "
            "(H-1)/H x P (2 micro - 1) %s (padded %s): %s\n",
            rank, human_bytes(memory.param_secondary).c_str(), split.shard_group_size,
            human_bytes(hpz_intra_per_step).c_str(), human_bytes(hpz_intra_formula).c_str(),
            human_bytes(hpz_intra_padded).c_str(), hpz_ok ? "ok" : "MISMATCH");
      }
      if (hybrid) {
        std::printf(
            "rank %d hybrid sharding, %d groups of %d: intra-group %s per step, inter-group %s "
            "per step; formula 2(R-1)/R x Ppad/G %s: %s\n",
            rank, split.replica_groups, split.shard_group_size, human_bytes(bytes_per_step).c_str(),
            human_bytes(inter_per_step).c_str(), human_bytes(inter_formula).c_str(),
            inter_ok ? "ok" : "MISMATCH");
      }
      std::fflush(stdout);
    }
    CHECK_ZRT(zrt_barrier(side_comm, stream));
    CHECK_ZRT(zrt_stream_synchronize(stream));
  }
  ok = ok && traffic_ok && memory_ok && inter_ok && hpz_ok && rss_ok;

  const size_t window = std::min<size_t>(5, losses.size());
  double first = 0.0;
  double last = 0.0;
  for (size_t i = 0; i < window; ++i) {
    first += losses[i] / window;
    last += losses[losses.size() - 1 - i] / window;
  }
  const bool loss_fell = losses.size() >= 2 && last < first;
  if (rank == 0) {
    std::printf("stage %d, %d ranks, %s, %zu parameters: loss %.4f -> %.4f in %d steps, %.2f s%s\n",
                options.stage, size, options.dtype == ZRT_F32 ? "f32" : "bf16", parameters, first,
                last, options.steps, seconds, loss_fell ? "" : "  (loss did not fall)");
  }
  ok = ok && loss_fell;
  return ok ? 0 : 1;
}

int run(const Options& options) {
  openblas_set_num_threads(1);  // ranks outnumber cores; one BLAS thread per rank

  zrt_comm_t comm = nullptr;
  CHECK_ZRT(zrt_comm_init_env(nullptr, &comm));
  int rank = 0;
  int size = 1;
  CHECK_ZRT(zrt_comm_rank(comm, &rank));
  CHECK_ZRT(zrt_comm_size(comm, &size));
  if (options.batch % size != 0) {
    if (rank == 0)
      std::fprintf(stderr, "train_lm: --batch %d is not divisible by %d ranks\n", options.batch,
                   size);
    zrt_comm_destroy(comm);
    return 2;
  }

  Corpus corpus;
  std::string error;
  if (!corpus.load(options.corpus, options.context, &error)) {
    std::fprintf(stderr, "train_lm: %s\n", error.c_str());
    zrt_comm_destroy(comm);
    return 2;
  }
  const int local_batch = options.batch / size / options.micro_batches;
  if (local_batch < 1) {
    if (rank == 0) std::fprintf(stderr, "train_lm: --batch too small for the micro-batches\n");
    zrt_comm_destroy(comm);
    return 2;
  }

  ModelShape shape;
  shape.vocab = corpus.vocab_size();
  shape.context = options.context;
  if (options.blocks > 0 || options.width > 0) {
    const int blocks = options.blocks > 0 ? options.blocks : 2;
    const int width = options.width > 0 ? options.width : 256;
    shape.inner.assign(blocks, width);
    shape.outer.assign(blocks, width);
  }
  Model model(shape, local_batch, options.checkpoint_activations);

  // This program's own buffers are all allocated (and zeroed, so resident) before the RSS
  // baseline below: then the growth from there on is zrt's alone. They live to the end, since
  // a buffer freed after the baseline would hide as much of zrt's growth.
  size_t largest = 0;
  for (int u = 0; u < model.unit_count(); ++u) {
    for (const TensorSpec& spec : model.unit_tensors(u)) largest = std::max(largest, spec.numel);
  }
  std::vector<float> values(largest);  // one tensor's initial values at a time
  // f32 views of the parameters and gradients of one unit (bf16 runs convert: this program's
  // kernels compute in f32, as a CPU framework would).
  const bool f32 = options.dtype == ZRT_F32;
  std::vector<std::vector<float>> param_f32(4, std::vector<float>(f32 ? 0 : largest));
  std::vector<std::vector<float>> grad_f32(4, std::vector<float>(f32 ? 0 : largest));
  std::vector<int32_t> inputs(static_cast<size_t>(local_batch) * options.context);
  std::vector<int32_t> targets(local_batch);
  std::vector<double> losses;
  losses.reserve(options.steps);
  // The example's own reductions (the loss) go through a communicator of their own, so that
  // comm's counters hold exactly the partition manager's traffic. Made before the baseline too:
  // a communicator's setup is not the partition manager's memory.
  zrt_comm_t side_comm = nullptr;
  CHECK_ZRT(zrt_comm_split(comm, 0, rank, nullptr, &side_comm));
  zrt_stream_t loss_stream = nullptr;
  CHECK_ZRT(zrt_stream_create(side_comm, ZRT_MEM_HOST, &loss_stream));
  // A stream takes its staging memory at its first collective: the loss stream's is this
  // program's, so it takes it now.
  double warm_up = 0.0;
  CHECK_ZRT(zrt_all_reduce(side_comm, &warm_up, &warm_up, 1, ZRT_F64, ZRT_SUM, loss_stream));
  CHECK_ZRT(zrt_stream_synchronize(loss_stream));

  // --- register the model with zrt -------------------------------------------------------
  zrt_partition_config_t config = ZRT_PARTITION_CONFIG_INIT;
  if (!options.config_file.empty())
    CHECK_ZRT(zrt_partition_config_load(options.config_file.c_str(), &config));
  config.stage = options.stage;
  config.param_dtype = options.dtype;
  config.reduce_dtype = ZRT_F32;
  config.bucket_bytes = static_cast<size_t>(options.bucket_mb * (1 << 20));
  config.prefetch_depth = options.prefetch;
  config.persistence_threshold = options.persistence_threshold;
  config.no_sync_accumulation = options.no_sync ? 1 : 0;
  config.alignment = 16;
  // Stage 0 shards nothing: the flag applies to stages 1-3, so one command line serves all four.
  if (options.stage > 0) config.shard_group_size = options.shard_group;
  if (options.stage == 3) config.hpz_group_size = options.hpz;
  if (options.stage > 0) config.offload_optimizer = options.offload ? 1 : 0;
  // Stage 0 offloads nothing: it runs the ordinary step there.
  const bool in_backward = options.in_backward && options.stage > 0;
  zrt_partition_t pm = nullptr;
  CHECK_ZRT(zrt_partition_create(comm, &config, &pm));

  std::vector<std::vector<Tensor>> tensors(model.unit_count());
  OptimizerContext optimizer;
  for (int u = 0; u < model.unit_count(); ++u) {
    int unit = -1;
    CHECK_ZRT(zrt_partition_add_unit(pm, model.unit_name(u).c_str(), &unit));
    for (const TensorSpec& spec : model.unit_tensors(u)) {
      Tensor tensor;
      tensor.numel = spec.numel;
      tensor.decay = spec.decay;
      CHECK_ZRT(zrt_partition_add_param(pm, unit, spec.name.c_str(), spec.numel, ZRT_PARAM_DEFAULT,
                                        &tensor.param));
      optimizer.decay_of_param.resize(tensor.param + 1);
      optimizer.decay_of_param[tensor.param] = spec.decay;
      tensors[u].push_back(tensor);
    }
  }
  RssProbe rss;
  rss.take_baseline();
  CHECK_ZRT(zrt_partition_finalize(pm));

  size_t parameters = 0;
  for (int u = 0; u < model.unit_count(); ++u) {
    for (size_t t = 0; t < tensors[u].size(); ++t) {
      model.init_tensor(options.seed, u, static_cast<int>(t), values.data());
      CHECK_ZRT(zrt_partition_load_param(pm, tensors[u][t].param, values.data(), ZRT_F32));
      parameters += tensors[u][t].numel;
    }
  }
  optimizer.adamw.learning_rate = options.learning_rate;
  FusedOptimizer fused;
  if (!fused.init(options.optimizer, options.optimizer_threads, optimizer.adamw,
                  optimizer.decay_of_param)) {
    return 2;
  }

  // --- checkpoints: --resume replaces the initial values and the optimizer state ----------
  int first_step = 0;
  if (!options.resume_dir.empty()) {
    CHECK_ZRT(zrt_partition_load(pm, options.resume_dir.c_str()));
    int64_t loaded = 0;
    CHECK_ZRT(zrt_partition_get_step(pm, &loaded));
    first_step = static_cast<int>(std::min<int64_t>(loaded, options.steps));
    if (rank == 0) {
      std::printf("resumed from %s at step %d (%d ranks, stage %d)\n", options.resume_dir.c_str(),
                  first_step, size, options.stage);
    }
  }
  auto save_checkpoint = [&](int steps_done) -> zrt_status_t {
    // A save's own messages (its agreements) are internal traffic, which the traffic check's
    // user-side counters do not see.
    const zrt_status_t status = zrt_partition_save(pm, options.save_dir.c_str());
    if (status == ZRT_SUCCESS && rank == 0) {
      std::printf("saved step %d to %s\n", steps_done, options.save_dir.c_str());
    }
    return status;
  };

  auto param_views = [&](int u, const float** views) -> zrt_status_t {
    for (size_t t = 0; t < tensors[u].size(); ++t) {
      void* data = nullptr;
      zrt_status_t status = zrt_partition_param_data(pm, tensors[u][t].param, &data);
      if (status != ZRT_SUCCESS) return status;
      if (f32) {
        views[t] = static_cast<const float*>(data);
      } else {
        bf16_to_f32(static_cast<const uint16_t*>(data), param_f32[t].data(), tensors[u][t].numel);
        views[t] = param_f32[t].data();
      }
    }
    return ZRT_SUCCESS;
  };

  CHECK_ZRT(zrt_comm_stats_reset(comm));
  const float grad_scale = 1.0f / static_cast<float>(local_batch * options.micro_batches);
  const auto run_start = std::chrono::steady_clock::now();

  void* armed_config = nullptr;  // --optimizer-in-backward with a fused optimizer
  for (int step = first_step; step < options.steps; ++step) {
    const auto step_start = std::chrono::steady_clock::now();
    double loss_sum = 0.0;
    for (int micro = 0; micro < options.micro_batches; ++micro) {
      const bool sync = !options.no_sync || micro == options.micro_batches - 1;
      if (options.micro_batches > 1) CHECK_ZRT(zrt_partition_set_sync(pm, sync ? 1 : 0));
      if (in_backward && micro == options.micro_batches - 1) {
        // The step's last micro-batch: its backward runs each segment's optimizer.
        if (fused.enabled()) {
          armed_config = fused.step_config(1.0f);
          CHECK_ZRT(zrt_partition_step_in_backward(pm, fused.fn(), armed_config));
        } else {
          CHECK_ZRT(zrt_partition_step_in_backward(pm, adamw_callback, &optimizer));
        }
      }
      const int first = (rank * options.micro_batches + micro) * local_batch;
      corpus.batch(options.seed, step, options.batch, first, local_batch, &inputs, &targets);

      const float* params[4];
      for (int u = 0; u < model.unit_count(); ++u) {
        CHECK_ZRT(zrt_partition_fetch(pm, u));
        CHECK_ZRT(param_views(u, params));
        double unit_loss = 0.0;
        model.forward(u, params, inputs.data(), targets.data(), grad_scale, &unit_loss);
        loss_sum += unit_loss;
        CHECK_ZRT(zrt_partition_release(pm, u));
      }
      for (int u = model.unit_count() - 1; u >= 0; --u) {
        if (model.needs_recompute(u)) {
          // Activation checkpointing: the unit's inner activations were dropped in forward;
          // gather its parameters once more and rebuild them.
          CHECK_ZRT(zrt_partition_fetch(pm, u));
          CHECK_ZRT(param_views(u, params));
          double ignored = 0.0;
          model.forward(u, params, inputs.data(), targets.data(), grad_scale, &ignored);
          CHECK_ZRT(zrt_partition_release(pm, u));
        }
        CHECK_ZRT(zrt_partition_fetch(pm, u));
        CHECK_ZRT(param_views(u, params));
        float* grads[4];
        void* grad_out[4];
        for (size_t t = 0; t < tensors[u].size(); ++t) {
          CHECK_ZRT(zrt_partition_grad_data(pm, tensors[u][t].param, &grad_out[t]));
          grads[t] = f32 ? static_cast<float*>(grad_out[t]) : grad_f32[t].data();
          std::memset(grads[t], 0, tensors[u][t].numel * sizeof(float));
        }
        model.backward(u, params, grads, inputs.data());
        if (!f32) {
          for (size_t t = 0; t < tensors[u].size(); ++t) {
            f32_to_bf16(grads[t], static_cast<uint16_t*>(grad_out[t]), tensors[u][t].numel);
          }
        }
        CHECK_ZRT(zrt_partition_grad_ready(pm, u));
        CHECK_ZRT(zrt_partition_release(pm, u));
      }
    }
    // Gradient clipping needs the global norm: one small all-reduce over the reduced shards.
    double norm = 0.0;
    if (options.clip > 0) {
      optimizer.grad_multiplier = 1.0f;
      int nonfinite = 0;
      CHECK_ZRT(zrt_partition_grad_norm(pm, &norm, &nonfinite));
      if (nonfinite) {
        std::fprintf(stderr, "train_lm: rank %d: non-finite gradient at step %d\n", rank, step);
        return 1;
      }
      if (norm > options.clip) optimizer.grad_multiplier = static_cast<float>(options.clip / norm);
    }
    if (fused.enabled()) {
      // Armed, the config is in use by zrt's thread already: the step passes it unchanged.
      void* config = in_backward ? armed_config : fused.step_config(optimizer.grad_multiplier);
      CHECK_ZRT(zrt_partition_step(pm, fused.fn(), config));
    } else {
      CHECK_ZRT(zrt_partition_step(pm, adamw_callback, &optimizer));
    }

    // The loss over the global batch: a sum over ranks of local sums.
    double global_loss = loss_sum;
    CHECK_ZRT(
        zrt_all_reduce(side_comm, &global_loss, &global_loss, 1, ZRT_F64, ZRT_SUM, loss_stream));
    CHECK_ZRT(zrt_stream_synchronize(loss_stream));
    losses.push_back(global_loss / options.batch);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start).count();
    if (rank == 0 && (step % options.print_every == 0 || step == options.steps - 1)) {
      std::printf("step %4d  loss %.6f  %8.0f tokens/s", step, losses.back(),
                  options.batch / seconds);
      if (options.clip > 0) std::printf("  grad-norm %.4f", norm);
      std::printf("\n");
      std::fflush(stdout);
    }
    if (!options.save_dir.empty() &&
        (step + 1 == options.steps ||
         (options.save_every > 0 && (step + 1) % options.save_every == 0))) {
      CHECK_ZRT(save_checkpoint(step + 1));
    }
  }
  const double total_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start).count();
  rss.take_peak();
  const int status = report(options, comm, side_comm, loss_stream, pm, rank, size, parameters,
                            losses, total_seconds, model, first_step, rss);
  CHECK_ZRT(zrt_comm_destroy(side_comm));
  CHECK_ZRT(zrt_comm_destroy(comm));
  return status;
}

}  // namespace
}  // namespace train_lm

int main(int argc, char** argv) {
  train_lm::Options options;
  std::string error;
  if (!train_lm::parse_options(argc, argv, &options, &error)) {
    std::fprintf(stderr, "train_lm: %s\n%s", error.c_str(), train_lm::usage());
    return 2;
  }
  if (options.help) {
    std::fputs(train_lm::usage(), stdout);
    return 0;
  }
  return train_lm::run(options);
}
