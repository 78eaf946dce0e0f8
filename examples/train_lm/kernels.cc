#include "kernels.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>

namespace train_lm {

void linear_forward(const float* x, const float* w, const float* bias, float* y, int batch, int in,
                    int out) {
  for (int b = 0; b < batch; ++b) std::memcpy(y + static_cast<size_t>(b) * out, bias, out * 4);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, batch, out, in, 1.0f, x, in, w, out, 1.0f,
              y, out);
}

void linear_backward(const float* x, const float* w, const float* dy, float* dx, float* dw,
                     float* dbias, int batch, int in, int out) {
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, in, out, batch, 1.0f, x, in, dy, out, 1.0f,
              dw, out);
  for (int b = 0; b < batch; ++b) {
    const float* row = dy + static_cast<size_t>(b) * out;
    for (int o = 0; o < out; ++o) dbias[o] += row[o];
  }
  if (dx != nullptr) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, batch, in, out, 1.0f, dy, out, w, out,
                0.0f, dx, in);
  }
}

void tanh_forward(const float* x, float* y, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] = std::tanh(x[i]);
}

void tanh_backward(const float* y, const float* dy, float* dx, size_t n) {
  for (size_t i = 0; i < n; ++i) dx[i] = dy[i] * (1.0f - y[i] * y[i]);
}

void embedding_forward(const int32_t* ids, const float* table, float* out, int batch, int context,
                       int dim) {
  for (int b = 0; b < batch; ++b) {
    for (int j = 0; j < context; ++j) {
      std::memcpy(out + (static_cast<size_t>(b) * context + j) * dim,
                  table + static_cast<size_t>(ids[b * context + j]) * dim, dim * sizeof(float));
    }
  }
}

void embedding_backward(const int32_t* ids, const float* dout, float* dtable, int batch,
                        int context, int dim) {
  for (int b = 0; b < batch; ++b) {
    for (int j = 0; j < context; ++j) {
      const float* src = dout + (static_cast<size_t>(b) * context + j) * dim;
      float* dst = dtable + static_cast<size_t>(ids[b * context + j]) * dim;
      for (int d = 0; d < dim; ++d) dst[d] += src[d];
    }
  }
}

double softmax_xent(const float* logits, const int32_t* targets, float* dlogits, int batch,
                    int classes, float grad_scale) {
  double loss = 0.0;
  for (int b = 0; b < batch; ++b) {
    const float* row = logits + static_cast<size_t>(b) * classes;
    float* grad = dlogits + static_cast<size_t>(b) * classes;
    const float peak = *std::max_element(row, row + classes);
    double total = 0.0;
    for (int c = 0; c < classes; ++c) total += std::exp(static_cast<double>(row[c] - peak));
    const double log_total = std::log(total);
    loss += log_total - (row[targets[b]] - peak);
    for (int c = 0; c < classes; ++c) {
      const double p = std::exp(static_cast<double>(row[c] - peak) - log_total);
      grad[c] = static_cast<float>((p - (c == targets[b] ? 1.0 : 0.0)) * grad_scale);
    }
  }
  return loss;
}

void bf16_to_f32(const uint16_t* in, float* out, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const uint32_t bits = static_cast<uint32_t>(in[i]) << 16;
    std::memcpy(&out[i], &bits, 4);
  }
}

void f32_to_bf16(const float* in, uint16_t* out, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, &in[i], 4);
    if ((bits & 0x7fffffffu) > 0x7f800000u) {
      out[i] = static_cast<uint16_t>((bits >> 16) | 0x40);  // keep NaN a (quiet) NaN
    } else {
      out[i] = static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
    }
  }
}

}  // namespace train_lm
