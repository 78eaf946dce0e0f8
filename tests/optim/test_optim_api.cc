// The C face of the fused optimizers: config init and the ABI rule, pools, and every refusal
// (named, and leaving the shard untouched).
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/optim/thread_pool.h"
#include "tests/harness/status_assert.h"

namespace zrt::testing {
namespace {

// A small shard with two state slots and a bf16 parameter copy.
struct Fixture {
  explicit Fixture(size_t n = 40)
      : master(n, 0.5f), grad(n, 0.25f), s0(n, 0.0f), s1(n, 0.0f), copy(n, 0) {
    states[0] = s0.data();
    states[1] = s1.data();
    pieces.push_back({0, 0, 0, n / 2});
    pieces.push_back({1, 0, n / 2, n - n / 2});
    span = {0, n, copy.data()};
    args.size = sizeof(args);
    args.master = master.data();
    args.grad = grad.data();
    args.state = states;
    args.num_state = 2;
    args.count = n;
    args.pieces = pieces.data();
    args.num_pieces = pieces.size();
    args.step = 1;
    args.mem_kind = ZRT_MEM_HOST;
    args.param_dtype = ZRT_BF16;
    args.param_spans = &span;
    args.num_param_spans = 1;
    args.params_written = &written;
  }
  bool untouched() const {
    for (size_t i = 0; i < master.size(); ++i) {
      if (master[i] != 0.5f || s0[i] != 0.0f || s1[i] != 0.0f || copy[i] != 0) return false;
    }
    return written == 0;
  }
  std::vector<float> master, grad, s0, s1;
  std::vector<uint16_t> copy;
  float* states[2];
  std::vector<zrt_shard_piece_t> pieces;
  zrt_param_span_t span;
  int written = 0;
  zrt_optimizer_args_t args{};
};

zrt_optimizer_config_t config_of(zrt_optimizer_kind_t kind) {
  zrt_optimizer_config_t c{};
  EXPECT_OK(zrt_optimizer_config_init(&c, sizeof(c), kind));
  return c;
}

// The call fails with `code`, names `needle`, and writes nothing.
void expect_refused(zrt_optimizer_fn fn, Fixture* f, zrt_optimizer_config_t* c, zrt_status_t code,
                    const std::string& needle) {
  EXPECT_EQ(fn(&f->args, c), code) << zrt_last_error();
  const std::string message = zrt_last_error();
  EXPECT_NE(message.find(needle), std::string::npos) << message;
  EXPECT_TRUE(f->untouched()) << needle;
}

TEST(OptimApi, ConfigInitGivesTorchDefaultsAndHonoursTheCallersSize) {
  const zrt_optimizer_config_t macro = ZRT_OPTIMIZER_CONFIG_INIT(ZRT_OPTIMIZER_LION);
  zrt_optimizer_config_t c = config_of(ZRT_OPTIMIZER_LION);
  EXPECT_EQ(c.size, macro.size);
  EXPECT_EQ(c.magic, macro.magic);
  EXPECT_EQ(c.version, macro.version);
  EXPECT_EQ(c.kind, macro.kind);
  for (double zrt_optimizer_config_t::*field :
       {&zrt_optimizer_config_t::lr, &zrt_optimizer_config_t::beta1, &zrt_optimizer_config_t::beta2,
        &zrt_optimizer_config_t::eps, &zrt_optimizer_config_t::weight_decay,
        &zrt_optimizer_config_t::momentum, &zrt_optimizer_config_t::dampening,
        &zrt_optimizer_config_t::grad_scale, &zrt_optimizer_config_t::clip_factor}) {
    EXPECT_EQ(c.*field, macro.*field);
  }
  EXPECT_EQ(c.nesterov, macro.nesterov);
  EXPECT_EQ(c.bias_correction, macro.bias_correction);
  EXPECT_EQ(c.decay_mask, macro.decay_mask);
  EXPECT_EQ(c.pool, macro.pool);
  EXPECT_EQ(c.lr, 1e-4);
  EXPECT_EQ(c.beta2, 0.99);
  c = config_of(ZRT_OPTIMIZER_ADAMW);
  EXPECT_EQ(c.weight_decay, 1e-2);
  EXPECT_EQ(c.lr, 1e-3);
  EXPECT_EQ(c.bias_correction, 1);
  EXPECT_EQ(c.grad_scale, 1.0);
  EXPECT_EQ(c.kind, ZRT_OPTIMIZER_ADAMW);
  c = config_of(ZRT_OPTIMIZER_SGD);
  EXPECT_EQ(c.weight_decay, 0.0);
  EXPECT_EQ(c.momentum, 0.0);

  // A caller that knows fewer fields: only those are written, and size says so.
  std::vector<unsigned char> bytes(sizeof(zrt_optimizer_config_t), 0xab);
  auto* shorter = reinterpret_cast<zrt_optimizer_config_t*>(bytes.data());
  const size_t known = offsetof(zrt_optimizer_config_t, beta1);
  ASSERT_OK(zrt_optimizer_config_init(shorter, known, ZRT_OPTIMIZER_ADAM));
  EXPECT_EQ(shorter->size, known);
  EXPECT_EQ(shorter->lr, 1e-3);
  EXPECT_EQ(bytes[known], 0xab);

  EXPECT_EQ(zrt_optimizer_config_init(&c, 4, ZRT_OPTIMIZER_ADAM), ZRT_INVALID_ARGUMENT);
  EXPECT_EQ(zrt_optimizer_config_init(&c, sizeof(c), static_cast<zrt_optimizer_kind_t>(9)),
            ZRT_INVALID_ARGUMENT);
  EXPECT_NE(std::string(zrt_last_error()).find("kind"), std::string::npos);
  EXPECT_EQ(zrt_optimizer_config_init(nullptr, sizeof(c), ZRT_OPTIMIZER_ADAM),
            ZRT_INVALID_ARGUMENT);
}

TEST(OptimApi, ShortConfigKeepsTheKindsDefaultsForTheRest) {
  // A config that covers up to lr: betas, eps and decay are AdamW's defaults.
  zrt_optimizer_config_t c = config_of(ZRT_OPTIMIZER_ADAMW);
  c.size = offsetof(zrt_optimizer_config_t, beta1);
  c.lr = 0.01;
  c.beta1 = 0.5;  // not covered: ignored
  Fixture f;
  ASSERT_OK(zrt_optimizer_adamw(&f.args, &c));
  Fixture g;
  zrt_optimizer_config_t whole = config_of(ZRT_OPTIMIZER_ADAMW);
  whole.lr = 0.01;
  ASSERT_OK(zrt_optimizer_adamw(&g.args, &whole));
  EXPECT_EQ(f.master, g.master);
  EXPECT_EQ(f.s0, g.s0);
}

TEST(OptimApi, RefusalsNameTheFieldAndWriteNothing) {
  struct Bad {
    const char* needle;
    void (*edit)(zrt_optimizer_config_t*);
  };
  const Bad bad[] = {
      {"config->lr", [](zrt_optimizer_config_t* c) { c->lr = -1; }},
      {"config->lr", [](zrt_optimizer_config_t* c) { c->lr = NAN; }},
      {"config->beta1", [](zrt_optimizer_config_t* c) { c->beta1 = 1.0; }},
      {"config->beta2", [](zrt_optimizer_config_t* c) { c->beta2 = -0.1; }},
      {"config->eps", [](zrt_optimizer_config_t* c) { c->eps = -1e-8; }},
      {"config->weight_decay", [](zrt_optimizer_config_t* c) { c->weight_decay = INFINITY; }},
      {"config->grad_scale", [](zrt_optimizer_config_t* c) { c->grad_scale = 0; }},
      {"config->clip_factor", [](zrt_optimizer_config_t* c) { c->clip_factor = -0.5; }},
      {"config->bias_correction", [](zrt_optimizer_config_t* c) { c->bias_correction = 2; }},
      {"config->magic", [](zrt_optimizer_config_t* c) { c->magic = 1; }},
      {"config->size", [](zrt_optimizer_config_t* c) { c->size = sizeof(*c) + 8; }},
      {"config->size", [](zrt_optimizer_config_t* c) { c->size = 8; }},
      {"config->kind", [](zrt_optimizer_config_t* c) { c->kind = ZRT_OPTIMIZER_SGD; }},
  };
  for (const Bad& b : bad) {
    Fixture f;
    zrt_optimizer_config_t c = config_of(ZRT_OPTIMIZER_ADAMW);
    b.edit(&c);
    expect_refused(zrt_optimizer_adamw, &f, &c, ZRT_INVALID_ARGUMENT, b.needle);
  }
  {
    Fixture f;
    expect_refused(zrt_optimizer_adamw, &f, nullptr, ZRT_INVALID_ARGUMENT, "config");
  }
  {
    Fixture f;
    zrt_optimizer_config_t c = config_of(ZRT_OPTIMIZER_SGD);
    c.nesterov = 1;  // without momentum
    expect_refused(zrt_optimizer_sgd, &f, &c, ZRT_INVALID_ARGUMENT, "nesterov");
    c.momentum = 0.9;
    c.dampening = 0.1;
    expect_refused(zrt_optimizer_sgd, &f, &c, ZRT_INVALID_ARGUMENT, "dampening");
  }
  {
    Fixture f;
    zrt_optimizer_config_t c = config_of(ZRT_OPTIMIZER_ADAM);
    f.args.num_state = 1;
    expect_refused(zrt_optimizer_adam, &f, &c, ZRT_INVALID_ARGUMENT, "optimizer_slots");
  }
  {
    Fixture f;
    zrt_optimizer_config_t c = config_of(ZRT_OPTIMIZER_ADAMW);
    f.pieces[1].count += 1;  // past the shard's end
    expect_refused(zrt_optimizer_adamw, &f, &c, ZRT_INVALID_ARGUMENT, "args->pieces[1]");
  }
  {
    Fixture f;
    zrt_optimizer_config_t c = config_of(ZRT_OPTIMIZER_ADAMW);
    const uint8_t mask[1] = {1};  // param 1 has no entry
    c.decay_mask = mask;
    c.decay_mask_count = 1;
    expect_refused(zrt_optimizer_adamw, &f, &c, ZRT_INVALID_ARGUMENT, "decay_mask_count");
  }
  {
    Fixture f;
    zrt_optimizer_config_t c = config_of(ZRT_OPTIMIZER_ADAMW);
    f.span.count -= 1;  // the spans leave an element uncovered
    expect_refused(zrt_optimizer_adamw, &f, &c, ZRT_INVALID_ARGUMENT, "param_spans");
  }
  {
    Fixture f;
    zrt_optimizer_config_t c = config_of(ZRT_OPTIMIZER_ADAMW);
    f.args.param_dtype = ZRT_I32;
    expect_refused(zrt_optimizer_adamw, &f, &c, ZRT_INVALID_ARGUMENT, "param_dtype");
  }
  {
    Fixture f;
    zrt_optimizer_config_t c = config_of(ZRT_OPTIMIZER_ADAMW);
    f.args.step = 0;
    expect_refused(zrt_optimizer_adamw, &f, &c, ZRT_INVALID_ARGUMENT, "step");
  }
  {
    Fixture f;
    zrt_optimizer_config_t c = config_of(ZRT_OPTIMIZER_LION);
    f.args.mem_kind = ZRT_MEM_CUDA;
    expect_refused(zrt_optimizer_lion, &f, &c, ZRT_UNSUPPORTED, "host memory");
  }
  {
    Fixture f;
    zrt_optimizer_config_t c = config_of(ZRT_OPTIMIZER_ADAMW);
    f.args.size = 16;
    expect_refused(zrt_optimizer_adamw, &f, &c, ZRT_INVALID_ARGUMENT, "args->size");
    EXPECT_EQ(zrt_optimizer_adamw(nullptr, &c), ZRT_INVALID_ARGUMENT);
  }
  {
    Fixture f;
    zrt_optimizer_config_t c = config_of(ZRT_OPTIMIZER_ADAMW);
    int not_a_pool = 0;
    c.pool = reinterpret_cast<zrt_optimizer_pool_t>(&not_a_pool);
    expect_refused(zrt_optimizer_adamw, &f, &c, ZRT_INVALID_ARGUMENT, "config->pool");
  }
}

TEST(OptimApi, ArgsOfTheFirstVersionUpdateWithoutACopy) {
  // A framework that calls the optimizer itself with the older, shorter args struct.
  Fixture f;
  f.args.size = offsetof(zrt_optimizer_args_t, mem_kind);
  zrt_optimizer_config_t c = config_of(ZRT_OPTIMIZER_ADAMW);
  ASSERT_OK(zrt_optimizer_adamw(&f.args, &c));
  EXPECT_NE(f.master[0], 0.5f);
  EXPECT_EQ(f.copy[0], 0);
  EXPECT_EQ(f.written, 0);
}

TEST(OptimApi, PlainSgdNeedsNoState) {
  Fixture f;
  f.args.num_state = 0;
  f.args.state = nullptr;
  zrt_optimizer_config_t c = config_of(ZRT_OPTIMIZER_SGD);
  c.lr = 0.5;
  ASSERT_OK(zrt_optimizer_sgd(&f.args, &c));
  EXPECT_EQ(f.master[0], 0.5f - 0.5f * 0.25f);
  EXPECT_EQ(f.written, 1);
  EXPECT_EQ(f.copy[0], 0x3ec0);  // 0.375 in bf16
}

TEST(OptimApi, PoolsSizeFromTheAffinityMaskAndGiveTheSameBits) {
  zrt_optimizer_pool_t pool = nullptr;
  ASSERT_OK(zrt_optimizer_pool_create(0, &pool));
  int threads = 0;
  ASSERT_OK(zrt_optimizer_pool_threads(pool, &threads));
  EXPECT_EQ(threads, optim::affinity_cpu_count());
  ASSERT_OK(zrt_optimizer_pool_destroy(pool));

  ASSERT_OK(zrt_optimizer_pool_create(3, &pool));
  ASSERT_OK(zrt_optimizer_pool_threads(pool, &threads));
  EXPECT_EQ(threads, 3);
  const size_t n = 200001;
  Fixture a(n), b(n);
  for (size_t i = 0; i < n; ++i) a.grad[i] = b.grad[i] = std::sin(0.001f * i);
  zrt_optimizer_config_t c = config_of(ZRT_OPTIMIZER_ADAMW);
  ASSERT_OK(zrt_optimizer_adamw(&a.args, &c));
  c.pool = pool;
  ASSERT_OK(zrt_optimizer_adamw(&b.args, &c));
  EXPECT_EQ(a.master, b.master);
  EXPECT_EQ(a.s1, b.s1);
  EXPECT_EQ(a.copy, b.copy);
  ASSERT_OK(zrt_optimizer_pool_destroy(pool));

  EXPECT_OK(zrt_optimizer_pool_destroy(nullptr));
  EXPECT_EQ(zrt_optimizer_pool_create(-1, &pool), ZRT_INVALID_ARGUMENT);
  EXPECT_EQ(zrt_optimizer_pool_create(2000, &pool), ZRT_INVALID_ARGUMENT);
  EXPECT_EQ(zrt_optimizer_pool_create(1, nullptr), ZRT_INVALID_ARGUMENT);
  EXPECT_EQ(zrt_optimizer_pool_threads(nullptr, &threads), ZRT_INVALID_ARGUMENT);
}

TEST(OptimApi, PoolRefusesAnUnrunnableSimdSetting) {
  setenv("ZRT_SIMD", "sse9", 1);
  zrt_optimizer_pool_t pool = nullptr;
  EXPECT_EQ(zrt_optimizer_pool_create(1, &pool), ZRT_INVALID_ARGUMENT);
  EXPECT_NE(std::string(zrt_last_error()).find("ZRT_SIMD"), std::string::npos) << zrt_last_error();
  setenv("ZRT_SIMD", "generic", 1);
  ASSERT_OK(zrt_optimizer_pool_create(1, &pool));
  ASSERT_OK(zrt_optimizer_pool_destroy(pool));
  unsetenv("ZRT_SIMD");
}

}  // namespace
}  // namespace zrt::testing
