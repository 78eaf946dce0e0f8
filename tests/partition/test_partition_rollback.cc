// The all-or-nothing zrt_partition_step on real ranks over UCX (FileOob bootstrap). An
// optimizer that fails on one rank only (after scribbling over half of its master and state)
// must fail the step on every rank and leave master, state and parameters byte-identical to
// before the step; a retried step must then match an uninterrupted run bit for bit. With
// step_backup = 0 the documented weaker behaviour holds. A peer that dies during the step
// (inside its optimizer, or before it) must make the survivors fail within the timeout with
// their master and state untouched.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/harness/file_bootstrap.h"
#include "tests/harness/multirank.h"
#include "tests/harness/rank_count.h"
#include "tests/harness/status_assert.h"
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

constexpr zrt_status_t kFailure = ZRT_SYSTEM_ERROR;  // what the failing callback returns
constexpr int kVictimExit = 3;

std::string run_dir() {
  const char* dir = std::getenv("ZRT_TEST_RUN_DIR");
  return dir != nullptr ? dir : "/tmp";
}

// What the optimizer callback does this time, and where the live shard buffers are (the
// callback records them: they stay put until the manager is destroyed).
struct Optimizer {
  bool fail = false;  // scribble over half of master and state, then return kFailure
  bool die = false;   // scribble, then _exit (a peer dying inside the step)
  float* master = nullptr;
  std::vector<float*> state;
  size_t count = 0;
};

// A small momentum SGD: deterministic, touches master and both state slots.
zrt_status_t optimizer_fn(const zrt_optimizer_args_t* a, void* user) {
  auto* o = static_cast<Optimizer*>(user);
  o->master = a->master;
  o->state.assign(a->state, a->state + a->num_state);
  o->count = a->count;
  if (o->fail || o->die) {
    for (size_t i = 0; i < a->count / 2; ++i) {
      a->master[i] += 1.0f;
      a->state[0][i] = 42.0f;
    }
    if (o->die) _exit(kVictimExit);
    return kFailure;
  }
  for (size_t i = 0; i < a->count; ++i) {
    a->state[0][i] = 0.9f * a->state[0][i] + a->grad[i];
    a->state[1][i] += a->grad[i] * a->grad[i];
    a->master[i] -= 0.05f * a->state[0][i];
  }
  return ZRT_SUCCESS;
}

void make_pm(Run* run, int stage, int step_backup) {
  zrt_partition_config_t config = straddling::model_config();
  config.stage = stage;
  config.step_backup = step_backup;
  straddling::create(run, config);
}

// Master then each state slot, copied from the live buffers the callback recorded.
std::vector<float> read_shard(const Optimizer& o) {
  std::vector<float> all(o.master, o.master + o.count);
  for (float* s : o.state) all.insert(all.end(), s, s + o.count);
  return all;
}

void init_comm(Run* run, int rank, int size, const std::string& name) {
  run->rank = rank;
  static std::vector<std::unique_ptr<FileOob>> oobs;  // must outlive the communicator
  oobs.push_back(std::make_unique<FileOob>(run_dir(), name, rank, size));
  ASSERT_OK(zrt_comm_init_oob(&oobs.back()->oob(), nullptr, &run->comm));
}

