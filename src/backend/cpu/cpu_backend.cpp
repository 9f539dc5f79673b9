// CpuBackend: memory, element-wise ops, RMSNorm, RoPE and linear layers on the host.
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_hybrid_ops.h"

#include <cblas.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>

#include "core/check.h"
#include "core/thread_pool.h"

namespace tq {
namespace {

class CpuBackend final : public Backend {
 public:
  CpuBackend() {
    // One BLAS thread per call: we split GEMMs across our own pool, which also serves decode.
    openblas_set_num_threads(1);
  }
  const char* name() const override { return "cpu"; }

  void* alloc(size_t bytes) override {
    void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!p) throw std::bad_alloc();
    allocated_ += bytes;
    return p;
  }
  void release(void* p, size_t bytes) override {
    std::free(p);
    allocated_ -= bytes;
  }
  void upload(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void download(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void copy(void* dst, const void* src, size_t bytes) override { std::memmove(dst, src, bytes); }
  size_t allocated_bytes() const override { return allocated_.load(); }

  Weight load_weight(DType src, const void* host, int64_t rows, int64_t cols) override {
    Weight w;
    w.buf = DeviceBuffer(this, size_t(rows * cols) * sizeof(float));
    w.rows = rows;
    w.cols = cols;
    w.dtype = DType::F32;
    to_f32(src, host, w.buf.f32(), size_t(rows * cols));
    return w;
  }

  void embedding(std::span<const int32_t> ids, const Weight& table, float* out) override {
    for (size_t t = 0; t < ids.size(); ++t)
      std::memcpy(out + t * table.cols, table.buf.f32() + ids[t] * table.cols,
                  size_t(table.cols) * sizeof(float));
  }

  void rms_norm(const float* x, int64_t rows, const Weight& w, float eps, float* out) override {
    const int64_t n = w.cols;
    const float* g = w.buf.f32();
    auto one = [&](int64_t r) {
      const float* xr = x + r * n;
      float* yr = out + r * n;
      float ss = 0.f;
      for (int64_t i = 0; i < n; ++i) ss += xr[i] * xr[i];
      float inv = 1.0f / std::sqrt(ss / float(n) + eps);
      for (int64_t i = 0; i < n; ++i) yr[i] = g[i] * (xr[i] * inv);
    };
    if (rows < 64) {
      for (int64_t r = 0; r < rows; ++r) one(r);
    } else {
      auto& pool = ThreadPool::global();
      int parts = pool.size();
      pool.parallel_for(parts, [&](int p) {
        for (int64_t r = rows * p / parts; r < rows * (p + 1) / parts; ++r) one(r);
      });
    }
  }

  void linear(const float* x, int64_t T, const Weight& w, float* out, const Weight* bias) override {
    const int64_t N = w.rows, K = w.cols;
    auto& pool = ThreadPool::global();
    // Split the output features across threads; each slice is one sgemm (or sgemv for T = 1).
    int parts = int(std::min<int64_t>(pool.size(), std::max<int64_t>(1, N / 64)));
    pool.parallel_for(parts, [&](int p) {
      int64_t n0 = N * p / parts, n1 = N * (p + 1) / parts;
      const float* wp = w.buf.f32() + n0 * K;
      if (T == 1) {
        cblas_sgemv(CblasRowMajor, CblasNoTrans, int(n1 - n0), int(K), 1.0f, wp, int(K), x, 1,
                    0.0f, out + n0, 1);
      } else {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(T), int(n1 - n0), int(K), 1.0f,
                    x, int(K), wp, int(K), 0.0f, out + n0, int(N));
      }
    });
    if (bias) {
      const float* b = bias->buf.f32();
      for (int64_t t = 0; t < T; ++t)
        for (int64_t i = 0; i < N; ++i) out[t * N + i] += b[i];
    }
  }

  void rope(float* x, int64_t T, int64_t n_head, int64_t head_dim, int64_t pos0,
            std::span<const float> inv_freq) override {
    const int64_t half = head_dim / 2;
    TQ_CHECK(int64_t(inv_freq.size()) == half);
    std::vector<float> cs(size_t(2 * half));
    for (int64_t t = 0; t < T; ++t) {
      // As transformers: angle = float(pos) * inv_freq in fp32, then cos/sin in fp32.
      float pos = float(pos0 + t);
      for (int64_t i = 0; i < half; ++i) {
        float a = pos * inv_freq[size_t(i)];
        cs[size_t(i)] = std::cos(a);
        cs[size_t(half + i)] = std::sin(a);
      }
      for (int64_t h = 0; h < n_head; ++h) {
        float* v = x + (t * n_head + h) * head_dim;
        for (int64_t i = 0; i < half; ++i) {
          float c = cs[size_t(i)], s = cs[size_t(half + i)];
          float x1 = v[i], x2 = v[i + half];
          v[i] = x1 * c - x2 * s;
          v[i + half] = x2 * c + x1 * s;
        }
      }
    }
  }

  void swiglu(const float* gate, const float* up, float* out, int64_t n) override {
    for (int64_t i = 0; i < n; ++i) {
      float g = gate[i];
      out[i] = g / (1.0f + std::exp(-g)) * up[i];
    }
  }

  void add(float* x, const float* y, int64_t n) override {
    for (int64_t i = 0; i < n; ++i) x[i] += y[i];
  }

  void attention(const AttentionArgs& a) override { cpu_attention(a); }

  // Hybrid-model ops (cpu_hybrid_ops.cpp).
  void rope_partial(float* x, int64_t T, int64_t n_head, int64_t head_dim, int64_t rot_dim,
                    int64_t pos0, std::span<const float> inv_freq) override {
    cpu_rope_partial(x, T, n_head, head_dim, rot_dim, pos0, inv_freq);
  }
  void sigmoid_mul(float* x, const float* gate, int64_t n) override { cpu_sigmoid_mul(x, gate, n); }
  void causal_conv1d_silu(const float* x, int64_t T, const Weight& w, float* state,
                          float* out) override {
    cpu_causal_conv1d_silu(x, T, w.rows, w.cols, w.buf.f32(), state, out);
  }
  void delta_gates(const float* a, const float* b, int64_t T, const Weight& a_log,
                   const Weight& dt_bias, float* g, float* beta) override {
    cpu_delta_gates(a, b, T, a_log.cols, a_log.buf.f32(), dt_bias.buf.f32(), g, beta);
  }
  void gated_delta_rule(const DeltaRuleArgs& a) override { cpu_gated_delta_rule(a); }
  void rms_norm_gated(const float* x, const float* gate, int64_t rows, const Weight& w, float eps,
                      float* out) override {
    cpu_rms_norm_gated(x, gate, rows, w.cols, w.buf.f32(), eps, out);
  }

 private:
  std::atomic<size_t> allocated_{0};
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace tq
