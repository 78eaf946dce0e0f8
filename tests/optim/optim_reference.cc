#include "tests/optim/optim_reference.h"

#include <cmath>
#include <cstring>

namespace zrt::testing {

namespace {

float f(double x) {
  return static_cast<float>(x);
}

}  // namespace

void reference_step(zrt_optimizer_kind_t kind, const zrt_optimizer_config_t& c, int64_t step,
                    bool decay, float* param, const float* grad, float* state0, float* state1,
                    size_t n) {
  const double lr = c.lr;
  const bool wd = decay && c.weight_decay != 0.0;
  for (size_t i = 0; i < n; ++i) {
    // GradScaler's unscale (grad * inv_scale), then clip_grad_norm_'s grad * clip_coef.
    float g = grad[i] * f(1.0 / c.grad_scale);
    g = g * f(c.clip_factor);
    float p = param[i];
    switch (kind) {
      case ZRT_OPTIMIZER_ADAMW:
      case ZRT_OPTIMIZER_ADAM: {
        if (wd && kind == ZRT_OPTIMIZER_ADAMW) p = p * f(1.0 - lr * c.weight_decay);
        if (wd && kind == ZRT_OPTIMIZER_ADAM) g = std::fma(f(c.weight_decay), p, g);
        float m = state0[i] * f(c.beta1);
        m = std::fma(f(1.0 - c.beta1), g, m);
        float v = state1[i] * f(c.beta2);
        v = std::fma(f(1.0 - c.beta2) * g, g, v);
        const double s = static_cast<double>(step);
        const double bias1 = c.bias_correction ? 1.0 - std::pow(c.beta1, s) : 1.0;
        const double bias2 = c.bias_correction ? 1.0 - std::pow(c.beta2, s) : 1.0;
        float denom = std::sqrt(v) / f(std::sqrt(bias2));
        denom = denom + f(c.eps);
        p = p + (f(-(lr / bias1)) * m) / denom;
        state0[i] = m;
        state1[i] = v;
        break;
      }
      case ZRT_OPTIMIZER_SGD: {
        float d = g;
        if (wd) d = std::fma(f(c.weight_decay), p, d);
        if (c.momentum != 0.0) {
          float buf = d;
          if (step > 1) {
            buf = state0[i] * f(c.momentum);
            buf = std::fma(f(1.0 - c.dampening), d, buf);
          }
          state0[i] = buf;
          d = c.nesterov ? std::fma(f(c.momentum), buf, d) : buf;
        }
        p = std::fma(f(-lr), d, p);
        break;
      }
      case ZRT_OPTIMIZER_LION: {
        float c1 = state0[i] * f(c.beta1);
        c1 = std::fma(f(1.0 - c.beta1), g, c1);
        const float u = c1 > 0 ? 1.0f : (c1 < 0 ? -1.0f : c1);
        if (wd) p = p * f(1.0 - lr * c.weight_decay);
        p = std::fma(f(-lr), u, p);
        float m = state0[i] * f(c.beta2);
        state0[i] = std::fma(f(1.0 - c.beta2), g, m);
        break;
      }
      default:
        break;
    }
    param[i] = p;
  }
}

void reference_shard_step(zrt_optimizer_kind_t kind, const zrt_optimizer_config_t& config,
                          int64_t step, const std::vector<zrt_shard_piece_t>& pieces, float* master,
                          const float* grad, float* state0, float* state1, size_t count) {
  auto at = [](float* base, size_t offset) { return base == nullptr ? nullptr : base + offset; };
  size_t pos = 0;
  auto gap = [&](size_t end) {
    if (end > pos) {
      reference_step(kind, config, step, false, master + pos, grad + pos, at(state0, pos),
                     at(state1, pos), end - pos);
    }
    pos = end;
  };
  for (const zrt_shard_piece_t& piece : pieces) {
    gap(piece.shard_offset);
    const bool decay = config.decay_mask == nullptr || config.decay_mask[piece.param] != 0;
    reference_step(kind, config, step, decay, master + pos, grad + pos, at(state0, pos),
                   at(state1, pos), piece.count);
    pos += piece.count;
  }
  gap(count);
}

uint32_t ulp_distance(float a, float b) {
  if (std::isnan(a) && std::isnan(b)) return 0;
  if (std::isnan(a) || std::isnan(b)) return UINT32_MAX;
  if (a == b) return 0;
  auto ordered = [](float x) {
    int32_t i;
    std::memcpy(&i, &x, sizeof(i));
    return i < 0 ? static_cast<int64_t>(INT32_MIN) - i : static_cast<int64_t>(i);
  };
  const int64_t d = ordered(a) - ordered(b);
  return static_cast<uint32_t>(d < 0 ? -d : d);
}

}  // namespace zrt::testing