// Three steps; with `fail_rank` >= 0 that rank's optimizer fails on the second step, which is
// checked and then retried. *final: the parameters at the end.
void train(Run* run, int fail_rank, std::vector<float>* final_params) {
  Optimizer opt;
  for (int step = 0; step < 3; ++step) {
    forward_backward(run, step);
    if (::testing::Test::HasFailure()) return;
    if (step == 1 && fail_rank >= 0) {
      const std::vector<float> params_before = read_params(run);
      const std::vector<float> shard_before = read_shard(opt);
      int64_t count_before = -1;
      ASSERT_OK(zrt_partition_get_step(run->pm, &count_before));
      opt.fail = run->rank == fail_rank;
      const zrt_status_t status = zrt_partition_step(run->pm, optimizer_fn, &opt);
      opt.fail = false;
      const std::string message = zrt_last_error();
      EXPECT_EQ(status, kFailure) << message;
      const std::string named = " " + std::to_string(fail_rank) + " (ZRT_SYSTEM_ERROR)";
      EXPECT_NE(message.find(named), std::string::npos) << message;
      EXPECT_NE(message.find("restored"), std::string::npos) << message;
      EXPECT_TRUE(same_bytes(read_shard(opt), shard_before)) << "master/state not rolled back";
      EXPECT_TRUE(same_bytes(read_params(run), params_before)) << "parameters changed";
      int64_t count_after = -1;
      ASSERT_OK(zrt_partition_get_step(run->pm, &count_after));
      EXPECT_EQ(count_after, count_before);
    }
    // A retry needs no new backward: the gradients survive a failed step.
    ASSERT_OK(zrt_partition_step(run->pm, optimizer_fn, &opt));
  }
  int64_t steps = 0;
  ASSERT_OK(zrt_partition_get_step(run->pm, &steps));
  EXPECT_EQ(steps, 3);
  *final_params = read_params(run);
}

void rollback_body(int rank, int size) {
  Run run;
  init_comm(&run, rank, size, "rollback");
  if (::testing::Test::HasFailure()) return;
  for (int stage = 0; stage <= 3; ++stage) {
    SCOPED_TRACE(::testing::Message() << "N " << size << " stage " << stage);
    std::vector<float> uninterrupted, retried;
    make_pm(&run, stage, 1);
    train(&run, -1, &uninterrupted);
    ASSERT_OK(zrt_partition_destroy(run.pm));
    run.params.clear();
    for (int fail_rank : {size - 1, 0}) {
      make_pm(&run, stage, 1);
      train(&run, fail_rank, &retried);
      EXPECT_TRUE(same_bytes(retried, uninterrupted))
          << "retried run differs, failing rank " << fail_rank;
      // The backup is its own category: (1 + slots) f32 arrays of the shard, in the total only.
      zrt_partition_memory_t m{};
      m.size = sizeof(m);
      ASSERT_OK(zrt_partition_memory(run.pm, &m));
      EXPECT_EQ(m.step_backup, m.master * 3);
      EXPECT_EQ(m.model_state, m.full_params + m.param_shard + m.gradients + m.grad_shard +
                                   m.master + m.optimizer_state);
      EXPECT_EQ(m.total,
                m.model_state + m.buckets + m.gather_window + m.grad_staging + m.step_backup);
      ASSERT_OK(zrt_partition_destroy(run.pm));
      run.params.clear();
      if (size == 1) break;
    }
  }
  EXPECT_OK(zrt_comm_destroy(run.comm));
}

class RollbackRanks : public RankCount {};
TEST_P(RollbackRanks, FailedOptimizerOnOneRankRollsBackEveryRank) {
  expect_ranks_pass(GetParam(), rollback_body);
}
INSTANTIATE_TEST_SUITE_P(PartitionRollback, RollbackRanks, ::testing::Values(1, 2, 3),
                         rank_count_name);

