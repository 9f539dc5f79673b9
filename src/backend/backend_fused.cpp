// Backend's fused engine-path ops (and the strided copy), composed from the basic ops (backends
// without their own versions, e.g. the CPU backend, get exactly the results of the separate calls).
#include "backend/backend.h"

namespace tq {

void Backend::copy_rows(void* dst, size_t dst_pitch, const void* src, size_t src_pitch,
                        size_t row_bytes, size_t n_rows) {
  for (size_t r = 0; r < n_rows && row_bytes > 0; ++r)
    copy(static_cast<char*>(dst) + r * dst_pitch, static_cast<const char*>(src) + r * src_pitch,
         row_bytes);
}

TqAttentionArgs Backend::write_fresh_rows(const TqAttentionArgs& a, float* rows) {
  const TqStore& st = a.store;
  const int64_t hk = st.n_head_kv, d = st.head_dim, n_held = a.n_exact - a.T, keep = a.fresh.keep;
  const TqRows r{rows, rows + hk * a.n_exact * d, a.n_exact};
  const size_t row = size_t(d) * sizeof(float), pitch = size_t(r.cap) * row,
               old_pitch = size_t(a.rows.cap) * row;
  if (n_held > 0) {
    copy_rows(r.k, pitch, a.rows.k, old_pitch, size_t(n_held) * row, size_t(hk));
    copy_rows(r.v, pitch, a.rows.v, old_pitch, size_t(n_held) * row, size_t(hk));
  }
  tq_write(st, a.n_rec + n_held, a.fresh.k, a.fresh.v, a.T, a.fresh.token_stride,
           a.fresh.head_stride, &r, n_held);
  if (keep > 0) {
    const int64_t from = (a.n_exact - keep) * d;
    copy_rows(a.rows.k + n_held * d, old_pitch, r.k + from, pitch, size_t(keep) * row, size_t(hk));
    copy_rows(a.rows.v + n_held * d, old_pitch, r.v + from, pitch, size_t(keep) * row, size_t(hk));
  }
  TqAttentionArgs b = a;
  b.rows = r;
  b.fresh = {};
  return b;
}

void Backend::norm_linear(const float* x, int64_t T, const Weight& norm, float eps, float* h,
                          std::span<const Weight* const> w, std::span<float* const> out,
                          std::span<const Weight* const> bias) {
  if (w.size() != out.size() || (!bias.empty() && bias.size() != w.size()))
    fail("norm_linear: {} weights, {} outputs, {} biases", w.size(), out.size(), bias.size());
  rms_norm(x, T, norm, eps, h);
  for (size_t i = 0; i < w.size(); ++i)
    linear(h, T, *w[i], out[i], bias.empty() ? nullptr : bias[i]);
}

void Backend::linear_add(const float* in, int64_t T, const Weight& w, float* x, float* scratch) {
  linear(in, T, w, scratch);
  add(x, scratch, T * w.rows);
}

void Backend::swiglu_down_add(float* gate, const float* up, int64_t T, const Weight& down,
                              float* x, float* scratch) {
  swiglu(gate, up, gate, T * down.cols);
  linear(gate, T, down, scratch);
  add(x, scratch, T * down.rows);
}

void Backend::norm_swiglu_down_add(float* x, int64_t T, const Weight& norm, float eps,
                                   const Weight& gate, const Weight& up, const Weight& down,
                                   float* h, float* gate_ws, float* up_ws) {
  const Weight* w[] = {&gate, &up};
  float* out[] = {gate_ws, up_ws};
  norm_linear(x, T, norm, eps, h, w, out);
  swiglu_down_add(gate_ws, up_ws, T, down, x, h);
}

void Backend::qk_norm_rope(float* q, float* k, int64_t T, int64_t n_head, int64_t n_head_kv,
                           int64_t head_dim, const Weight* q_norm, const Weight* k_norm, float eps,
                           int64_t pos0, std::span<const float> inv_freq) {
  if (q_norm) rms_norm(q, T * n_head, *q_norm, eps, q);
  if (k_norm) rms_norm(k, T * n_head_kv, *k_norm, eps, k);
  rope(q, T, n_head, head_dim, pos0, inv_freq);
  rope(k, T, n_head_kv, head_dim, pos0, inv_freq);
}

}  // namespace tq
