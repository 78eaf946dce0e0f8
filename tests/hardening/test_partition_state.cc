// The partition manager never wedges: random sequences of its calls (valid, out of order, with
// out-of-range arguments, failing optimizers) on one rank at every stage. Every refusal must be
// a non-internal status with a message, and must leave the manager usable: from whatever state
// the sequence reached, a recovery (release what is fetched, finish the micro-batch) and a step
// succeed, and a clean step afterwards moves every parameter by exactly -lr * gradient.
//
// The seed is printed; ZRT_STATE_SEED=<seed> replays a run, ZRT_STATE_CALLS sets its length.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "zrt/zrt.h"

namespace {

constexpr float kLr = 0.125f;  // exact in binary: the clean step's update is checked exactly

uint64_t env_or(const char* name, uint64_t fallback) {
  const char* value = std::getenv(name);
  return value != nullptr ? std::strtoull(value, nullptr, 10) : fallback;
}

bool contains(const std::string& text, const char* part) {
  return text.find(part) != std::string::npos;
}

zrt_status_t sgd(const zrt_optimizer_args_t* a, void*) {
  for (size_t i = 0; i < a->count; ++i) a->master[i] -= kLr * a->grad[i];
  return ZRT_SUCCESS;
}

zrt_status_t failing_optimizer(const zrt_optimizer_args_t*, void*) {
  return ZRT_INVALID_ARGUMENT;
}

struct Model {
  zrt_partition_t pm = nullptr;
  std::vector<int> units;
  std::vector<std::vector<int>> params;    // per unit
  std::vector<std::vector<size_t>> numel;  // per unit, per param
  std::vector<size_t> param_numel;         // by parameter index
  int frozen_param = -1;
  std::vector<int> param_unit;  // by parameter index (index into units)
  std::set<int> fetched;        // units this test saw fetched and not released
  int open = -1;                // the unit (index) whose gradients this test saw opened
  std::set<int> signalled;      // units signalled in the micro-batch under way
};

void build(zrt_comm_t comm, int stage, Model* m) {
  zrt_partition_config_t config = ZRT_PARTITION_CONFIG_INIT;
  config.stage = stage;
  config.prefetch_depth = 1;
  config.persistence_threshold = 0;
  config.bucket_bytes = 1024;
  config.optimizer_slots = 0;
  ASSERT_EQ(zrt_partition_create(comm, &config, &m->pm), ZRT_SUCCESS) << zrt_last_error();
  for (int u = 0; u < 3; ++u) {
    int unit = 0;
    ASSERT_EQ(zrt_partition_add_unit(m->pm, "unit", &unit), ZRT_SUCCESS);
    m->units.push_back(unit);
    m->params.emplace_back();
    m->numel.emplace_back();
    for (int p = 0; p < 2; ++p) {
      const size_t numel = 100 + 37 * static_cast<size_t>(u) + 11 * static_cast<size_t>(p);
      int param = 0;
      ASSERT_EQ(zrt_partition_add_param(m->pm, unit, "w", numel, 0, &param), ZRT_SUCCESS);
      m->params.back().push_back(param);
      m->numel.back().push_back(numel);
      m->param_numel.resize(static_cast<size_t>(param) + 1);
      m->param_numel[static_cast<size_t>(param)] = numel;
      m->param_unit.resize(static_cast<size_t>(param) + 1);
      m->param_unit[static_cast<size_t>(param)] = u;
    }
  }
  int unit = 0;
  ASSERT_EQ(zrt_partition_add_unit(m->pm, "frozen", &unit), ZRT_SUCCESS);
  ASSERT_EQ(zrt_partition_add_param(m->pm, unit, "table", 20, ZRT_PARAM_FROZEN, &m->frozen_param),
            ZRT_SUCCESS);
  ASSERT_EQ(zrt_partition_finalize(m->pm), ZRT_SUCCESS) << zrt_last_error();
}

int param_count(const Model& m) {
  return m.frozen_param + 1;
}

// A refusal: a status that is not success or an internal error, and a message.
void expect_refusal(zrt_status_t status, const std::string& call) {
  EXPECT_NE(status, ZRT_INTERNAL_ERROR) << call << ": " << zrt_last_error();
  EXPECT_NE(std::string(zrt_last_error()), "") << call << " gave no message";
}

// One random call; returns whether it was refused. `trace` gets its description.
bool random_call(Model& m, std::mt19937_64& rng, std::string* trace) {
  const int units = static_cast<int>(m.units.size()) + 1;  // the frozen unit too
  const int unit = static_cast<int>(rng() % static_cast<uint64_t>(units + 2)) - 1;  // -1..units
  const int param = static_cast<int>(rng() % static_cast<uint64_t>(param_count(m) + 2)) - 1;
  zrt_status_t status = ZRT_SUCCESS;
  switch (rng() % 11) {
    case 0:
      *trace = "fetch " + std::to_string(unit);
      status = zrt_partition_fetch(m.pm, unit);
      if (status == ZRT_SUCCESS) m.fetched.insert(unit);
      break;
    case 1:
      *trace = "release " + std::to_string(unit);
      status = zrt_partition_release(m.pm, unit);
      if (status == ZRT_SUCCESS) m.fetched.erase(unit);
      break;
    case 2:
    case 3: {
      *trace = "grad_data " + std::to_string(param);
      void* grad = nullptr;
      status = zrt_partition_grad_data(m.pm, param, &grad);
      if (status == ZRT_SUCCESS) {
        EXPECT_NE(grad, nullptr);
        m.open = m.param_unit.at(static_cast<size_t>(param));
        float* values = static_cast<float*>(grad);
        for (size_t i = 0; i < m.param_numel.at(static_cast<size_t>(param)); ++i) values[i] = 1.0f;
      }
      break;
    }
    case 4:
    case 5:
      *trace = "grad_ready " + std::to_string(unit);
      status = zrt_partition_grad_ready(m.pm, unit);
      if (status == ZRT_SUCCESS) {
        if (unit == m.open) m.open = -1;
        m.signalled.insert(unit);
        // The last unit ends the micro-batch.
        if (m.signalled.size() == m.units.size()) m.signalled.clear();
      }
      break;
    case 6: {
      *trace = "param_data " + std::to_string(param);
      void* data = nullptr;
      status = zrt_partition_param_data(m.pm, param, &data);
      break;
    }
    case 7: {
      const int sync = static_cast<int>(rng() % 2);
      *trace = "set_sync " + std::to_string(sync);
      status = zrt_partition_set_sync(m.pm, sync);
      break;
    }
    case 8: {
      *trace = "grad_norm";
      double norm = 0;
      int nonfinite = 0;
      status = zrt_partition_grad_norm(m.pm, &norm, &nonfinite);
      break;
    }
    case 9: {
      const bool fail = rng() % 4 == 0;
      *trace = fail ? "step (failing optimizer)" : "step";
      status = zrt_partition_step(m.pm, fail ? failing_optimizer : sgd, nullptr);
      if (fail) {
        EXPECT_NE(status, ZRT_SUCCESS) << "a failing optimizer's step succeeded";
      }
      break;
    }
    case 10: {
      *trace = "memory + stats";
      zrt_partition_memory_t memory{};
      memory.size = sizeof(memory);
      status = zrt_partition_memory(m.pm, &memory);
      EXPECT_EQ(status, ZRT_SUCCESS) << zrt_last_error();
      zrt_partition_stats_t stats{};
      stats.size = sizeof(stats);
      status = zrt_partition_stats(m.pm, &stats);
      break;
    }
  }
  if (status != ZRT_SUCCESS) expect_refusal(status, *trace);
  return status != ZRT_SUCCESS;
}

// Writes 1 into every gradient of unit index u and signals it; returns false (with no failure)
// when the unit was already signalled in this micro-batch (the one refusal its state explains).
bool finish_unit(Model& m, int u, const std::string& after) {
  EXPECT_EQ(zrt_partition_fetch(m.pm, m.units[u]), ZRT_SUCCESS)
      << after << ": " << zrt_last_error();
  bool signalled = false;
  for (size_t p = 0; p < m.params[u].size() && !signalled; ++p) {
    void* grad = nullptr;
    const zrt_status_t status = zrt_partition_grad_data(m.pm, m.params[u][p], &grad);
    if (status != ZRT_SUCCESS) {
      EXPECT_EQ(status, ZRT_INVALID_USAGE) << after << ": " << zrt_last_error();
      EXPECT_TRUE(contains(zrt_last_error(), "already signalled"))
          << after << ": " << zrt_last_error();
      signalled = true;
      break;
    }
    float* values = static_cast<float*>(grad);
    for (size_t i = 0; i < m.numel[u][p]; ++i) values[i] = 1.0f;
  }
  if (!signalled) {
    EXPECT_EQ(zrt_partition_grad_ready(m.pm, m.units[u]), ZRT_SUCCESS)
        << after << ": " << zrt_last_error();
  }
  EXPECT_EQ(zrt_partition_release(m.pm, m.units[u]), ZRT_SUCCESS)
      << after << ": " << zrt_last_error();
  return !signalled;
}

// From any state: release what is fetched, finish the micro-batch under way (its open unit
// first), back to synchronised micro-batches, and step (after one more micro-batch if the
// finished one was not synchronised). Only the refusals the state explains are allowed;
// anything else means the manager is wedged.
void recover(Model& m, const std::string& after) {
  for (int unit : std::set<int>(m.fetched)) {
    ASSERT_EQ(zrt_partition_release(m.pm, unit), ZRT_SUCCESS) << after << ": " << zrt_last_error();
  }
  m.fetched.clear();
  std::vector<int> order;
  if (m.open >= 0) order.push_back(m.open);
  for (int u = static_cast<int>(m.units.size()) - 1; u >= 0; --u) {
    if (u != m.open) order.push_back(u);
  }
  m.open = -1;
  for (int u : order) {
    if (m.signalled.count(u) == 0) {
      ASSERT_TRUE(finish_unit(m, u, after)) << after << ": unit " << u;
    }
  }
  m.signalled.clear();
  ASSERT_FALSE(::testing::Test::HasFailure());
  ASSERT_EQ(zrt_partition_set_sync(m.pm, 1), ZRT_SUCCESS) << after << ": " << zrt_last_error();
  zrt_status_t status = zrt_partition_step(m.pm, sgd, nullptr);
  if (status != ZRT_SUCCESS) {
    // The micro-batch just finished was a no-sync one: nothing reduced yet.
    ASSERT_TRUE(contains(zrt_last_error(), "no synchronised micro-batch") ||
                contains(zrt_last_error(), "ran without synchronisation"))
        << after << ": " << zrt_last_error();
    for (int u = static_cast<int>(m.units.size()) - 1; u >= 0; --u) {
      ASSERT_TRUE(finish_unit(m, u, after)) << after;
    }
    status = zrt_partition_step(m.pm, sgd, nullptr);
  }
  ASSERT_EQ(status, ZRT_SUCCESS) << after << ": " << zrt_last_error();
}

std::vector<std::vector<float>> read_params(Model& m) {
  std::vector<std::vector<float>> values;
  for (size_t u = 0; u < m.units.size(); ++u) {
    EXPECT_EQ(zrt_partition_fetch(m.pm, m.units[u]), ZRT_SUCCESS) << zrt_last_error();
    for (size_t p = 0; p < m.params[u].size(); ++p) {
      void* data = nullptr;
      EXPECT_EQ(zrt_partition_param_data(m.pm, m.params[u][p], &data), ZRT_SUCCESS)
          << zrt_last_error();
      const float* f = static_cast<const float*>(data);
      if (f == nullptr) return values;  // the failure above is reported; nothing to read
      values.emplace_back(f, f + m.numel[u][p]);
    }
    EXPECT_EQ(zrt_partition_release(m.pm, m.units[u]), ZRT_SUCCESS) << zrt_last_error();
  }
  return values;
}

// A step with every gradient 1: every parameter moves by exactly -kLr.
void clean_step_is_correct(Model& m, const std::string& after) {
  const auto before = read_params(m);
  for (int u = static_cast<int>(m.units.size()) - 1; u >= 0; --u) {
    ASSERT_EQ(zrt_partition_fetch(m.pm, m.units[u]), ZRT_SUCCESS) << after;
    for (size_t p = 0; p < m.params[u].size(); ++p) {
      void* grad = nullptr;
      ASSERT_EQ(zrt_partition_grad_data(m.pm, m.params[u][p], &grad), ZRT_SUCCESS)
          << after << ": " << zrt_last_error();
      float* values = static_cast<float*>(grad);
      for (size_t i = 0; i < m.numel[u][p]; ++i) values[i] = 1.0f;
    }
    ASSERT_EQ(zrt_partition_grad_ready(m.pm, m.units[u]), ZRT_SUCCESS) << after;
    ASSERT_EQ(zrt_partition_release(m.pm, m.units[u]), ZRT_SUCCESS) << after;
  }
  ASSERT_EQ(zrt_partition_step(m.pm, sgd, nullptr), ZRT_SUCCESS)
      << after << ": " << zrt_last_error();
  const auto now = read_params(m);
  ASSERT_EQ(now.size(), before.size());
  for (size_t k = 0; k < now.size(); ++k) {
    for (size_t i = 0; i < now[k].size(); ++i) {
      ASSERT_EQ(now[k][i], before[k][i] - kLr) << after << ": param " << k << " element " << i;
    }
  }
}

TEST(PartitionState, RandomCallSequencesNeverWedgeTheManager) {
  const uint64_t seed = env_or("ZRT_STATE_SEED", std::random_device{}());
  const int calls = static_cast<int>(env_or("ZRT_STATE_CALLS", 1500));
  std::fprintf(stderr,
               "partition state: seed %llu, %d calls per stage (replay: "
               "ZRT_STATE_SEED=%llu)\n",
               static_cast<unsigned long long>(seed), calls, static_cast<unsigned long long>(seed));
  zrt_comm_t comm = nullptr;
  ASSERT_EQ(zrt_comm_init_env(nullptr, &comm), ZRT_SUCCESS) << zrt_last_error();
  std::mt19937_64 rng(seed);
  for (int stage = 0; stage <= 3; ++stage) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    Model m;
    build(comm, stage, &m);
    if (::testing::Test::HasFatalFailure()) break;
    std::vector<std::string> history;
    int refusals = 0;
    for (int i = 0; i < calls; ++i) {
      std::string trace;
      const bool refused = random_call(m, rng, &trace);
      history.push_back(trace + (refused ? " -> refused" : ""));
      if (history.size() > 12) history.erase(history.begin());
      refusals += refused ? 1 : 0;
      if (refused && rng() % 3 == 0) {
        std::string after = "after";
        for (const std::string& line : history) after += " | " + line;
        recover(m, after);
        if (::testing::Test::HasFatalFailure()) break;
        clean_step_is_correct(m, after);
        if (::testing::Test::HasFatalFailure()) break;
        history.clear();
      }
      if (::testing::Test::HasFailure()) break;
    }
    EXPECT_GT(refusals, calls / 10);  // the sequences do reach the refusals
    recover(m, "at the end");
    clean_step_is_correct(m, "at the end");
    EXPECT_EQ(zrt_partition_destroy(m.pm), ZRT_SUCCESS) << zrt_last_error();
    if (::testing::Test::HasFailure()) break;
  }
  EXPECT_EQ(zrt_comm_destroy(comm), ZRT_SUCCESS);
}