// The backup's copy is spread over the fetches (a share of it per fetch); a step reached after
// fewer fetches than units copies the rest itself, and a failed optimizer is still rolled back
// byte for byte. Here one fetch (one share) and a backward without fetches.
void partial_backup_body(int rank, int size) {
  Run run;
  init_comm(&run, rank, size, "partial");
  if (::testing::Test::HasFailure()) return;
  for (int stage = 2; stage <= 3; ++stage) {
    SCOPED_TRACE(::testing::Message() << "stage " << stage);
    make_pm(&run, stage, 1);
    Optimizer opt;
    forward_backward(&run, 0);
    ASSERT_OK(zrt_partition_step(run.pm, optimizer_fn, &opt));
    ASSERT_OK(zrt_partition_fetch(run.pm, kUnits - 1));
    ASSERT_OK(zrt_partition_release(run.pm, kUnits - 1));
    for (int u = kUnits - 1; u >= 0; --u) {
      void* grad = nullptr;
      ASSERT_OK(zrt_partition_grad_data(run.pm, run.params[u], &grad));
      std::fill_n(static_cast<float*>(grad), unit_numel(u), 0.25f * static_cast<float>(u + 1));
      ASSERT_OK(zrt_partition_grad_ready(run.pm, u));
    }
    const std::vector<float> shard_before = read_shard(opt);
    opt.fail = rank == size - 1;
    EXPECT_EQ(zrt_partition_step(run.pm, optimizer_fn, &opt), kFailure) << zrt_last_error();
    opt.fail = false;
    EXPECT_TRUE(same_bytes(read_shard(opt), shard_before)) << "master/state not rolled back";
    ASSERT_OK(zrt_partition_step(run.pm, optimizer_fn, &opt));
    EXPECT_FALSE(same_bytes(read_shard(opt), shard_before)) << "the retried step did nothing";
    ASSERT_OK(zrt_partition_destroy(run.pm));
    run.params.clear();
  }
  EXPECT_OK(zrt_comm_destroy(run.comm));
}

TEST(PartitionRollback, BackupTakenPartlyByFetchesStillRollsBackN2) {
  expect_ranks_pass(2, partial_backup_body);
}

// step_backup = 0: no copy, no memory for it; a failing optimizer still fails the step on every
// rank before anything is published (parameters and step count unchanged), but master/state
// keep what the callbacks did: the failing rank's scribble, the others' update.
void no_backup_body(int rank, int size) {
  Run run;
  init_comm(&run, rank, size, "nobackup");
  if (::testing::Test::HasFailure()) return;
  for (int stage = 0; stage <= 3; ++stage) {
    SCOPED_TRACE(::testing::Message() << "N " << size << " stage " << stage);
    make_pm(&run, stage, 0);
    zrt_partition_memory_t m{};
    m.size = sizeof(m);
    ASSERT_OK(zrt_partition_memory(run.pm, &m));
    EXPECT_EQ(m.step_backup, 0u);
    EXPECT_EQ(m.total, m.model_state + m.buckets + m.gather_window + m.grad_staging);
    Optimizer opt;
    forward_backward(&run, 0);
    ASSERT_OK(zrt_partition_step(run.pm, optimizer_fn, &opt));
    forward_backward(&run, 1);
    const std::vector<float> params_before = read_params(&run);
    const std::vector<float> shard_before = read_shard(opt);
    opt.fail = rank == size - 1;
    const zrt_status_t status = zrt_partition_step(run.pm, optimizer_fn, &opt);
    const std::string message = zrt_last_error();
    EXPECT_EQ(status, kFailure) << message;
    EXPECT_NE(message.find("step_backup is 0"), std::string::npos) << message;
    EXPECT_TRUE(same_bytes(read_params(&run), params_before)) << "parameters were published";
    EXPECT_FALSE(same_bytes(read_shard(opt), shard_before)) << "master/state: callbacks' work";
    int64_t steps = -1;
    ASSERT_OK(zrt_partition_get_step(run.pm, &steps));
    EXPECT_EQ(steps, 1);
    ASSERT_OK(zrt_partition_destroy(run.pm));
    run.params.clear();
  }
  EXPECT_OK(zrt_comm_destroy(run.comm));
}

TEST(PartitionRollback, WithoutBackupEveryRankFailsBeforePublishingN2) {
  expect_ranks_pass(2, no_backup_body);
}

// A dead peer. Three ranks; the last one dies inside its optimizer (after scribbling, so the
// survivors' vote fails after their own optimizer ran: the backup must undo it) or before the
// step (the survivors' reductions or first vote fail: nothing was touched). Short timeout.
constexpr int kRanks = 3;
constexpr int64_t kLimitMs = 2000 + 8000;  // ZRT_TIMEOUT=2 s plus slack for 3 ranks on 2 cores

