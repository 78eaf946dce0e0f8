// train_lm's own compute kernels (the framework's side of the line: zrt never sees these).
// Row-major f32 matrices; the matrix products go to OpenBLAS's sgemm.
#pragma once

#include <cstddef>
#include <cstdint>

namespace train_lm {

// y[b x out] = x[b x in] * w[in x out] + bias[out]
void linear_forward(const float* x, const float* w, const float* bias, float* y, int batch, int in,
                    int out);
// Given dy[b x out]: dw[in x out] += x^T dy, dbias[out] += sum_b dy, and (if dx) dx = dy w^T.
void linear_backward(const float* x, const float* w, const float* dy, float* dx, float* dw,
                     float* dbias, int batch, int in, int out);

void tanh_forward(const float* x, float* y, size_t n);
// dx = dy * (1 - y^2), from the activation's output y.
void tanh_backward(const float* y, const float* dy, float* dx, size_t n);

// out[b x (context*dim)] = concatenated rows table[ids[b, j]].
void embedding_forward(const int32_t* ids, const float* table, float* out, int batch, int context,
                       int dim);
// dtable[ids[b, j]] += dout rows.
void embedding_backward(const int32_t* ids, const float* dout, float* dtable, int batch,
                        int context, int dim);

// Softmax cross-entropy over logits[b x classes]: returns the summed loss; dlogits = (softmax -
// onehot) * grad_scale (grad_scale = 1 / global batch gives the mean's gradient).
double softmax_xent(const float* logits, const int32_t* targets, float* dlogits, int batch,
                    int classes, float grad_scale);

// bf16 <-> f32 for the example's own use (round to nearest even).
void bf16_to_f32(const uint16_t* in, float* out, size_t n);
void f32_to_bf16(const float* in, uint16_t* out, size_t n);

}  // namespace train_lm
