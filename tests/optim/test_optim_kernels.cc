// The fused optimizers against the scalar reference (optim_reference.h): random shards of odd
// sizes with padding between pieces, 100 steps with a changing learning rate, loss scaling and
// clipping, decay masks, with and without bias correction; every SIMD variant this CPU runs and
// 1 to 4 threads. Master and state agree with the reference within 1 ulp per element, the
// parameter copy is exactly zrt's conversion of the new master, and variants and thread counts
// agree bit for bit.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/reduce/reduce_kernels.h"
#include "kernels/optim/fused_step.h"
#include "kernels/optim/optim_dispatch.h"
#include "kernels/optim/thread_pool.h"
#include "tests/harness/status_assert.h"
#include "tests/optim/optim_reference.h"

namespace zrt::testing {
namespace {

using optim::Kind;
using reduce_internal::Variant;

std::vector<const optim::KernelTable*> supported_tables() {
  std::vector<const optim::KernelTable*> tables;
  for (Variant v : {Variant::kGeneric, Variant::kAvx2, Variant::kAvx512}) {
    if (const optim::KernelTable* t = optim::optim_table(v)) tables.push_back(t);
  }
  return tables;
}

// A named optimizer setting of the tests.
struct Case {
  std::string name;
  zrt_optimizer_kind_t kind;
  zrt_optimizer_config_t config;
};

std::vector<Case> cases() {
  std::vector<Case> all;
  auto add = [&](const std::string& name, zrt_optimizer_kind_t kind, auto&& edit) {
    zrt_optimizer_config_t c{};
    EXPECT_OK(zrt_optimizer_config_init(&c, sizeof(c), kind));
    edit(c);
    all.push_back({name, kind, c});
  };
  add("adamw", ZRT_OPTIMIZER_ADAMW, [](zrt_optimizer_config_t& c) { c.weight_decay = 0.1; });
  add("adamw_no_bias_correction", ZRT_OPTIMIZER_ADAMW, [](zrt_optimizer_config_t& c) {
    c.bias_correction = 0;
    c.beta2 = 0.99;
  });
  add("adam_l2", ZRT_OPTIMIZER_ADAM, [](zrt_optimizer_config_t& c) { c.weight_decay = 0.05; });
  add("sgd", ZRT_OPTIMIZER_SGD, [](zrt_optimizer_config_t& c) { c.lr = 0.01; });
  add("sgd_momentum_dampening", ZRT_OPTIMIZER_SGD, [](zrt_optimizer_config_t& c) {
    c.lr = 0.01;
    c.momentum = 0.9;
    c.dampening = 0.1;
    c.weight_decay = 0.01;
  });
  add("sgd_nesterov", ZRT_OPTIMIZER_SGD, [](zrt_optimizer_config_t& c) {
    c.lr = 0.01;
    c.momentum = 0.8;
    c.nesterov = 1;
    c.weight_decay = 0.02;
  });
  add("lion", ZRT_OPTIMIZER_LION, [](zrt_optimizer_config_t& c) { c.weight_decay = 0.3; });
  return all;
}

Kind kind_of(zrt_optimizer_kind_t kind) {
  return static_cast<Kind>(static_cast<int>(kind));
}

// A shard: pieces of a few parameters with padding between some of them, and its arrays.
struct Shard {
  size_t count = 0;
  std::vector<zrt_shard_piece_t> pieces;
  std::vector<uint8_t> decay_mask;
  std::vector<float> master, grad, state0, state1;
  std::vector<uint16_t> out16;
  std::vector<float> out32;
};

Shard make_shard(size_t count, unsigned seed) {
  Shard s;
  s.count = count;
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  size_t at = 0;
  int param = 0;
  while (at < count) {
    const size_t gap = rng() % 3 == 0 ? rng() % 5 : 0;  // padding
    at = std::min(count, at + gap);
    if (at == count) break;
    const size_t n = std::min(count - at, size_t{1} + rng() % (count / 3 + 7));
    s.pieces.push_back({param % 5, at, at, n});
    ++param;
    at += n;
  }
  s.decay_mask = {1, 0, 1, 1, 0};
  s.master.resize(count);
  s.state0.assign(count, 0.0f);
  s.state1.assign(count, 0.0f);
  for (float& x : s.master) x = normal(rng);
  s.grad.assign(count, 0.0f);
  s.out16.assign(count, 0);
  s.out32.assign(count, 0.0f);
  return s;
}

// The gradient of step `step`, as the framework hands it over: times the loss scale, zero in
// the padding (zrt's guarantee).
void fill_grad(Shard* s, int step, double loss_scale, unsigned seed) {
  std::mt19937 rng(seed * 7919u + static_cast<unsigned>(step));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::fill(s->grad.begin(), s->grad.end(), 0.0f);
  for (const zrt_shard_piece_t& p : s->pieces) {
    for (size_t i = 0; i < p.count; ++i) {
      s->grad[p.shard_offset + i] = normal(rng) * static_cast<float>(loss_scale);
    }
  }
}

// The per-step knobs a framework turns: a learning-rate schedule and a clip factor.
void schedule(zrt_optimizer_config_t* c, double base_lr, int step) {
  c->lr = base_lr * (0.5 + 0.5 * std::cos(0.07 * step));
  c->clip_factor = step % 3 == 0 ? 1.0 : 0.25 + 0.01 * (step % 50);
  c->grad_scale = 256.0;
}

zrt_optimizer_args_t make_args(Shard* s, float** states, int64_t step, zrt_dtype_t out,
                               zrt_param_span_t* span, int* written) {
  zrt_optimizer_args_t a{};
  a.size = sizeof(a);
  a.master = s->master.data();
  a.grad = s->grad.data();
  states[0] = s->state0.data();
  states[1] = s->state1.data();
  a.state = states;
  a.num_state = 2;
  a.count = s->count;
  a.pieces = s->pieces.data();
  a.num_pieces = s->pieces.size();
  a.step = step;
  a.mem_kind = ZRT_MEM_HOST;
  a.param_dtype = out;
  span->shard_offset = 0;
  span->count = s->count;
  span->data = out == ZRT_F32 ? static_cast<void*>(s->out32.data()) : s->out16.data();
  a.param_spans = span;
  a.num_param_spans = 1;
  *written = 0;
  a.params_written = written;
  return a;
}

// Elements further than 1 ulp from the reference, reported once per array.
void expect_within_ulp(const std::vector<float>& got, const std::vector<float>& want,
                       const std::string& what) {
  size_t bad = 0, first = 0;
  uint32_t worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const uint32_t d = ulp_distance(got[i], want[i]);
    if (d > 1) {
      if (bad++ == 0) first = i;
      worst = std::max(worst, d);
    }
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " elements beyond 1 ulp, first at " << first << " ("
                     << (bad ? got[first] : 0) << " vs " << (bad ? want[first] : 0) << "), worst "
                     << worst << " ulp";
}

void expect_copy_is_conversion(const Shard& s, zrt_dtype_t dtype, const std::string& what) {
  if (dtype == ZRT_F32) {
    EXPECT_EQ(std::memcmp(s.out32.data(), s.master.data(), s.count * 4), 0) << what;
    return;
  }
  std::vector<uint16_t> want(s.count);
  convert_elements(ZRT_F32, s.master.data(), dtype, want.data(), s.count);
  EXPECT_EQ(std::memcmp(s.out16.data(), want.data(), s.count * 2), 0)
      << what << ": the parameter copy is not zrt's conversion of master";
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

TEST(OptimKernels, HundredStepsMatchTheReferenceInEveryVariant) {
  const zrt_dtype_t dtypes[] = {ZRT_BF16, ZRT_F16, ZRT_F32};
  for (const optim::KernelTable* table : supported_tables()) {
    for (const Case& c : cases()) {
      for (size_t count : {size_t{1}, size_t{7}, size_t{33}, size_t{1001}, size_t{4099}}) {
        const std::string what =
            std::string(table->name) + " " + c.name + " n=" + std::to_string(count);
        SCOPED_TRACE(what);
        const unsigned seed = static_cast<unsigned>(count * 31 + c.name.size());
        Shard s = make_shard(count, seed);
        Shard ref = s;
        zrt_optimizer_config_t config = c.config;
        config.decay_mask = s.decay_mask.data();
        config.decay_mask_count = s.decay_mask.size();
        const double base_lr = config.lr;
        const zrt_dtype_t dtype = dtypes[count % 3];
        for (int step = 1; step <= 100; ++step) {
          schedule(&config, base_lr, step);
          fill_grad(&s, step, config.grad_scale, seed);
          ref.grad = s.grad;
          float* states[2];
          zrt_param_span_t span;
          int written = 0;
          const zrt_optimizer_args_t args = make_args(&s, states, step, dtype, &span, &written);
          ASSERT_OK(optim::fused_step(kind_of(c.kind), config, args, *table, nullptr));
          ASSERT_EQ(written, 1);
          reference_shard_step(c.kind, config, step, s.pieces, ref.master.data(), ref.grad.data(),
                               ref.state0.data(), ref.state1.data(), count);
        }
        expect_within_ulp(s.master, ref.master, "master");
        expect_within_ulp(s.state0, ref.state0, "state 0");
        expect_within_ulp(s.state1, ref.state1, "state 1");
        expect_copy_is_conversion(s, dtype, what);
      }
    }
  }
}

// The same inputs through every variant and thread count: the same bits, state included.
TEST(OptimKernels, VariantsAndThreadCountsAgreeBitForBit) {
  const size_t count = 4 * optim::kMinElementsPerThread + 12345;  // four threads get work
  std::vector<std::unique_ptr<optim::ThreadPool>> pools(5);
  for (int t = 1; t <= 4; ++t) ASSERT_OK(optim::ThreadPool::create(t, &pools[t]));
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const Shard start = make_shard(count, 99);
    Shard expected;
    bool have_expected = false;
    for (const optim::KernelTable* table : supported_tables()) {
      for (int threads = 1; threads <= 4; ++threads) {
        Shard s = start;
        zrt_optimizer_config_t config = c.config;
        config.decay_mask = s.decay_mask.data();
        config.decay_mask_count = s.decay_mask.size();
        for (int step = 1; step <= 3; ++step) {
          schedule(&config, c.config.lr, step);
          fill_grad(&s, step, config.grad_scale, 5);
          float* states[2];
          zrt_param_span_t span;
          int written = 0;
          const zrt_optimizer_args_t args = make_args(&s, states, step, ZRT_BF16, &span, &written);
          ASSERT_OK(optim::fused_step(kind_of(c.kind), config, args, *table, pools[threads].get()));
        }
        if (!have_expected) {
          // The first result against the reference; every other one against it bit for bit.
          Shard ref = start;
          zrt_optimizer_config_t rc = c.config;
          rc.decay_mask = ref.decay_mask.data();
          rc.decay_mask_count = ref.decay_mask.size();
          for (int step = 1; step <= 3; ++step) {
            schedule(&rc, c.config.lr, step);
            fill_grad(&ref, step, rc.grad_scale, 5);
            reference_shard_step(c.kind, rc, step, ref.pieces, ref.master.data(), ref.grad.data(),
                                 ref.state0.data(), ref.state1.data(), count);
          }
          expect_within_ulp(s.master, ref.master, "master");
          expect_within_ulp(s.state0, ref.state0, "state 0");
          expect_within_ulp(s.state1, ref.state1, "state 1");
          expected = s;
          have_expected = true;
          continue;
        }
        const std::string what =
            std::string(table->name) + ", " + std::to_string(threads) + " threads";
        EXPECT_TRUE(same_bits(s.master, expected.master)) << what << ": master differs";
        EXPECT_TRUE(same_bits(s.state0, expected.state0)) << what << ": state 0 differs";
        EXPECT_TRUE(same_bits(s.state1, expected.state1)) << what << ": state 1 differs";
        EXPECT_EQ(s.out16, expected.out16) << what << ": parameter copy differs";
      }
    }
  }
}

// Infinite and NaN gradients give NaN/inf in the same places in every variant, and the zeros
// of Lion's sign stay zeros.
TEST(OptimKernels, NonFiniteGradientsAgreeAcrossVariants) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    std::vector<Shard> results;
    for (const optim::KernelTable* table : supported_tables()) {
      Shard s = make_shard(77, 3);
      fill_grad(&s, 1, 1.0, 3);
      s.grad[5] = NAN;
      s.grad[20] = INFINITY;
      s.grad[40] = -INFINITY;
      s.grad[41] = 0.0f;
      zrt_optimizer_config_t config = c.config;
      float* states[2];
      zrt_param_span_t span;
      int written = 0;
      const zrt_optimizer_args_t args = make_args(&s, states, 1, ZRT_F32, &span, &written);
      ASSERT_OK(optim::fused_step(kind_of(c.kind), config, args, *table, nullptr));
      results.push_back(s);
    }
    for (size_t v = 1; v < results.size(); ++v) {
      for (size_t i = 0; i < results[0].count; ++i) {
        EXPECT_EQ(ulp_distance(results[v].master[i], results[0].master[i]), 0u) << i;
        EXPECT_EQ(ulp_distance(results[v].state0[i], results[0].state0[i]), 0u) << i;
      }
    }
  }
}

