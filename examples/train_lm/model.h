// The model of train_lm: a character-level language model made of units, the granularity at
// which zrt shards and gathers parameters (a unit is what a framework calls a layer or module).
//
//   unit 0            embedding   vocab x dim, looked up for each of `context` input bytes
//   unit 1..blocks    block k     x -> tanh(x W1 + b1) = h -> tanh(h W2 + b2) = y
//                                 (two layers of different widths per block)
//   unit blocks+1     output      y W + b -> logits over the vocabulary, softmax cross-entropy
//
// The model owns activations only; parameters and gradients live in zrt's buffers and are
// passed in as f32 pointers per unit, in registration order.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace train_lm {

struct TensorSpec {
  std::string name;
  size_t numel;
  bool decay;  // AdamW weight decay applies (matrices yes, biases and embeddings no)
};

struct ModelShape {
  int vocab = 0;
  int context = 8;
  int dim = 16;
  std::vector<int> inner = {256, 160};  // width of each block's first layer
  std::vector<int> outer = {192, 96};   // width of each block's output
};

class Model {
 public:
  Model(const ModelShape& shape, int batch, bool checkpoint_activations);

  int unit_count() const { return static_cast<int>(specs_.size()); }
  const std::vector<TensorSpec>& unit_tensors(int unit) const { return specs_[unit]; }
  std::string unit_name(int unit) const;

  // Deterministic initial values for one tensor (depends only on seed, unit and tensor index).
  void init_tensor(uint64_t seed, int unit, int tensor, float* values) const;

  // Forward of one unit. params[i] is tensor i of the unit. `inputs` (batch x context ids) is read
  // by unit 0. The last unit also computes the loss (summed over the local batch) and the logits'
  // gradient scaled by grad_scale.
  void forward(int unit, const float* const* params, const int32_t* inputs, const int32_t* targets,
               float grad_scale, double* loss_sum);
  // Whether backward(unit) needs forward(unit) to run again first (activation checkpointing).
  bool needs_recompute(int unit) const;
  // Backward of one unit: accumulates into grads[i] (same shapes as params) and propagates the
  // activation gradient to the previous unit.
  void backward(int unit, const float* const* params, float* const* grads, const int32_t* inputs);

 private:
  int block_of(int unit) const { return unit - 1; }
  int blocks() const { return static_cast<int>(shape_.inner.size()); }

  ModelShape shape_;
  int batch_;
  bool checkpoint_;
  std::vector<std::vector<TensorSpec>> specs_;
  // acts_[u]: output of unit u (unit 0: concatenated embeddings). inner_[k]: h of block k.
  std::vector<std::vector<float>> acts_;
  std::vector<std::vector<float>> inner_;
  std::vector<bool> inner_valid_;
  std::vector<float> dlogits_;
  std::vector<std::vector<float>> dacts_;  // gradient w.r.t. acts_[u]
  std::vector<float> dinner_;
};

}  // namespace train_lm
