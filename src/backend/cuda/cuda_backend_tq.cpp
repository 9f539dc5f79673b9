// CudaBackend's TurboQuant caches on the device: encode (tq_write) and attention over records
// plus exact rows (tq_attention): decode by the split-K kernel with its exact tail, prefill
// chunks by the flash prefill kernel over records and exact rows, merged; see
// cuda_backend_impl.h.
#include <algorithm>
#include <cstdlib>
#include <string>

#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/prefill_attention.h"
#include "backend/cuda/prefill_wgmma.h"
#include "backend/cuda/tq_rotate.h"
#include "quant/vector_codec.h"

namespace tq {

cuda::TqCodecDev CudaBackend::tq_codec(const quant::VectorCodec& c) const {
  std::lock_guard<std::mutex> lock(tq_mu_);
  for (const auto& [config, dev] : tq_codecs_)
    if (config == c.config()) return dev;
  cuda::TqCodecDev dev = cuda::make_tq_codec_dev(c);  // throws for an unsupported codec
  tq_codecs_.emplace_back(c.config(), dev);
  return dev;
}

// Both kernels (split-K decode with an exact tail, flash prefill) need head_dim 128 and 4-bit
// Hadamard codecs with fp16 scales, and one codebook for K and V.
bool CudaBackend::device_turboquant(const quant::VectorCodec& k,
                                    const quant::VectorCodec& v) const {
  if (k.head_dim() != 128 || v.head_dim() != 128) return false;
  try {
    const cuda::TqCodecDev kc = tq_codec(k), vc = tq_codec(v);
    return std::equal(kc.centroids, kc.centroids + 16, vc.centroids);
  } catch (const Error&) {
    return false;
  }
}

void CudaBackend::tq_grow(TqMem& m, size_t bytes) {
  const size_t before = m.cap;
  ensure(m.p, m.cap, bytes);
  allocated_ += m.cap - before;
}

void CudaBackend::tq_write(const TqStore& dst, int64_t at, const float* k, const float* v,
                           int64_t T, int64_t token_stride, int64_t head_stride,
                           const TqRows* rows, int64_t rows_at) {
  if (T <= 0) return;
  TQ_CHECK(dst.k_codec && dst.v_codec && at >= 0 && at + T <= dst.cap);
  TQ_CHECK(!rows || (rows->k && rows->v && rows_at >= 0));
  const cuda::TqCodecDev kc = tq_codec(*dst.k_codec), vc = tq_codec(*dst.v_codec);
  TQ_CHECK(kc.head_dim == dst.head_dim && vc.head_dim == dst.head_dim);
  const int hk = int(dst.n_head_kv);
  cuda::tq_encode_rows(k, T, hk, token_stride, head_stride, kc, dst.k_codes, dst.k_scale, dst.cap,
                       at, rows ? rows->k : nullptr, rows ? rows->cap : 0, rows_at, stream_);
  cuda::tq_encode_rows(v, T, hk, token_stride, head_stride, vc, dst.v_codes, dst.v_scale, dst.cap,
                       at, rows ? rows->v : nullptr, rows ? rows->cap : 0, rows_at, stream_);
}

bool CudaBackend::tq_write_from(const TqStore& dst, int64_t at, const KvStore& src, int64_t src_at,
                                int64_t T, const TqRows* rows, int64_t rows_at) {
  // The bf16 device store read by the bulk encoder; TQ_ENCODE_KERNEL=warp keeps the old path
  // (an f32 copy, then the one-warp encoder) as the benchmarks' baseline.
  if (src.dtype != DType::BF16 || cuda::encode_kernel_is_warp()) return false;
  if (T <= 0) return true;
  TQ_CHECK(dst.k_codec && dst.v_codec && at >= 0 && at + T <= dst.cap);
  TQ_CHECK(src_at >= 0 && src_at + T <= src.cap && src.n_head_kv == dst.n_head_kv &&
           src.head_dim == dst.head_dim);
  TQ_CHECK(!rows || (rows->k && rows->v && rows_at >= 0));
  const cuda::TqCodecDev kc = tq_codec(*dst.k_codec), vc = tq_codec(*dst.v_codec);
  const int hk = int(dst.n_head_kv);
  const int64_t d = dst.head_dim, first = src_at * d;  // [h][cap][d]
  cuda::tq_encode_rows_bf16(static_cast<const uint16_t*>(src.k) + first, T, hk, d, src.cap * d,
                            kc, dst.k_codes, dst.k_scale, dst.cap, at, rows ? rows->k : nullptr,
                            rows ? rows->cap : 0, rows_at, stream_);
  cuda::tq_encode_rows_bf16(static_cast<const uint16_t*>(src.v) + first, T, hk, d, src.cap * d,
                            vc, dst.v_codes, dst.v_scale, dst.cap, at, rows ? rows->v : nullptr,
                            rows ? rows->cap : 0, rows_at, stream_);
  return true;
}

void CudaBackend::qk_norm_rope_rotate_q(float* q, float* k, int64_t T, int64_t n_head,
                                        int64_t n_head_kv, int64_t head_dim,
                                        const Weight* q_norm, const Weight* k_norm, float eps,
                                        int64_t pos0, std::span<const float> inv_freq,
                                        const quant::VectorCodec& rq) {
  // TQ_FUSED_QROT=0 (the same-run baseline): RoPE, then the rotation as a pass of its own.
  static const bool fused = [] {
    const char* e = std::getenv("TQ_FUSED_QROT");
    return !e || std::string(e) != "0";
  }();
  if (!fused) {
    qk_norm_rope(q, k, T, n_head, n_head_kv, head_dim, q_norm, k_norm, eps, pos0, inv_freq);
    return cuda::tq_rotate(q, q, T * n_head, tq_codec(rq), false, stream_);
  }
  check_qk_norm_rope(head_dim, q_norm, k_norm, inv_freq);
  cuda::launch_qk_norm_rope_rotate_q(q, k, T, n_head, n_head_kv, head_dim,
                                     q_norm ? q_norm->buf.f32() : nullptr,
                                     k_norm ? k_norm->buf.f32() : nullptr, eps, pos0,
                                     inv_freq_dev(inv_freq), tq_codec(rq), stream_);
}

void CudaBackend::tq_attention(const TqAttentionArgs& a) {
  TQ_CHECK(a.T > 0 && a.n_rec >= 0 && a.n_exact >= 0 && a.q_pos0 >= 0);
  TQ_CHECK(a.q_pos0 + a.T <= a.n_rec + a.n_exact && a.n_rec <= a.store.cap);
  TQ_CHECK(a.store.n_head_kv > 0 && a.n_head % a.store.n_head_kv == 0);
  const bool fresh = a.fresh.k != nullptr;
  TQ_CHECK(!fresh || (a.fresh.v && a.T > 1 && a.T <= a.n_exact && a.fresh.keep >= 0 &&
                      a.fresh.keep <= a.T && a.q_pos0 + a.T == a.n_rec + a.n_exact &&
                      a.n_rec + a.n_exact <= a.store.cap));
  // The rows `rows` holds: all n_exact, or with fresh rows those before the chunk and `keep`.
  const int64_t in_rows = fresh ? a.n_exact - a.T + a.fresh.keep : a.n_exact;
  TQ_CHECK(in_rows == 0 || (a.rows.k && a.rows.v && in_rows <= a.rows.cap));
  const cuda::TqCodecDev kc = tq_codec(*a.store.k_codec), vc = tq_codec(*a.store.v_codec);
  if (kc.head_dim != 128 || a.store.head_dim != 128)
    fail("CUDA tq_attention: head_dim {} (the kernels need 128)", a.store.head_dim);
  // One query at the last position sees every key: the split-K decode kernel. A deferred record
  // of this store goes with that launch; any other is written first.
  const bool decode = a.T == 1 && a.q_pos0 + 1 == a.n_rec + a.n_exact;
  TQ_CHECK(!(decode && a.q_rotated));  // the decode kernel rotates its query itself
  if (pending_record_ && !(decode && pending_record_->dst.k == a.store.k_codes)) finish_appends();
  if (decode)
    tq_decode(a, kc, vc);
  else
    tq_prefill(a, kc, vc);
}

void CudaBackend::tq_decode(const TqAttentionArgs& a, const cuda::TqCodecDev& kc,
                            const cuda::TqCodecDev& vc) {
  const TqStore& st = a.store;
  cuda::AttnShape s;
  s.batch = 1;
  s.n_query = 1;
  s.n_head = a.n_head;
  s.n_head_kv = st.n_head_kv;
  s.head_dim = st.head_dim;
  s.max_len = a.n_rec;
  s.format = cuda::KvFormat::TurboQuant;
  s.tail_rows = a.n_exact;
  const cuda::AttnPlan plan = cuda::choose_attention(info_, s);
  if (plan.kernel != cuda::AttnKernel::DecodeSplitK)
    fail("CUDA tq_attention: no decode kernel for this shape ({})", cuda::attn_kernel_name(plan.kernel));
  // Workspace for the most splits any context length gets with these heads: sized by the first
  // decode step, so later steps (growing contexts) allocate nothing.
  cuda::AttnShape longest = s;
  longest.max_len = int64_t(1) << 40;
  longest.tail_rows = 0;
  const cuda::AttnPlan most = cuda::choose_attention(info_, longest);
  const cuda::AttnPlan& big = most.n_split > plan.n_split ? most : plan;
  tq_grow(tq_ws_, cuda::decode_attention_workspace(big, 1, int(a.n_head), int(st.head_dim)));
  // Both lengths from the iota table: nothing is uploaded or set per token.
  const int32_t* iota = iota_upto(std::max(a.n_rec, a.n_exact));
  cuda::DecodeAttnArgs d;
  d.q = a.q;
  d.out = a.out;
  d.format = cuda::KvFormat::TurboQuant;
  d.k = st.k_codes;
  d.v = st.v_codes;
  d.k_scale = st.k_scale;
  d.v_scale = st.v_scale;
  d.seq_stride = st.n_head_kv * st.cap;
  d.head_stride = st.cap;
  d.lens = iota + a.n_rec;
  d.len = int32_t(a.n_rec);  // by value too: the kernel's first loads need no round trip
  // This step's append (the launch before) wrote record n_rec + n_exact - 1 alone: the older
  // records may be loaded while it ends.
  d.early_rows = int32_t(std::min(a.n_rec, a.n_rec + a.n_exact - 1));
  d.batch = 1;
  d.n_head = int(a.n_head);
  d.n_head_kv = int(st.n_head_kv);
  d.head_dim = int(st.head_dim);
  d.scale = a.scale;
  d.k_codec = &kc;
  d.v_codec = &vc;
  d.workspace = static_cast<float*>(tq_ws_.p);
  if (a.n_exact > 0) {
    d.k_tail = a.rows.k;
    d.v_tail = a.rows.v;
    d.tail_seq_stride = st.n_head_kv * a.rows.cap;
    d.tail_head_stride = a.rows.cap;
    d.tail_lens = iota + a.n_exact;
    d.tail_len = int32_t(a.n_exact);
  }
  // The step's deferred record (qk_norm_rope_append): its token is the tail's last row here.
  if (pending_record_) TQ_CHECK(a.n_exact > 0 && pending_record_->dst.len == a.n_rec + a.n_exact - 1);
  d.record = pending_record_ ? &*pending_record_ : nullptr;
  cuda::decode_attention(d, plan, stream_);
  pending_record_.reset();
}

// Prefill chunk: q rotated by R_k once; flash attention over the records (TurboQuant codes, in
// the rotated domain) and the exact rows (causal, positions n_rec ..), rotated back by R_v^T. On
// the Hopper kernel that is one launch (the rows as fp16 tiles after the records, one softmax,
// the rotation in its epilogue): no f32 scratch but the rotated q. Otherwise the rows run as a
// bf16 copy in a second launch, each part with its log-sum-exp, merged and rotated back in one
// pass (two f32 outputs of the chunk's size as scratch).
void CudaBackend::tq_prefill(const TqAttentionArgs& a, const cuda::TqCodecDev& kc,
                             const cuda::TqCodecDev& vc) {
  const TqStore& st = a.store;
  const int64_t T = a.T, H = a.n_head, D = st.head_dim, hk = st.n_head_kv;
  const int64_t rows = T * H, row_f = rows * D;
  const int64_t e_stride = (a.n_exact + 63) / 64 * 64;  // 16-bit exact rows per kv head
  auto up = [](int64_t n) { return (n + 63) / 64 * 64; };  // 256-byte aligned regions
  const int64_t e_elems = hk * (e_stride + 64) * D;        // + slack for whole-tile reads

  cuda::PrefillAttnArgs p;
  p.T = T;
  p.n_head = int(H);
  p.n_head_kv = int(hk);
  p.head_dim = int(D);
  p.q_pos0 = a.q_pos0;
  p.scale = a.scale;
  cuda::PrefillAttnArgs recs = p;  // the records: TurboQuant codes, positions 0 ..
  recs.format = cuda::KvFormat::TurboQuant;
  recs.k = st.k_codes;
  recs.v = st.v_codes;
  recs.k_scale = st.k_scale;
  recs.v_scale = st.v_scale;
  recs.k_codec = &kc;
  recs.v_codec = &vc;
  recs.head_stride = st.cap;
  recs.L = a.n_rec;
  recs.k_pos0 = 0;
  cuda::PrefillAttnArgs one = recs;  // records and rows in one launch, rotated back
  one.out = a.out;
  one.causal = true;  // records before the chunk are all visible; those holding it are causal
  one.rotate_back = true;
  one.tail_len = a.n_exact;
  one.tail_stride = e_stride;
  const bool fused = cuda::prefill_wgmma_one_launch(one, stream_);
  if (a.fresh.k && !fused) {  // the two-launch path reads every exact row in f32
    tq_grow(tq_rows_, size_t(2 * hk * a.n_exact * D) * sizeof(float));
    return tq_prefill(write_fresh_rows(a, static_cast<float*>(tq_rows_.p)), kc, vc);
  }
  // Exact rows already in `rows` (f32): all, or with fresh rows those before the chunk.
  const int64_t n_held = a.fresh.k ? a.n_exact - T : a.n_exact;

  // q rotated here unless the RoPE pass did it (then no room for it: 64 MB at a 4K chunk of
  // 32 heads); the two-launch path's outputs and log-sum-exps; the exact rows' 16-bit copies.
  const int64_t q_floats = a.q_rotated ? 0 : up(row_f);
  const int64_t part_floats = fused ? 0 : 2 * up(row_f) + 2 * up(rows);
  const int64_t copy_elems = a.n_exact > 0 ? 2 * e_elems : 0;
  // The one launch's ring of decoded record tiles (prefill_wgmma_ring_bytes; 0 when not taken).
  const size_t used = size_t(q_floats + part_floats) * sizeof(float) + size_t(copy_elems) * 2;
  const size_t ring_at = (used + 1023) / 1024 * 1024;
  const size_t ring_bytes = fused ? cuda::prefill_wgmma_ring_bytes(one) : 0;
  tq_grow(tq_scratch_, ring_at + ring_bytes);
  float* scratch = static_cast<float*>(tq_scratch_.p);
  if (ring_bytes > 0) {
    one.ring_ws = static_cast<uint8_t*>(tq_scratch_.p) + ring_at;
    one.ring_ws_bytes = ring_bytes;
  }
  float* q_rot = a.q_rotated ? nullptr : scratch;
  float* out_a = scratch + q_floats;
  float* out_b = out_a + up(row_f);
  float* lse_a = out_b + up(row_f);
  float* lse_b = lse_a + up(rows);
  auto* kb = reinterpret_cast<uint16_t*>(scratch + q_floats + part_floats);
  uint16_t* vb = kb + e_elems;

  if (q_rot) cuda::tq_rotate(a.q, q_rot, rows, kc, false, stream_);
  p.q = recs.q = one.q = q_rot ? q_rot : a.q;
  // The window rows as fp16 (the one launch's tiles) or bf16 (the dense kernel's), per kv head.
  auto copy_window = [&](bool fp16) {
    cuda::tq_rows_to_16bit(a.rows.k, a.rows.cap, kb, e_stride, int(hk), n_held, int(D), fp16, stream_);
    cuda::tq_rows_to_16bit(a.rows.v, a.rows.cap, vb, e_stride, int(hk), n_held, int(D), fp16, stream_);
  };
  if (fused) {
    if (a.n_exact > 0) {
      copy_window(true);
      // The chunk's fresh rows: encoded to records, rotated to the fp16 tiles after the held
      // rows, and (only the last `keep`) to the layer's f32 rows.
      if (a.fresh.k) {
        const int64_t keep = a.fresh.keep;
        cuda::TqRowsOut o;
        o.f32_head_stride = a.rows.cap;
        o.f32_t0 = n_held - (T - keep);
        o.f32_from = T - keep;
        o.f16_head_stride = e_stride;
        o.f16_t0 = n_held;
        for (const bool value : {false, true}) {
          o.f32 = keep > 0 ? (value ? a.rows.v : a.rows.k) : nullptr;
          o.f16 = value ? vb : kb;
          cuda::tq_encode_rows_out(value ? a.fresh.v : a.fresh.k, T, int(hk), a.fresh.token_stride,
                                   a.fresh.head_stride, value ? vc : kc,
                                   value ? st.v_codes : st.k_codes, value ? st.v_scale : st.k_scale,
                                   st.cap, a.n_rec + n_held, o, stream_);
        }
      }
      one.tail_k = kb;
      one.tail_v = vb;
    }
    return cuda::prefill_attention(one, stream_);
  }
  float* res = nullptr;
  if (a.n_rec > 0) {
    recs.out = out_a;
    recs.lse = lse_a;
    recs.causal = a.q_pos0 + 1 < a.n_rec;  // records hold some of the chunk (no exact window)
    cuda::prefill_attention(recs, stream_);
    res = out_a;
  }
  if (a.n_exact > 0) {
    copy_window(false);
    cuda::PrefillAttnArgs e = p;
    e.out = res ? out_b : out_a;
    e.lse = res ? lse_b : lse_a;
    e.format = cuda::KvFormat::BF16;
    e.k = kb;
    e.v = vb;
    e.head_stride = e_stride;
    e.L = a.n_exact;
    e.k_pos0 = a.n_rec;
    e.causal = true;
    cuda::prefill_attention(e, stream_);
    if (res) return cuda::tq_merge_rotate(out_a, lse_a, out_b, lse_b, a.out, rows, vc, stream_);
    res = out_a;
  }
  cuda::tq_rotate(res, a.out, rows, vc, true, stream_);
}

}  // namespace tq