TEST(OptimKernels, PlanFollowsPiecesMaskAndSpans) {
  // Pieces [0,4) param 0 (decays), [6,10) param 1 (does not), [10,12) param 0; padding [4,6)
  // and [12,16); two spans split at 8.
  std::vector<zrt_shard_piece_t> pieces = {{0, 0, 0, 4}, {1, 0, 6, 4}, {0, 4, 10, 2}};
  std::vector<uint8_t> mask = {1, 0};
  zrt_optimizer_config_t config = optim::default_config(Kind::kAdamW);
  config.decay_mask = mask.data();
  config.decay_mask_count = mask.size();
  std::vector<uint16_t> a(8), b(8);
  zrt_param_span_t spans[2] = {{0, 8, a.data()}, {8, 8, b.data()}};
  int written = 0;
  zrt_optimizer_args_t args{};
  args.size = sizeof(args);
  args.count = 16;
  args.pieces = pieces.data();
  args.num_pieces = pieces.size();
  args.param_dtype = ZRT_BF16;
  args.param_spans = spans;
  args.num_param_spans = 2;
  args.params_written = &written;
  std::vector<optim::Stretch> plan;
  ASSERT_OK(optim::plan_stretches(args, config, optim::OutType::kBf16, &plan));
  // [0,4) decay | [4,8) no decay (padding + param 1) || [8,10) no | [10,12) decay | [12,16) no
  ASSERT_EQ(plan.size(), 5u);
  const size_t begins[] = {0, 4, 8, 10, 12};
  const size_t counts[] = {4, 4, 2, 2, 4};
  const bool decays[] = {true, false, false, true, false};
  void* outs[] = {a.data(), a.data() + 4, b.data(), b.data() + 2, b.data() + 4};
  for (size_t i = 0; i < plan.size(); ++i) {
    EXPECT_EQ(plan[i].begin, begins[i]) << i;
    EXPECT_EQ(plan[i].count, counts[i]) << i;
    EXPECT_EQ(plan[i].decay, decays[i]) << i;
    EXPECT_EQ(plan[i].out, outs[i]) << i;
  }
  // weight_decay 0: nothing decays.
  config.weight_decay = 0.0;
  ASSERT_OK(optim::plan_stretches(args, config, optim::OutType::kNone, &plan));
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_FALSE(plan[0].decay);
  EXPECT_EQ(plan[0].count, 16u);
}

TEST(OptimThreadPool, RunsEachTaskOnceOnItsOwnIndex) {
  std::unique_ptr<optim::ThreadPool> pool;
  ASSERT_OK(optim::ThreadPool::create(4, &pool));
  EXPECT_EQ(pool->threads(), 4);
  for (int round = 0; round < 200; ++round) {
    const int tasks = 1 + round % 4;
    std::vector<int> hits(4, 0);
    pool->run(tasks, [&](int t) { ++hits[static_cast<size_t>(t)]; });
    for (int t = 0; t < 4; ++t) ASSERT_EQ(hits[static_cast<size_t>(t)], t < tasks ? 1 : 0);
  }
  std::unique_ptr<optim::ThreadPool> bad;
  EXPECT_EQ(optim::ThreadPool::create(0, &bad).code(), ZRT_INVALID_ARGUMENT);
  EXPECT_EQ(optim::ThreadPool::create(optim::kMaxPoolThreads + 1, &bad).code(),
            ZRT_INVALID_ARGUMENT);
  EXPECT_GE(optim::affinity_cpu_count(), 1);
}

}  // namespace
}  // namespace zrt::testing
