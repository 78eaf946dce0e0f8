// zrt_partition_set_optimizer_slots on real ranks over UCX: a manager finalized with one slot
// count and changed to another before its first step trains bit for bit as one created with
// that count (stages 1-3, with and without offload, the full backup rolling a failed step back
// over the new arrays), and reports the new arrays in its memory figures; a count out of range,
// ranks asking for different counts, or a change after the first step fail on every rank and
// leave the state as it was.
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/harness/file_bootstrap.h"
#include "tests/harness/multirank.h"
#include "tests/harness/status_assert.h"
#include "tests/partition/straddling_model.h"
#include "zrt/zrt.h"

namespace zrt::testing {
namespace {

using straddling::forward_backward;
using straddling::read_params;
using straddling::Run;
using straddling::same_bytes;

std::string run_dir() {
  const char* dir = std::getenv("ZRT_TEST_RUN_DIR");
  return dir != nullptr ? dir : "/tmp";
}

// Momentum SGD with a second, accumulating slot when there is one; records the slot count it
// was handed and fails (after scribbling over its state) when told to.
struct Optimizer {
  int slots_seen = -1;
  bool fail = false;
};

zrt_status_t optimizer_fn(const zrt_optimizer_args_t* a, void* user) {
  auto* o = static_cast<Optimizer*>(user);
  o->slots_seen = a->num_state;
  for (size_t i = 0; i < a->count; ++i) {
    if (o->fail) {
      for (int s = 0; s < a->num_state; ++s) a->state[s][i] = 42.0f;
      continue;
    }
    a->state[0][i] = 0.9f * a->state[0][i] + a->grad[i];
    if (a->num_state > 1) a->state[1][i] += a->grad[i] * a->grad[i];
    a->master[i] -= 0.05f * a->state[0][i];
  }
  return o->fail ? ZRT_SYSTEM_ERROR : ZRT_SUCCESS;
}

struct Case {
  int stage;
  bool offload;
};

zrt_partition_memory_t memory_of(zrt_partition_t pm) {
  zrt_partition_memory_t memory{};
  memory.size = sizeof(memory);
  EXPECT_OK(zrt_partition_memory(pm, &memory));
  return memory;
}

// Three steps, the second failing on the last rank once (rolled back by the full backup) and
// retried; the parameters at the end.
std::vector<float> train(Run* run, int size, int expected_slots) {
  Optimizer opt;
  for (int step = 0; step < 3; ++step) {
    forward_backward(run, step);
    if (step == 1) {
      opt.fail = run->rank == size - 1;
      EXPECT_EQ(zrt_partition_step(run->pm, optimizer_fn, &opt), ZRT_SYSTEM_ERROR)
          << zrt_last_error();
      opt.fail = false;
    }
    EXPECT_OK(zrt_partition_step(run->pm, optimizer_fn, &opt));
    EXPECT_EQ(opt.slots_seen, expected_slots);
  }
  return read_params(run);
}

zrt_partition_config_t config_for(const Case& c, int slots) {
  zrt_partition_config_t config = straddling::model_config();
  config.stage = c.stage;
  config.offload_optimizer = c.offload ? 1 : 0;
  config.step_backup = ZRT_STEP_BACKUP_FULL;
  config.optimizer_slots = slots;
  return config;
}

void changed_matches_created_body(int rank, int size) {
  auto oob = std::make_unique<FileOob>(run_dir(), "slots-match", rank, size);
  Run run;
  run.rank = rank;
  ASSERT_OK(zrt_comm_init_oob(&oob->oob(), nullptr, &run.comm));
  for (const Case c : {Case{1, false}, Case{2, false}, Case{3, false}, Case{2, true}}) {
    SCOPED_TRACE(::testing::Message() << "stage " << c.stage << (c.offload ? " offload" : ""));
    for (const int slots : {1, 2}) {
      SCOPED_TRACE(::testing::Message() << slots << " slot(s)");
      straddling::create(&run, config_for(c, slots));
      const std::vector<float> created = train(&run, size, slots);
      const zrt_partition_memory_t expected = memory_of(run.pm);
      ASSERT_OK(zrt_partition_destroy(run.pm));
      run.params.clear();

      // From the other count (and once through zero slots) to this one.
      straddling::create(&run, config_for(c, 3 - slots));
      ASSERT_OK(zrt_partition_set_optimizer_slots(run.pm, 0));
      EXPECT_EQ(memory_of(run.pm).optimizer_state, 0u);
      ASSERT_OK(zrt_partition_set_optimizer_slots(run.pm, slots));
      const zrt_partition_memory_t changed = memory_of(run.pm);
      EXPECT_EQ(changed.optimizer_state, expected.optimizer_state);
      EXPECT_EQ(changed.step_backup, expected.step_backup);
      EXPECT_EQ(changed.total, expected.total);
      EXPECT_EQ(changed.theoretical_model_state, expected.theoretical_model_state);
      EXPECT_EQ(changed.host_total, expected.host_total);
      EXPECT_TRUE(same_bytes(train(&run, size, slots), created))
          << "a changed count trains otherwise than a created one";
      ASSERT_OK(zrt_partition_destroy(run.pm));
      run.params.clear();
    }
  }
  EXPECT_OK(zrt_comm_destroy(run.comm));
}

TEST(PartitionOptimizerSlots, ChangedBeforeTheFirstStepTrainsAsCreatedN2) {
  expect_ranks_pass(2, changed_matches_created_body);
}

TEST(PartitionOptimizerSlots, ChangedBeforeTheFirstStepTrainsAsCreatedN1) {
  expect_ranks_pass(1, changed_matches_created_body);
}

void refusals_body(int rank, int size) {
  auto oob = std::make_unique<FileOob>(run_dir(), "slots-refused", rank, size);
  Run run;
  run.rank = rank;
  ASSERT_OK(zrt_comm_init_oob(&oob->oob(), nullptr, &run.comm));
  straddling::create(&run, config_for(Case{3, false}, 2));
  const uint64_t state_bytes = memory_of(run.pm).optimizer_state;

  EXPECT_EQ(zrt_partition_set_optimizer_slots(run.pm, 17), ZRT_INVALID_ARGUMENT);
  EXPECT_NE(std::string(zrt_last_error()).find("0..16"), std::string::npos) << zrt_last_error();
  EXPECT_EQ(zrt_partition_set_optimizer_slots(run.pm, -1), ZRT_INVALID_ARGUMENT);

  // Rank r asks for r + 1: every rank refuses, naming what each asked for.
  EXPECT_EQ(zrt_partition_set_optimizer_slots(run.pm, rank + 1), ZRT_INVALID_USAGE);
  const std::string message = zrt_last_error();
  EXPECT_NE(message.find("rank 1: 2"), std::string::npos) << message;
  EXPECT_EQ(memory_of(run.pm).optimizer_state, state_bytes);

  Optimizer opt;
  forward_backward(&run, 0);
  ASSERT_OK(zrt_partition_step(run.pm, optimizer_fn, &opt));
  EXPECT_EQ(opt.slots_seen, 2);
  EXPECT_EQ(zrt_partition_set_optimizer_slots(run.pm, 1), ZRT_INVALID_USAGE);
  EXPECT_NE(std::string(zrt_last_error()).find("before the first step"), std::string::npos)
      << zrt_last_error();
  EXPECT_EQ(memory_of(run.pm).optimizer_state, state_bytes);
  forward_backward(&run, 1);
  ASSERT_OK(zrt_partition_step(run.pm, optimizer_fn, &opt));
  EXPECT_EQ(opt.slots_seen, 2);
  ASSERT_OK(zrt_partition_destroy(run.pm));

  zrt_partition_t unfinalized = nullptr;
  zrt_partition_config_t config = config_for(Case{3, false}, 2);
  ASSERT_OK(zrt_partition_create(run.comm, &config, &unfinalized));
  EXPECT_EQ(zrt_partition_set_optimizer_slots(unfinalized, 1), ZRT_INVALID_USAGE);
  ASSERT_OK(zrt_partition_destroy(unfinalized));
  EXPECT_EQ(zrt_partition_set_optimizer_slots(nullptr, 1), ZRT_INVALID_ARGUMENT);
  EXPECT_OK(zrt_comm_destroy(run.comm));
}

TEST(PartitionOptimizerSlots, RefusedOnEveryRankAndNothingChangesN2) {
  expect_ranks_pass(2, refusals_body);
}

}  // namespace
}  // namespace zrt::testing
