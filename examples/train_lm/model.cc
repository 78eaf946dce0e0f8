#include "model.h"

#include <cmath>
#include <cstring>

#include "kernels.h"

namespace train_lm {
namespace {

uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

Model::Model(const ModelShape& shape, int batch, bool checkpoint_activations)
    : shape_(shape), batch_(batch), checkpoint_(checkpoint_activations) {
  const int units = blocks() + 2;
  specs_.resize(units);
  acts_.resize(units);
  dacts_.resize(units);
  inner_.resize(blocks());
  inner_valid_.assign(blocks(), false);

  specs_[0] = {{"embedding.weight", static_cast<size_t>(shape.vocab) * shape.dim, false}};
  acts_[0].resize(static_cast<size_t>(batch) * shape.context * shape.dim);
  int width = shape.context * shape.dim;
  for (int k = 0; k < blocks(); ++k) {
    const std::string prefix = "block" + std::to_string(k);
    const int inner = shape.inner[k];
    const int outer = shape.outer[k];
    specs_[k + 1] = {{prefix + ".fc1.weight", static_cast<size_t>(width) * inner, true},
                     {prefix + ".fc1.bias", static_cast<size_t>(inner), false},
                     {prefix + ".fc2.weight", static_cast<size_t>(inner) * outer, true},
                     {prefix + ".fc2.bias", static_cast<size_t>(outer), false}};
    inner_[k].resize(static_cast<size_t>(batch) * inner);
    acts_[k + 1].resize(static_cast<size_t>(batch) * outer);
    width = outer;
  }
  specs_[units - 1] = {{"head.weight", static_cast<size_t>(width) * shape.vocab, true},
                       {"head.bias", static_cast<size_t>(shape.vocab), false}};
  acts_[units - 1].resize(static_cast<size_t>(batch) * shape.vocab);
  dlogits_.resize(acts_[units - 1].size());
  for (int u = 0; u < units; ++u) dacts_[u].resize(acts_[u].size());
  size_t widest_inner = 0;
  for (int k = 0; k < blocks(); ++k)
    widest_inner = std::max<size_t>(widest_inner, inner_[k].size());
  dinner_.resize(widest_inner);
}

std::string Model::unit_name(int unit) const {
  if (unit == 0) return "embedding";
  if (unit == unit_count() - 1) return "head";
  return "block" + std::to_string(unit - 1);
}

void Model::init_tensor(uint64_t seed, int unit, int tensor, float* values) const {
  const TensorSpec& spec = specs_[unit][tensor];
  // Biases start at zero; matrices uniformly in +-1/sqrt(fan_in); embeddings in +-0.5.
  if (spec.name.find("bias") != std::string::npos) {
    std::memset(values, 0, spec.numel * sizeof(float));
    return;
  }
  double bound = 0.5;
  if (unit > 0) {
    const size_t fan_out = specs_[unit][tensor + 1].numel;  // the matching bias
    bound = 1.0 / std::sqrt(static_cast<double>(spec.numel / fan_out));
  }
  const uint64_t base = mix(seed ^ (static_cast<uint64_t>(unit) << 32) ^ tensor);
  for (size_t i = 0; i < spec.numel; ++i) {
    const double unit_interval = static_cast<double>(mix(base + i) >> 11) * 0x1.0p-53;
    values[i] = static_cast<float>((2.0 * unit_interval - 1.0) * bound);
  }
}

bool Model::needs_recompute(int unit) const {
  return checkpoint_ && unit >= 1 && unit <= blocks() && !inner_valid_[block_of(unit)];
}

void Model::forward(int unit, const float* const* params, const int32_t* inputs,
                    const int32_t* targets, float grad_scale, double* loss_sum) {
  if (unit == 0) {
    embedding_forward(inputs, params[0], acts_[0].data(), batch_, shape_.context, shape_.dim);
    return;
  }
  const std::vector<float>& x = acts_[unit - 1];
  const int in = static_cast<int>(x.size() / batch_);
  if (unit == unit_count() - 1) {
    linear_forward(x.data(), params[0], params[1], acts_[unit].data(), batch_, in, shape_.vocab);
    *loss_sum = softmax_xent(acts_[unit].data(), targets, dlogits_.data(), batch_, shape_.vocab,
                             grad_scale);
    return;
  }
  const int k = block_of(unit);
  const int inner = shape_.inner[k];
  const int outer = shape_.outer[k];
  float* h = inner_[k].data();
  linear_forward(x.data(), params[0], params[1], h, batch_, in, inner);
  tanh_forward(h, h, inner_[k].size());
  linear_forward(h, params[2], params[3], acts_[unit].data(), batch_, inner, outer);
  tanh_forward(acts_[unit].data(), acts_[unit].data(), acts_[unit].size());
  // With checkpointing, h is dropped here and rebuilt by a second forward during backward.
  inner_valid_[k] = !checkpoint_;
}

void Model::backward(int unit, const float* const* params, float* const* grads,
                     const int32_t* inputs) {
  if (unit == 0) {
    embedding_backward(inputs, dacts_[0].data(), grads[0], batch_, shape_.context, shape_.dim);
    return;
  }
  const std::vector<float>& x = acts_[unit - 1];
  const int in = static_cast<int>(x.size() / batch_);
  float* dx = dacts_[unit - 1].data();
  if (unit == unit_count() - 1) {
    linear_backward(x.data(), params[0], dlogits_.data(), dx, grads[0], grads[1], batch_, in,
                    shape_.vocab);
    return;
  }
  const int k = block_of(unit);
  const int inner = shape_.inner[k];
  const int outer = shape_.outer[k];
  std::vector<float>& y = acts_[unit];
  std::vector<float>& dy = dacts_[unit];
  tanh_backward(y.data(), dy.data(), dy.data(), dy.size());
  float* dh = dinner_.data();
  linear_backward(inner_[k].data(), params[2], dy.data(), dh, grads[2], grads[3], batch_, inner,
                  outer);
  tanh_backward(inner_[k].data(), dh, dh, inner_[k].size());
  linear_backward(x.data(), params[0], dh, dx, grads[0], grads[1], batch_, in, inner);
  if (checkpoint_) inner_valid_[k] = false;
}

}  // namespace train_lm