// The message of item 11: grad_data after grad_ready of the same unit is refused and says why.
TEST(PartitionState, GradDataAfterGradReadyIsRefused) {
  zrt_comm_t comm = nullptr;
  ASSERT_EQ(zrt_comm_init_env(nullptr, &comm), ZRT_SUCCESS) << zrt_last_error();
  for (int stage = 0; stage <= 3; ++stage) {
    Model m;
    build(comm, stage, &m);
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    ASSERT_EQ(zrt_partition_fetch(m.pm, m.units[2]), ZRT_SUCCESS);
    void* grad = nullptr;
    ASSERT_EQ(zrt_partition_grad_data(m.pm, m.params[2][0], &grad), ZRT_SUCCESS);
    ASSERT_EQ(zrt_partition_grad_ready(m.pm, m.units[2]), ZRT_SUCCESS) << zrt_last_error();
    EXPECT_EQ(zrt_partition_grad_data(m.pm, m.params[2][1], &grad), ZRT_INVALID_USAGE);
    EXPECT_TRUE(contains(zrt_last_error(), "already signalled")) << zrt_last_error();
    EXPECT_TRUE(contains(zrt_last_error(), "before grad_ready")) << zrt_last_error();
    ASSERT_EQ(zrt_partition_release(m.pm, m.units[2]), ZRT_SUCCESS);
    m.fetched.clear();
    m.signalled.insert(2);
    recover(m, "stage " + std::to_string(stage));
    clean_step_is_correct(m, "stage " + std::to_string(stage));
    EXPECT_EQ(zrt_partition_destroy(m.pm), ZRT_SUCCESS);
  }
  EXPECT_EQ(zrt_comm_destroy(comm), ZRT_SUCCESS);
}

