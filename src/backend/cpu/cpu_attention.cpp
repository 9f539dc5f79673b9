// CPU attention: causal (optionally sliding-window) GQA attention in query blocks. Each block's
// scores are one sgemm over the keys it can see, an exact fp32 softmax, then one sgemm with V.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "core/thread_pool.h"

namespace tq {

void cpu_attention(const AttentionArgs& a) {
  if (a.kv_dtype != DType::F32) fail("CPU attention: K/V must be f32, not {}", dtype_name(a.kv_dtype));
  const float* k_base = static_cast<const float*>(a.k);
  const float* v_base = static_cast<const float*>(a.v);
  const int64_t d = a.head_dim;
  const int64_t group = a.n_head / a.n_head_kv;
  const int64_t q_row = a.n_head * d;  // stride between query positions
  const int64_t block = a.T == 1 ? 1 : 32;
  const int64_t n_block = (a.T + block - 1) / block;
  const int64_t n_task = a.n_head * n_block;
  auto& pool = ThreadPool::global();
  int parts = int(std::min<int64_t>(pool.size(), n_task));
  pool.parallel_for(parts, [&](int p) {
    std::vector<float> qb, sb;
    for (int64_t task = n_task * p / parts; task < n_task * (p + 1) / parts; ++task) {
      const int64_t h = task / n_block, b = task % n_block;
      const int64_t hk = h / group;
      const int64_t t0 = b * block, t1 = std::min(a.T, t0 + block), bt = t1 - t0;
      // Keys visible to any query of the block: positions in [lo, hi].
      const int64_t qp0 = a.q_pos0 + t0, qp1 = a.q_pos0 + t1 - 1;
      int64_t lo = a.window > 0 ? qp0 - a.window + 1 : 0;
      int64_t j0 = std::max<int64_t>(0, lo - a.k_pos0);
      int64_t j1 = std::min<int64_t>(a.L, qp1 - a.k_pos0 + 1);
      float* out0 = a.out + t0 * q_row + h * d;
      if (j1 <= j0) {
        for (int64_t t = 0; t < bt; ++t) std::fill(out0 + t * q_row, out0 + t * q_row + d, 0.f);
        continue;
      }
      const int64_t nk = j1 - j0;
      const float* K = k_base + hk * a.kv_head_stride + j0 * d;
      const float* V = v_base + hk * a.kv_head_stride + j0 * d;
      sb.resize(size_t(bt * nk));
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(bt), int(nk), int(d), a.scale,
                  a.q + t0 * q_row + h * d, int(q_row), K, int(d), 0.f, sb.data(), int(nk));
      for (int64_t t = 0; t < bt; ++t) {
        float* s = sb.data() + t * nk;
        const int64_t qp = a.q_pos0 + t0 + t;
        float mx = -std::numeric_limits<float>::infinity();
        for (int64_t j = 0; j < nk; ++j) {
          int64_t kp = a.k_pos0 + j0 + j;
          bool visible = kp <= qp && (a.window == 0 || qp - kp < a.window);
          if (!visible) s[j] = -std::numeric_limits<float>::infinity();
          mx = std::max(mx, s[j]);
        }
        float sum = 0.f;
        for (int64_t j = 0; j < nk; ++j) {
          s[j] = std::exp(s[j] - mx);
          sum += s[j];
        }
        float inv = 1.0f / sum;
        for (int64_t j = 0; j < nk; ++j) s[j] *= inv;
      }
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(bt), int(d), int(nk), 1.0f,
                  sb.data(), int(nk), V, int(d), 0.f, out0, int(q_row));
    }
  });
}

}  // namespace tq
