// offload_optimizer on real ranks over UCX, host memory: master and optimizer state in a host
// arena of their own, the optimizer run per segment as each reduction finishes
// (docs/ARCHITECTURE.md#offload-pipeline). Offloaded and not offloaded training must end with
// bit-identical parameters at stages 1-3 (f32 and bf16, with gradient accumulation, with
// clipping by the global norm); the callback sees each segment's slice with its pieces and the
// one step count; an optimizer that fails in a middle segment on one rank rolls every rank
// back; the memory figures split into device and host columns that match the formulas. The same
// with the optimizer run during backward (zrt_partition_step_in_backward): bit-identical, every
// callback done on a thread of zrt's before the step is called, a failure rolled back on every
// rank, and each misuse refused with a clear error.
#include <gtest/gtest.h>

#include <unistd.h>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "tests/harness/multirank.h"
#include "tests/harness/rank_count.h"
#include "tests/harness/status_assert.h"
#include "tests/partition/partition_test_model.h"
#include "tests/partition/straddling_model.h"
#include "zrt/zrt.h"

namespace zrt::testing {
namespace {

using straddling::forward_backward;
using straddling::kUnits;
using straddling::read_params;
using straddling::Run;
using straddling::same_bytes;
using straddling::unit_numel;

zrt_comm_t make_comm() {
  zrt_comm_t comm = nullptr;
  const zrt_status_t status = zrt_comm_init_env(nullptr, &comm);
  EXPECT_EQ(status, ZRT_SUCCESS) << zrt_last_error();
  return comm;
}

bool same_bits(const MlpParams& a, const MlpParams& b) {
  if (a.tensors.size() != b.tensors.size()) return false;
  for (size_t t = 0; t < a.tensors.size(); ++t) {
    if (a.tensors[t].size() != b.tensors[t].size()) return false;
    if (std::memcmp(a.tensors[t].data(), b.tensors[t].data(), a.tensors[t].size() * 4) != 0) {
      return false;
    }
  }
  return true;
}

void bit_identical_body(int /*rank*/, int size) {
  zrt_comm_t comm = make_comm();
  if (comm == nullptr) return;
  const MlpShape shape;
  struct Case {
    int micro_batches;
    bool no_sync;
    double clip;
  };
  const Case cases[] = {{1, false, 0}, {2, true, 0}, {2, false, 0}, {1, false, 0.05}};
  for (int stage = 1; stage <= 3; ++stage) {
    for (zrt_dtype_t dtype : {ZRT_F32, ZRT_BF16}) {
      for (const Case& c : cases) {
        TrainOptions o;
        o.stage = stage;
        o.steps = 3;
        o.param_dtype = dtype;
        o.reduce_dtype = dtype;
        o.micro_batches = c.micro_batches;
        o.no_sync = c.no_sync;
        o.clip_norm = c.clip;
        SCOPED_TRACE(::testing::Message()
                     << "N " << size << " stage " << stage << " "
                     << (dtype == ZRT_F32 ? "f32" : "bf16") << " micro-batches " << c.micro_batches
                     << (c.no_sync ? " no-sync" : "") << (c.clip > 0 ? " clipped" : ""));
        const MlpParams plain = train_zrt(comm, shape, o);
        o.offload_optimizer = true;
        zrt_partition_memory_t memory{};
        memory.size = sizeof(memory);
        o.memory = &memory;
        const MlpParams offloaded = train_zrt(comm, shape, o);
        if (::testing::Test::HasFailure()) break;
        EXPECT_TRUE(same_bits(plain, offloaded))
            << "max relative difference " << max_relative_difference(plain, offloaded);
        if (c.clip == 0) {
          // The optimizer run during the last micro-batch's backward: the same bits.
          o.step_in_backward = true;
          const MlpParams in_backward = train_zrt(comm, shape, o);
          o.step_in_backward = false;
          if (::testing::Test::HasFailure()) break;
          EXPECT_TRUE(same_bits(plain, in_backward)) << "in backward: max relative difference "
                                                     << max_relative_difference(plain, in_backward);
        }
        // Master and state (and the backup, and the optimizer's f32 gradient) are host bytes.
        EXPECT_EQ(memory.host_model_state, memory.master + memory.optimizer_state);
        EXPECT_EQ(memory.host_total, memory.host_model_state + memory.step_backup + memory.master);
        EXPECT_EQ(memory.device_model_state + memory.host_model_state, memory.model_state);
        EXPECT_EQ(memory.device_total + memory.host_total, memory.total);
      }
    }
  }
  EXPECT_OK(zrt_comm_destroy(comm));
}

class OffloadRanks : public RankCount {};
TEST_P(OffloadRanks, OffloadedStepsAreBitIdenticalAtStages1To3) {
  expect_ranks_pass(GetParam(), bit_identical_body);
}
INSTANTIATE_TEST_SUITE_P(PartitionOffload, OffloadRanks, ::testing::Values(1, 2, 3),
                         rank_count_name);

// --- The callback contract and rollback, on a model of three units and small buckets --------

constexpr zrt_status_t kFailure = ZRT_SYSTEM_ERROR;

// Records every call of a step; fails (after scribbling over its slice) on call `fail_call`.
struct Recorder {
  int fail_call = -1;
  int calls = 0;
  std::vector<int64_t> steps;
  size_t elements = 0;
  size_t pieces = 0;
  bool pieces_inside = true;
  // Every slice seen: master pointer -> (count, state pointers), so the whole shard can be read.
  std::map<float*, std::pair<size_t, std::vector<float*>>> slices;
};

zrt_status_t recording_sgd(const zrt_optimizer_args_t* a, void* user) {
  auto* r = static_cast<Recorder*>(user);
  const int call = r->calls++;
  r->steps.push_back(a->step);
  r->elements += a->count;
  r->pieces += a->num_pieces;
  for (size_t i = 0; i < a->num_pieces; ++i) {
    if (a->pieces[i].shard_offset + a->pieces[i].count > a->count) r->pieces_inside = false;
  }
  r->slices[a->master] = {a->count, std::vector<float*>(a->state, a->state + a->num_state)};
  if (call == r->fail_call) {
    for (size_t i = 0; i < a->count; ++i) {
      a->master[i] += 1.0f;
      a->state[0][i] = 42.0f;
    }
    return kFailure;
  }
  for (size_t i = 0; i < a->count; ++i) {
    a->state[0][i] = 0.9f * a->state[0][i] + a->grad[i];
    a->state[1][i] += a->grad[i] * a->grad[i];
    a->master[i] -= 0.05f * a->state[0][i];
  }
  return ZRT_SUCCESS;
}

// Master, then each state slot, over every slice recorded (in address order: shard order).
std::vector<float> read_shard(const Recorder& r) {
  std::vector<float> all;
  for (int slot = -1; slot < 2; ++slot) {
    for (const auto& [master, rest] : r.slices) {
      const float* from = slot < 0 ? master : rest.second[static_cast<size_t>(slot)];
      all.insert(all.end(), from, from + rest.first);
    }
  }
  return all;
}

// After the second step failed on `fail_rank` (zrt_last_error still its message): every rank
// names it, says it restored, and holds the shard and parameters of before, at step 1.
void expect_rolled_back(Run* run, zrt_status_t status, int fail_rank, const Recorder& r,
                        const std::vector<float>& shard_before,
                        const std::vector<float>& params_before) {
  const std::string message = zrt_last_error();
  EXPECT_EQ(status, kFailure) << message;
  EXPECT_NE(message.find(" " + std::to_string(fail_rank) + " (ZRT_SYSTEM_ERROR)"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("restored"), std::string::npos) << message;
  EXPECT_TRUE(same_bytes(read_shard(r), shard_before)) << "master/state not rolled back";
  EXPECT_TRUE(same_bytes(read_params(run), params_before)) << "parameters changed";
  int64_t count = -1;
  EXPECT_OK(zrt_partition_get_step(run->pm, &count));
  EXPECT_EQ(count, 1);
}

void make_pm(Run* run, int stage, bool offload, int step_backup) {
  zrt_partition_config_t config = straddling::model_config();
  config.stage = stage;
  config.step_backup = step_backup;
  config.offload_optimizer = offload ? 1 : 0;
  straddling::create(run, config);
}

// Three steps; with fail_rank >= 0 that rank's callback fails on a middle segment of the second
// step, which is checked and retried. *final: the parameters at the end.
void train(Run* run, int fail_rank, std::vector<float>* final_params, Recorder* first_step) {
  Recorder r;
  for (int step = 0; step < 3; ++step) {
    forward_backward(run, step);
    if (::testing::Test::HasFailure()) return;
    r.calls = 0;
    r.steps.clear();
    r.elements = r.pieces = 0;
    if (step == 1 && fail_rank >= 0) {
      const std::vector<float> params_before = read_params(run);
      const std::vector<float> shard_before = read_shard(r);
      r.fail_call = run->rank == fail_rank ? static_cast<int>(r.slices.size()) / 2 : -1;
      ASSERT_GE(r.slices.size(), 3u) << "too few segments for a middle one";
      const zrt_status_t status = zrt_partition_step(run->pm, recording_sgd, &r);
      r.fail_call = -1;
      expect_rolled_back(run, status, fail_rank, r, shard_before, params_before);
      r.calls = 0;
      r.steps.clear();
      r.elements = r.pieces = 0;
    }
    ASSERT_OK(zrt_partition_step(run->pm, recording_sgd, &r));
    if (step == 0 && first_step != nullptr) *first_step = r;
  }
  *final_params = read_params(run);
}

void contract_and_rollback_body(int rank, int size) {
  Run run;
  run.rank = rank;
  run.comm = make_comm();
  if (run.comm == nullptr) return;
  const zrt_shard_piece_t* pieces = nullptr;
  for (int stage = 1; stage <= 3; ++stage) {
    SCOPED_TRACE(::testing::Message() << "N " << size << " stage " << stage);
    std::vector<float> plain, offloaded, retried;
    Recorder whole, per_segment;
    make_pm(&run, stage, false, 1);
    train(&run, -1, &plain, &whole);
    ASSERT_OK(zrt_partition_destroy(run.pm));
    make_pm(&run, stage, true, 1);
    size_t shard_pieces = 0;
    ASSERT_OK(zrt_partition_shard_pieces(run.pm, &pieces, &shard_pieces));
    train(&run, -1, &offloaded, &per_segment);
    ASSERT_OK(zrt_partition_destroy(run.pm));
    EXPECT_TRUE(same_bytes(plain, offloaded)) << "offloaded training differs";
    // Without offload one call with the whole shard; with it one call per segment, together
    // the same elements, every piece inside its slice, the one step count.
    EXPECT_EQ(whole.calls, 1);
    EXPECT_GE(per_segment.calls, 3);
    EXPECT_EQ(per_segment.elements, whole.elements);
    EXPECT_GE(per_segment.pieces, shard_pieces);
    EXPECT_TRUE(per_segment.pieces_inside);
    EXPECT_EQ(per_segment.steps, std::vector<int64_t>(per_segment.steps.size(), 1));
    for (int fail_rank : {size - 1, 0}) {
      make_pm(&run, stage, true, 1);
      train(&run, fail_rank, &retried, nullptr);
      EXPECT_TRUE(same_bytes(retried, plain)) << "retried run differs, failing rank " << fail_rank;
      ASSERT_OK(zrt_partition_destroy(run.pm));
      if (size == 1) break;
    }
  }
  EXPECT_OK(zrt_comm_destroy(run.comm));
}

class OffloadContract : public RankCount {};
TEST_P(OffloadContract, PerSegmentCallsAndMiddleSegmentFailureRollsBackEveryRank) {
  expect_ranks_pass(GetParam(), contract_and_rollback_body);
}
INSTANTIATE_TEST_SUITE_P(PartitionOffload, OffloadContract, ::testing::Values(1, 2, 3),
                         rank_count_name);

// step_backup = 0: nothing can be undone, so the step waits for every reduction and votes
// first; a callback failing in a middle segment still fails every rank before anything is
// published (the owned slices are not converted back before the vote).
void no_backup_body(int rank, int size) {
  Run run;
  run.rank = rank;
  run.comm = make_comm();
  if (run.comm == nullptr) return;
  for (int stage = 1; stage <= 3; ++stage) {
    SCOPED_TRACE(::testing::Message() << "N " << size << " stage " << stage);
    make_pm(&run, stage, true, 0);
    zrt_partition_memory_t m{};
    m.size = sizeof(m);
    ASSERT_OK(zrt_partition_memory(run.pm, &m));
    EXPECT_EQ(m.step_backup, 0u);
    EXPECT_EQ(m.host_total, m.master + m.optimizer_state + m.master);
    Recorder r;
    forward_backward(&run, 0);
    ASSERT_OK(zrt_partition_step(run.pm, recording_sgd, &r));
    forward_backward(&run, 1);
    const std::vector<float> params_before = read_params(&run);
    r.calls = 0;
    r.fail_call = rank == size - 1 ? static_cast<int>(r.slices.size()) / 2 : -1;
    const zrt_status_t status = zrt_partition_step(run.pm, recording_sgd, &r);
    const std::string message = zrt_last_error();
    EXPECT_EQ(status, kFailure) << message;
    EXPECT_NE(message.find("step_backup is 0"), std::string::npos) << message;
    EXPECT_TRUE(same_bytes(read_params(&run), params_before)) << "parameters were published";
    int64_t steps = -1;
    ASSERT_OK(zrt_partition_get_step(run.pm, &steps));
    EXPECT_EQ(steps, 1);
    ASSERT_OK(zrt_partition_destroy(run.pm));
  }
  EXPECT_OK(zrt_comm_destroy(run.comm));
}

TEST(PartitionOffload, WithoutBackupEveryRankFailsBeforePublishingN2) {
  expect_ranks_pass(2, no_backup_body);
}

// Stage 2, 16-bit parameters and reductions, Adam, N ranks, no padding: 2P + 2P/N on the
// device and 12P/N on the host, in the formula and in the bytes the manager carved.
void memory_body(int /*rank*/, int size) {
  Run run;
  run.comm = make_comm();
  if (run.comm == nullptr) return;
  zrt_partition_config_t config = ZRT_PARTITION_CONFIG_INIT;
  config.stage = 2;
  config.param_dtype = ZRT_F16;
  config.reduce_dtype = ZRT_F16;
  config.offload_optimizer = 1;
  config.alignment = 1;
  config.bucket_bytes = 4096;
  ASSERT_OK(zrt_partition_create(run.comm, &config, &run.pm));
  const size_t numel = 2048 * 3;  // every 2048-element bucket splits evenly over 1..4 ranks
  int unit = 0, param = 0;
  ASSERT_OK(zrt_partition_add_unit(run.pm, "u", &unit));
  ASSERT_OK(zrt_partition_add_param(run.pm, unit, "w", numel, 0, &param));
  ASSERT_OK(zrt_partition_finalize(run.pm));
  zrt_partition_memory_t m{};
  m.size = sizeof(m);
  ASSERT_OK(zrt_partition_memory(run.pm, &m));
  const double p = static_cast<double>(numel), n = size;
  ASSERT_EQ(m.padded_parameters, numel);
  EXPECT_DOUBLE_EQ(m.theoretical_device_model_state, 2 * p + 2 * p / n);
  EXPECT_DOUBLE_EQ(m.theoretical_host_model_state, 12 * p / n);
  EXPECT_EQ(static_cast<double>(m.device_model_state), 2 * p + 2 * p / n);
  EXPECT_EQ(static_cast<double>(m.host_model_state), 12 * p / n);
  EXPECT_DOUBLE_EQ(m.theoretical_model_state, 2 * p + 14 * p / n);
  ASSERT_OK(zrt_partition_destroy(run.pm));
  EXPECT_OK(zrt_comm_destroy(run.comm));
}

class OffloadMemory : public RankCount {};
TEST_P(OffloadMemory, Stage2DeviceAndHostColumnsMatchTheFormula) {
  expect_ranks_pass(GetParam(), memory_body);
}
INSTANTIATE_TEST_SUITE_P(PartitionOffload, OffloadMemory, ::testing::Values(1, 2, 4),
                         rank_count_name);

// --- The optimizer during backward (zrt_partition_step_in_backward) ---------------------------

// recording_sgd, called on zrt's thread: the test watches the count from the training thread.
struct BackwardRecorder {
  Recorder recorder;
  std::atomic<int> calls{0};
  std::atomic<bool> off_thread{false};
  std::thread::id training = std::this_thread::get_id();
};

zrt_status_t counting_sgd(const zrt_optimizer_args_t* a, void* user) {
  auto* b = static_cast<BackwardRecorder*>(user);
  if (std::this_thread::get_id() != b->training) b->off_thread = true;
  const zrt_status_t status = recording_sgd(a, &b->recorder);
  b->calls.fetch_add(1);
  return status;
}

// Waits (bounded) until `calls` reaches `expected`; returns what it reached.
int wait_for_calls(const std::atomic<int>& calls, int expected) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (calls.load() < expected && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return calls.load();
}

// Three armed steps of the straddling model with `segments` segments; with fail_rank >= 0 that
// rank's callback fails on a middle segment of the second step, which is checked and retried
// (unarmed: the step then runs the plain offloaded pipeline).
void train_in_backward(Run* run, int segments, int fail_rank, std::vector<float>* final_params) {
  BackwardRecorder b;
  Recorder& r = b.recorder;
  for (int step = 0; step < 3; ++step) {
    r.calls = 0;
    r.steps.clear();
    r.elements = r.pieces = 0;
    b.calls = 0;
    b.off_thread = false;
    const bool failing = step == 1 && fail_rank >= 0;
    std::vector<float> params_before, shard_before;
    if (failing) {
      params_before = read_params(run);
      shard_before = read_shard(r);
      r.fail_call = run->rank == fail_rank ? segments / 2 : -1;
    }
    ASSERT_OK(zrt_partition_step_in_backward(run->pm, counting_sgd, &b));
    forward_backward(run, step);
    if (::testing::Test::HasFailure()) return;
    // Every callback ran during backward, before the step is called (on the failing rank up to
    // the failing one: the rest of its job is skipped).
    const int expected = r.fail_call >= 0 ? r.fail_call + 1 : segments;
    EXPECT_EQ(wait_for_calls(b.calls, expected), expected)
        << "the callbacks did not run before zrt_partition_step";
    const zrt_status_t status = zrt_partition_step(run->pm, counting_sgd, &b);
    const std::string message = zrt_last_error();
    EXPECT_TRUE(b.off_thread) << "a callback ran on the training thread";
    if (!failing) {
      ASSERT_EQ(status, ZRT_SUCCESS) << message;
      EXPECT_EQ(r.steps, std::vector<int64_t>(r.steps.size(), step + 1));
      continue;
    }
    r.fail_call = -1;
    expect_rolled_back(run, status, fail_rank, r, shard_before, params_before);
    ASSERT_OK(zrt_partition_step(run->pm, counting_sgd, &b));
  }
  *final_params = read_params(run);
}

void in_backward_body(int rank, int size) {
  Run run;
  run.rank = rank;
  run.comm = make_comm();
  if (run.comm == nullptr) return;
  for (int stage = 1; stage <= 3; ++stage) {
    SCOPED_TRACE(::testing::Message() << "N " << size << " stage " << stage);
    std::vector<float> plain, armed;
    Recorder per_segment;
    make_pm(&run, stage, true, 1);
    train(&run, -1, &plain, &per_segment);
    ASSERT_OK(zrt_partition_destroy(run.pm));
    for (int fail_rank : {-1, size - 1, 0}) {
      SCOPED_TRACE(::testing::Message() << "failing rank " << fail_rank);
      make_pm(&run, stage, true, 1);
      train_in_backward(&run, per_segment.calls, fail_rank, &armed);
      ASSERT_OK(zrt_partition_destroy(run.pm));
      EXPECT_TRUE(same_bytes(plain, armed)) << "training with the optimizer in backward differs";
      if (size == 1 && fail_rank == 0) break;
    }
  }
  EXPECT_OK(zrt_comm_destroy(run.comm));
}

class OffloadInBackward : public RankCount {};
TEST_P(OffloadInBackward, CallbacksRunDuringBackwardBitIdenticalAndRolledBackOnEveryRank) {
  expect_ranks_pass(GetParam(), in_backward_body);
}
INSTANTIATE_TEST_SUITE_P(PartitionOffload, OffloadInBackward, ::testing::Values(1, 2, 3),
                         rank_count_name);

zrt_status_t other_sgd(const zrt_optimizer_args_t* a, void* user) {
  return recording_sgd(a, user);
}

// Expects `status` to be `code` with a message containing `words`.
void expect_refused(zrt_status_t status, zrt_status_t code, const char* words) {
  const std::string message = zrt_last_error();
  EXPECT_EQ(status, code) << message;
  EXPECT_NE(message.find(words), std::string::npos) << message;
}

// Every misuse of an armed step is refused before it changes anything, naming what to do; the
// step then still succeeds, and destroying an armed manager in the middle of a step returns.
void misuse_body(int rank, int /*size*/) {
  Run run;
  run.rank = rank;
  run.comm = make_comm();
  if (run.comm == nullptr) return;
  Recorder r;
  make_pm(&run, 1, false, 1);
  expect_refused(zrt_partition_step_in_backward(run.pm, recording_sgd, &r), ZRT_INVALID_USAGE,
                 "offload_optimizer = 1");
  ASSERT_OK(zrt_partition_destroy(run.pm));
  make_pm(&run, 1, true, 0);
  expect_refused(zrt_partition_step_in_backward(run.pm, recording_sgd, &r), ZRT_INVALID_USAGE,
                 "step_backup = 1");
  ASSERT_OK(zrt_partition_destroy(run.pm));

  make_pm(&run, 1, true, 1);
  expect_refused(zrt_partition_step_in_backward(run.pm, nullptr, &r), ZRT_INVALID_ARGUMENT,
                 "optimizer is NULL");
  ASSERT_OK(zrt_partition_set_sync(run.pm, 0));
  expect_refused(zrt_partition_step_in_backward(run.pm, recording_sgd, &r), ZRT_INVALID_USAGE,
                 "set_sync(1)");
  ASSERT_OK(zrt_partition_set_sync(run.pm, 1));
  ASSERT_OK(zrt_partition_step_in_backward(run.pm, recording_sgd, &r));
  expect_refused(zrt_partition_step_in_backward(run.pm, recording_sgd, &r), ZRT_INVALID_USAGE,
                 "already called");
  expect_refused(zrt_partition_set_sync(run.pm, 0), ZRT_INVALID_USAGE, "step_in_backward");
  std::vector<float> values(unit_numel(0), 1.0f);
  expect_refused(zrt_partition_load_param(run.pm, run.params[0], values.data(), ZRT_F32),
                 ZRT_INVALID_USAGE, "step_in_backward");
  forward_backward(&run, 0);
  expect_refused(zrt_partition_fetch(run.pm, 0), ZRT_INVALID_USAGE,
                 "fetch a unit before its grad_ready, or after zrt_partition_step");
  double norm = 0;
  expect_refused(zrt_partition_grad_norm(run.pm, &norm, nullptr), ZRT_INVALID_USAGE,
                 "without arming");
  void* grad = nullptr;
  expect_refused(zrt_partition_grad_data(run.pm, run.params[kUnits - 1], &grad), ZRT_INVALID_USAGE,
                 "call zrt_partition_step before the next micro-batch");
  expect_refused(zrt_partition_grad_ready(run.pm, kUnits - 1), ZRT_INVALID_USAGE,
                 "call zrt_partition_step before the next micro-batch");
  expect_refused(zrt_partition_step(run.pm, other_sgd, &r), ZRT_INVALID_ARGUMENT,
                 "pass the same pair");
  ASSERT_OK(zrt_partition_step(run.pm, recording_sgd, &r));

  // In the middle of a backward: too late to arm.
  ASSERT_OK(zrt_partition_fetch(run.pm, kUnits - 1));
  ASSERT_OK(zrt_partition_grad_data(run.pm, run.params[kUnits - 1], &grad));
  std::fill_n(static_cast<float*>(grad), unit_numel(kUnits - 1), 0.25f);
  ASSERT_OK(zrt_partition_grad_ready(run.pm, kUnits - 1));
  ASSERT_OK(zrt_partition_release(run.pm, kUnits - 1));
  expect_refused(zrt_partition_step_in_backward(run.pm, recording_sgd, &r), ZRT_INVALID_USAGE,
                 "in the middle of a backward");
  ASSERT_OK(zrt_partition_destroy(run.pm));

  // Destroyed while armed, the step's backward done and its callbacks running or run.
  make_pm(&run, 2, true, 1);
  ASSERT_OK(zrt_partition_step_in_backward(run.pm, recording_sgd, &r));
  forward_backward(&run, 0);
  EXPECT_OK(zrt_partition_destroy(run.pm));
  EXPECT_OK(zrt_comm_destroy(run.comm));
}

TEST(PartitionOffload, InBackwardMisuseIsRefusedN2) {
  expect_ranks_pass(2, misuse_body);
}

// A peer that dies before the armed micro-batch's backward: every survivor's backward or step
// fails within the timeout, and so does the step called after a failed backward, naming the
// failure, with master and state as they were; the backward optimizer's thread, waiting on
// reductions that cannot complete, lets go; and destroying the manager returns.
constexpr int kDeadRanks = 3;
constexpr int kVictimExit = 3;
constexpr int64_t kDeadLimitMs = 2000 + 8000;  // ZRT_TIMEOUT=2 s plus slack for 3 ranks on 2 cores

void dead_peer_in_backward_body(int rank, int size) {
  Run run;
  run.rank = rank;
  run.comm = make_comm();
  if (run.comm == nullptr) return;
  make_pm(&run, 2, true, 1);
  if (::testing::Test::HasFailure()) return;
  BackwardRecorder b;
  ASSERT_OK(zrt_partition_step_in_backward(run.pm, counting_sgd, &b));
  forward_backward(&run, 0);
  ASSERT_OK(zrt_partition_step(run.pm, counting_sgd, &b));
  const std::vector<float> shard_before = read_shard(b.recorder);
  ASSERT_OK(zrt_partition_step_in_backward(run.pm, counting_sgd, &b));
  if (rank == size - 1) _exit(kVictimExit);
  const auto start = std::chrono::steady_clock::now();
  // The survivors' backward: grad_ready only enqueues, so it may succeed or already see the
  // broken communicator; the step must fail either way.
  zrt_status_t status = ZRT_SUCCESS;
  for (int u = kUnits - 1; u >= 0 && status == ZRT_SUCCESS; --u) {
    void* grad = nullptr;
    status = zrt_partition_fetch(run.pm, u);
    if (status == ZRT_SUCCESS) status = zrt_partition_grad_data(run.pm, run.params[u], &grad);
    if (status == ZRT_SUCCESS) {
      std::fill_n(static_cast<float*>(grad), unit_numel(u), 0.5f);
      status = zrt_partition_grad_ready(run.pm, u);
    }
    if (status == ZRT_SUCCESS) status = zrt_partition_release(run.pm, u);
  }
  // Called after a failed backward too: it must fail, disarm and roll back, not wait.
  const zrt_status_t stepped = zrt_partition_step(run.pm, counting_sgd, &b);
  if (status == ZRT_SUCCESS) status = stepped;
  EXPECT_NE(stepped, ZRT_SUCCESS) << "the step succeeded with a dead peer";
  const auto elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(
                           std::chrono::steady_clock::now() - start)
                           .count();
  const std::string message = zrt_last_error();
  EXPECT_NE(status, ZRT_SUCCESS) << "the step succeeded with a dead peer";
  EXPECT_LE(elapsed, kDeadLimitMs) << message;
  EXPECT_TRUE(same_bytes(read_shard(b.recorder), shard_before))
      << "master/state changed: " << message;
  std::fprintf(stderr, "rank %d: failed after %lld ms with %s: %s\n", rank,
               static_cast<long long>(elapsed), zrt_status_string(status), message.c_str());
  // Teardown must not hang either (errors are expected: the peer is gone).
  zrt_partition_destroy(run.pm);
  zrt_comm_destroy(run.comm);
}

TEST(PartitionOffload, InBackwardDeadPeerFailsEverySurvivorWithinTheTimeoutN3) {
  RankOptions options;
  options.env["ZRT_TIMEOUT"] = "2";
  options.deadline_ms = 60000;
  const std::vector<RankOutcome> outcomes =
      run_ranks(kDeadRanks, dead_peer_in_backward_body, options);
  for (const RankOutcome& o : outcomes) {
    if (o.rank == kDeadRanks - 1) {
      EXPECT_EQ(o.exit_code, kVictimExit) << o.describe();
    } else {
      EXPECT_TRUE(o.passed()) << o.describe();
    }
  }
}

}  // namespace
}  // namespace zrt::testing