TEST(PartitionState, StreamSynchronizeNullSaysWhatToPass) {
  EXPECT_EQ(zrt_stream_synchronize(nullptr), ZRT_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(zrt_last_error(), "zrt_stream_create")) << zrt_last_error();
}

TEST(PartitionState, OversizedParametersAreRefusedNamingTheLimit) {
  zrt_comm_t comm = nullptr;
  ASSERT_EQ(zrt_comm_init_env(nullptr, &comm), ZRT_SUCCESS) << zrt_last_error();
  zrt_partition_t pm = nullptr;
  ASSERT_EQ(zrt_partition_create(comm, nullptr, &pm), ZRT_SUCCESS);
  int unit = 0, param = 0;
  ASSERT_EQ(zrt_partition_add_unit(pm, "u", &unit), ZRT_SUCCESS);
  // SIZE_MAX / 4 + 2: its byte count wraps to 4 bytes.
  EXPECT_EQ(zrt_partition_add_param(pm, unit, "wraps", SIZE_MAX / 4 + 2, 0, &param),
            ZRT_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(zrt_last_error(), "\"wraps\"")) << zrt_last_error();
  EXPECT_TRUE(contains(zrt_last_error(), "2^50")) << zrt_last_error();
  // Two of 2^49 + 1: each is fine, together over the model limit.
  const size_t half = (size_t{1} << 49) + 1;
  ASSERT_EQ(zrt_partition_add_param(pm, unit, "a", half, 0, &param), ZRT_SUCCESS);
  EXPECT_EQ(zrt_partition_add_param(pm, unit, "b", half, 0, &param), ZRT_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(zrt_last_error(), "\"b\"")) << zrt_last_error();
  EXPECT_TRUE(contains(zrt_last_error(), "in all")) << zrt_last_error();
  EXPECT_EQ(zrt_partition_destroy(pm), ZRT_SUCCESS);
  // 2^50 elements at stage 2 in small buckets: refused at finalize before anything is
  // allocated (quickly), naming the bucket count and what to change.
  zrt_partition_config_t config = ZRT_PARTITION_CONFIG_INIT;
  config.stage = 2;
  config.bucket_bytes = 1 << 20;
  ASSERT_EQ(zrt_partition_create(comm, &config, &pm), ZRT_SUCCESS);
  ASSERT_EQ(zrt_partition_add_unit(pm, "u", &unit), ZRT_SUCCESS);
  ASSERT_EQ(zrt_partition_add_param(pm, unit, "big", size_t{1} << 50, 0, &param), ZRT_SUCCESS);
  EXPECT_EQ(zrt_partition_finalize(pm), ZRT_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(zrt_last_error(), "bucket")) << zrt_last_error();
  EXPECT_EQ(zrt_partition_destroy(pm), ZRT_SUCCESS);
  EXPECT_EQ(zrt_comm_destroy(comm), ZRT_SUCCESS);
}

}  // namespace