void dead_peer_body(int rank, int size, int stage, bool inside_optimizer) {
  Run run;
  init_comm(&run, rank, size, "dead");
  if (::testing::Test::HasFailure()) return;
  make_pm(&run, stage, 1);
  if (::testing::Test::HasFailure()) return;
  Optimizer opt;
  forward_backward(&run, 0);
  ASSERT_OK(zrt_partition_step(run.pm, optimizer_fn, &opt));
  const bool victim = rank == size - 1;
  forward_backward(&run, 1);
  // Every rank's forward and backward have returned before the victim may die: a survivor
  // still waiting in them when the death is detected would fail there instead (a failed
  // communicator fails every later wait). The handshake is an all-gather over files, outside
  // the communicator, so it cannot fail with it.
  {
    FileOob done(run_dir(), "dead-backward-done", rank, size);
    const zrt_oob_t& oob = done.oob();
    char mine = 1;
    std::vector<char> all(static_cast<size_t>(size));
    void* request = nullptr;
    ASSERT_OK(oob.allgather(&mine, all.data(), 1, oob.user_data, &request));
    zrt_status_t status = ZRT_IN_PROGRESS;
    while (status == ZRT_IN_PROGRESS) status = oob.test(request);  // test() sleeps while waiting
    oob.free(request);
    ASSERT_OK(status);
  }
  // Before the step: after its backward, so the survivors' fetches have what they need.
  if (victim && !inside_optimizer) _exit(kVictimExit);
  const std::vector<float> shard_before = read_shard(opt);
  opt.die = victim;
  const auto start = std::chrono::steady_clock::now();
  const zrt_status_t status = zrt_partition_step(run.pm, optimizer_fn, &opt);
  const auto elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(
                           std::chrono::steady_clock::now() - start)
                           .count();
  const std::string message = zrt_last_error();
  EXPECT_TRUE(status == ZRT_TIMEOUT || status == ZRT_REMOTE_ERROR)
      << zrt_status_string(status) << ": " << message;
  EXPECT_LE(elapsed, kLimitMs) << message;
  EXPECT_TRUE(same_bytes(read_shard(opt), shard_before)) << "master/state changed: " << message;
  std::fprintf(stderr, "rank %d: step failed after %lld ms: %s\n", rank,
               static_cast<long long>(elapsed), message.c_str());
  // Teardown must not hang either (errors are expected: the peer is gone).
  zrt_partition_destroy(run.pm);
  zrt_comm_destroy(run.comm);
}

void expect_survivors(int stage, bool inside_optimizer) {
  RankOptions options;
  options.env["ZRT_TIMEOUT"] = "2";
  options.deadline_ms = 60000;
  const std::vector<RankOutcome> outcomes = run_ranks(
      kRanks,
      [stage, inside_optimizer](int rank, int size) {
        dead_peer_body(rank, size, stage, inside_optimizer);
      },
      options);
  for (const RankOutcome& o : outcomes) {
    if (o.rank == kRanks - 1) {
      EXPECT_EQ(o.exit_code, kVictimExit) << o.describe();
    } else {
      EXPECT_TRUE(o.passed()) << o.describe();
    }
  }
}

// Where the victim dies, and in which stage.
struct DeadPeerCase {
  int stage;
  bool inside_optimizer;
};

void PrintTo(const DeadPeerCase& c, std::ostream* os) {
  *os << "stage " << c.stage
      << (c.inside_optimizer ? ", inside its optimizer" : ", before the step");
}

class PeerDying : public ::testing::TestWithParam<DeadPeerCase> {};
TEST_P(PeerDying, LeavesSurvivorsIntact) {
  expect_survivors(GetParam().stage, GetParam().inside_optimizer);
}
INSTANTIATE_TEST_SUITE_P(PartitionRollback, PeerDying,
                         ::testing::Values(DeadPeerCase{2, true}, DeadPeerCase{3, true},
                                           DeadPeerCase{1, false}),
                         [](const ::testing::TestParamInfo<DeadPeerCase>& info) {
                           return std::string(info.param.inside_optimizer ? "InItsOptimizer"
                                                                          : "BeforeTheStep") +
                                  "Stage" + std::to_string(info.param.stage);
                         });

}  // namespace
}  // namespace zrt::testing
