// CudaBackend's batched decode step: decode_attention_batch (one split-K decode launch per kind:
// dense bf16, TurboQuant head_dim 128), kv_append_batch (one append launch per kind) and
// qk_norm_rope_rows (per-row positions) for all one-token sequences of a step, each described by a
// cuda::DecodeSeqDesc (its own allocation, capacity, lengths, exact tail) in a device table,
// stored by small kernels carrying it in their parameters (or, past 16 KB, through a pinned ring
// and an async copy). Nothing is allocated per step.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "backend/cuda/cuda_backend_impl.h"
#include "quant/vector_codec.h"

namespace tq {

// Pinned staging ring (slot i is rewritten only after the event of its last upload), the device
// descriptor tables ([kTables][cap]: dense attention, TurboQuant attention, row positions,
// appends) and the split-K workspace. The row positions of the last qk_norm_rope_rows stay in
// their table: the next layers of a step reuse them without an upload.
struct CudaBackend::BatchMem {
  static constexpr int kSlots = 64;
  static constexpr int kTables = 4;
  std::vector<int32_t> pos_last, pos_tmp;
  cuda::DecodeSeqDesc* pinned = nullptr;  // [kSlots][cap]
  cudaEvent_t done[kSlots] = {};
  bool used[kSlots] = {};
  int next = 0;
  int64_t cap = 0;
  cuda::DecodeSeqDesc* dev = nullptr;
  void* ws = nullptr;
  size_t ws_cap = 0;
  ~BatchMem() {
    for (cudaEvent_t e : done)
      if (e) cudaEventDestroy(e);
    if (pinned) cudaFreeHost(pinned);
    if (dev) cudaFree(dev);
    if (ws) cudaFree(ws);
  }
};

void CudaBackend::free_batch_mem(BatchMem* m) { delete m; }

namespace {

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// The descriptor of one append (fields as tq_encode_batch / launch_kv_append_batch read them:
// len the slot or record, tail_len the exact row), its indices checked.
cuda::DecodeSeqDesc append_desc(const KvAppend& s) {
  TQ_CHECK(s.row >= 0 && s.row <= INT32_MAX && s.at >= 0 && s.at <= INT32_MAX);
  cuda::DecodeSeqDesc d;
  d.row = int32_t(s.row);
  d.len = int32_t(s.at);
  if (s.kv.k) {
    TQ_CHECK(s.at < s.kv.cap);
    d.k = s.kv.k;
    d.v = s.kv.v;
    d.head_stride = s.kv.cap;
    return d;
  }
  const TqStore& st = s.tq;
  TQ_CHECK(st.k_codes && st.k_codec && st.v_codec && s.at < st.cap);
  TQ_CHECK(!s.rows.k || (s.rows.v && s.rows_at >= 0 && s.rows_at < s.rows.cap &&
                         s.rows_at <= INT32_MAX));
  d.k = st.k_codes;
  d.v = st.v_codes;
  d.k_scale = st.k_scale;
  d.v_scale = st.v_scale;
  d.head_stride = st.cap;
  if (s.rows.k) {
    d.k_tail = s.rows.k;
    d.v_tail = s.rows.v;
    d.tail_head_stride = s.rows.cap;
    d.tail_len = int32_t(s.rows_at);
  }
  return d;
}

}  // namespace

void CudaBackend::batch_grow(int64_t n_desc, size_t ws_bytes) {
  if (!batch_) batch_ = std::unique_ptr<BatchMem, void (*)(BatchMem*)>(new BatchMem, free_batch_mem);
  BatchMem& m = *batch_;
  if (n_desc > m.cap) {
    CUDA_CHECK(cudaStreamSynchronize(stream_));  // queued copies and launches may read them
    if (m.pinned) CUDA_CHECK(cudaFreeHost(m.pinned));
    if (m.dev) {
      CUDA_CHECK(cudaFree(m.dev));
      allocated_ -= size_t(BatchMem::kTables * m.cap) * sizeof(cuda::DecodeSeqDesc);
    }
    m.cap = std::max<int64_t>({n_desc, 2 * m.cap, 64});
    CUDA_CHECK(cudaMallocHost(&m.pinned, size_t(BatchMem::kSlots * m.cap) * sizeof(cuda::DecodeSeqDesc)));
    CUDA_CHECK(cudaMalloc(&m.dev, size_t(BatchMem::kTables * m.cap) * sizeof(cuda::DecodeSeqDesc)));
    allocated_ += size_t(BatchMem::kTables * m.cap) * sizeof(cuda::DecodeSeqDesc);
    m.pos_last.clear();  // the new tables hold nothing
    for (int i = 0; i < BatchMem::kSlots; ++i) {
      if (!m.done[i]) CUDA_CHECK(cudaEventCreateWithFlags(&m.done[i], cudaEventDisableTiming));
      m.used[i] = false;
    }
  }
  const size_t before = m.ws_cap;
  ensure(m.ws, m.ws_cap, ws_bytes);
  allocated_ += m.ws_cap - before;
}

// Copies `bytes` (at most cap descriptors' worth) to device table `which`: up to 16 KB (168
// descriptors) as kernels carrying the bytes in their parameters (PDL-chained like the kernels
// around them); more, or with TQ_TABLE_COPY=1, through the next pinned slot and an async copy
// (each such copy left a ~17 us gap in the GPU's timeline: 0.7 ms per batch-32 step).
const void* CudaBackend::batch_upload_bytes(const void* src, size_t bytes, int which) {
  BatchMem& m = *batch_;
  TQ_CHECK(which >= 0 && which < BatchMem::kTables);
  TQ_CHECK(bytes <= size_t(m.cap) * sizeof(cuda::DecodeSeqDesc));
  static_assert(sizeof(cuda::DecodeSeqDesc) % 16 == 0, "tables are stored in 16-byte words");
  static const bool copy = [] {
    const char* e = std::getenv("TQ_TABLE_COPY");
    return e && *e && std::atoi(e) != 0;
  }();
  if (!copy && bytes <= 16 * 1024) {
    cuda::DecodeSeqDesc* dev = m.dev + which * m.cap;
    cuda::launch_table_store(dev, src, bytes, stream_);
    return dev;
  }
  const int slot = m.next;
  m.next = (m.next + 1) % BatchMem::kSlots;
  if (m.used[slot]) CUDA_CHECK(cudaEventSynchronize(m.done[slot]));
  cuda::DecodeSeqDesc* host = m.pinned + slot * m.cap;
  std::memcpy(host, src, bytes);
  cuda::DecodeSeqDesc* dev = m.dev + which * m.cap;
  CUDA_CHECK(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, stream_));
  CUDA_CHECK(cudaEventRecord(m.done[slot], stream_));
  m.used[slot] = true;
  return dev;
}

// Copies n descriptors to device table `which` through the next pinned slot.
const cuda::DecodeSeqDesc* CudaBackend::batch_upload(const cuda::DecodeSeqDesc* d, int64_t n,
                                                     int which) {
  return static_cast<const cuda::DecodeSeqDesc*>(
      batch_upload_bytes(d, size_t(n) * sizeof(cuda::DecodeSeqDesc), which));
}

void CudaBackend::qk_norm_rope_rows(float* q, float* k, int64_t T, int64_t n_head,
                                    int64_t n_head_kv, int64_t head_dim, const Weight* q_norm,
                                    const Weight* k_norm, float eps, std::span<const int64_t> pos,
                                    std::span<const float> inv_freq) {
  TQ_CHECK(int64_t(pos.size()) == T && int64_t(inv_freq.size()) == head_dim / 2);
  for (const Weight* w : {q_norm, k_norm})
    TQ_CHECK(!w || (w->dtype == DType::F32 && w->cols == head_dim));
  if (T <= 0) return;
  constexpr int64_t kDesc = int64_t(sizeof(cuda::DecodeSeqDesc));
  batch_grow((T * 4 + kDesc - 1) / kDesc, 0);
  BatchMem& m = *batch_;
  m.pos_tmp.resize(size_t(T));
  for (int64_t t = 0; t < T; ++t) {
    TQ_CHECK(pos[size_t(t)] >= 0 && pos[size_t(t)] <= INT32_MAX);
    m.pos_tmp[size_t(t)] = int32_t(pos[size_t(t)]);
  }
  const int32_t* dev = reinterpret_cast<const int32_t*>(m.dev + 2 * m.cap);
  if (m.pos_tmp != m.pos_last) {
    batch_upload_bytes(m.pos_tmp.data(), size_t(T) * 4, 2);
    m.pos_last = m.pos_tmp;
  }
  cuda::launch_qk_norm_rope_rows(q, k, T, n_head, n_head_kv, head_dim,
                                 q_norm ? q_norm->buf.f32() : nullptr,
                                 k_norm ? k_norm->buf.f32() : nullptr, eps, dev,
                                 inv_freq_dev(inv_freq), stream_);
}

void CudaBackend::qk_norm_rope_append(float* q, float* k, const float* v, int64_t T,
                                      int64_t n_head, int64_t n_head_kv, int64_t head_dim,
                                      const Weight* q_norm, const Weight* k_norm, float eps,
                                      std::span<const int64_t> pos,
                                      std::span<const float> inv_freq,
                                      std::span<const KvAppend> appends) {
  static const bool fused = [] {
    const char* e = std::getenv("TQ_FUSED_APPEND");
    return !(e && *e && std::atoi(e) == 0);
  }();
  const KvAppend* a = appends.size() == 1 ? &appends[0] : nullptr;
  const bool dense = a && a->kv.k && a->kv.dtype == DType::BF16 &&
                     a->kv.n_head_kv == n_head_kv && a->kv.head_dim == head_dim;
  const bool tq = a && !a->kv.k && a->tq.k_codes && a->tq.head_dim == 128 && head_dim == 128 &&
                  a->tq.n_head_kv == n_head_kv;
  if (!fused || T != 1 || !a || a->row != 0 || !(dense || tq) ||
      int64_t(pos.size()) != 1 || int64_t(inv_freq.size()) != head_dim / 2)
    return Backend::qk_norm_rope_append(q, k, v, T, n_head, n_head_kv, head_dim, q_norm, k_norm,
                                        eps, pos, inv_freq, appends);
  for (const Weight* w : {q_norm, k_norm})
    TQ_CHECK(!w || (w->dtype == DType::F32 && w->cols == head_dim));
  const cuda::DecodeSeqDesc d = append_desc(*a);
  cuda::TqCodecDev kc, vc;
  if (tq) {
    kc = tq_codec(*a->tq.k_codec);
    vc = tq_codec(*a->tq.v_codec);
    TQ_CHECK(kc.head_dim == 128 && vc.head_dim == 128);
  }
  finish_appends();  // (the caller should have: a deferred record must not wait longer)
  // The record of a token the attention reads from the exact window is written with that
  // attention (tq_decode) or by finish_appends() (TQ_DEFER_RECORD=0: here).
  static const bool defer_on = [] {
    const char* e = std::getenv("TQ_DEFER_RECORD");
    return !(e && *e && std::atoi(e) == 0);
  }();
  const bool defer = tq && a->defer_record && a->rows.k && defer_on;
  cuda::launch_qk_norm_rope_append(q, k, v, 1, n_head, n_head_kv, head_dim,
                                   q_norm ? q_norm->buf.f32() : nullptr,
                                   k_norm ? k_norm->buf.f32() : nullptr, eps, pos[0],
                                   inv_freq_dev(inv_freq), d, dense ? nullptr : &kc,
                                   dense ? nullptr : &vc, defer, stream_);
  if (defer) pending_record_ = cuda::RecordJob{k, v, d, kc, vc, int(n_head_kv)};
}

void CudaBackend::finish_appends() {
  if (!pending_record_) return;
  cuda::launch_record_encode(*pending_record_, stream_);
  pending_record_.reset();
}

// Dense bf16 appends of one shape in one launch, TurboQuant head_dim-128 appends of one shape
// and codec pair in another (the same encode as tq_write); the rest through the base version.
void CudaBackend::kv_append_batch(std::span<const KvAppend> seqs, const float* k,
                                  const float* v) {
  if (seqs.empty()) return;
  std::vector<KvAppend> rest;
  std::vector<cuda::DecodeSeqDesc> dense, tqd;
  const KvAppend* d0 = nullptr;
  const KvAppend* t0 = nullptr;
  for (const KvAppend& s : seqs) {
    const cuda::DecodeSeqDesc d = append_desc(s);
    if (s.kv.k) {
      const KvStore& kv = s.kv;
      if (!d0 && kv.dtype == DType::BF16) d0 = &s;
      if (kv.dtype != DType::BF16 || kv.n_head_kv != d0->kv.n_head_kv ||
          kv.head_dim != d0->kv.head_dim) {
        rest.push_back(s);
        continue;
      }
      dense.push_back(d);
    } else {
      const TqStore& st = s.tq;
      if (!t0 && st.head_dim == 128) t0 = &s;
      if (st.head_dim != 128 || st.n_head_kv != t0->tq.n_head_kv ||
          !(st.k_codec->config() == t0->tq.k_codec->config()) ||
          !(st.v_codec->config() == t0->tq.v_codec->config())) {
        rest.push_back(s);
        continue;
      }
      tqd.push_back(d);
    }
  }
  if (!dense.empty() || !tqd.empty()) {
    batch_grow(int64_t(std::max(dense.size(), tqd.size())), 0);
    // Both launches use table 3: the stream orders the second upload after the first launch.
    if (!dense.empty())
      cuda::launch_kv_append_batch(batch_upload(dense.data(), int64_t(dense.size()), 3),
                                   int(dense.size()), k, v, int(d0->kv.n_head_kv),
                                   int(d0->kv.head_dim), stream_);
    if (!tqd.empty()) {
      const cuda::TqCodecDev kc = tq_codec(*t0->tq.k_codec), vc = tq_codec(*t0->tq.v_codec);
      TQ_CHECK(kc.head_dim == 128 && vc.head_dim == 128);
      cuda::tq_encode_batch(batch_upload(tqd.data(), int64_t(tqd.size()), 3), int(tqd.size()),
                            int(t0->tq.n_head_kv), k, v, kc, vc, stream_);
    }
  }
  if (!rest.empty()) Backend::kv_append_batch(rest, k, v);
}

void CudaBackend::decode_attention_batch(std::span<const DecodeSeq> seqs, const float* q,
                                         float* out, int64_t n_head, float scale) {
  if (seqs.empty()) return;
  // One sequence: the single-sequence kernels (lengths from the iota table), nothing uploaded.
  if (seqs.size() == 1) return Backend::decode_attention_batch(seqs, q, out, n_head, scale);
  // Partition: dense bf16 sequences of the first dense one's shape; TurboQuant ones of the first
  // one's shape and codecs that meet the head_dim-128 kernel's alignment; the rest (other
  // shapes, f32 K/V) go through the per-sequence ops.
  std::vector<DecodeSeq> rest;
  std::vector<cuda::DecodeSeqDesc> dense, tqd;
  const DecodeSeq* d0 = nullptr;
  const DecodeSeq* t0 = nullptr;
  int64_t dense_max = 0, tq_max = 0;
  bool tq_tail = false;
  int64_t tq_tail_max = 0;  // longest exact tail (rows)
  for (const DecodeSeq& s : seqs) {
    TQ_CHECK(s.row >= 0 && s.row <= INT32_MAX);
    if (s.kv.k) {
      const KvStore& kv = s.kv;
      TQ_CHECK(s.len >= 1 && s.len <= kv.cap && kv.cap <= INT32_MAX);
      if (!d0 && kv.dtype == DType::BF16) d0 = &s;
      if (!d0 || kv.dtype != DType::BF16 || kv.n_head_kv != d0->kv.n_head_kv ||
          kv.head_dim != d0->kv.head_dim) {
        rest.push_back(s);
        continue;
      }
      cuda::DecodeSeqDesc d;
      d.k = kv.k;
      d.v = kv.v;
      d.head_stride = kv.cap;
      d.len = int32_t(s.len);
      d.row = int32_t(s.row);
      dense.push_back(d);
      dense_max = std::max(dense_max, s.len);
    } else {
      const TqStore& st = s.tq;
      TQ_CHECK(st.k_codes && st.k_codec && st.v_codec && s.n_rec >= 0 && s.n_exact >= 0);
      TQ_CHECK(s.n_rec <= st.cap && s.n_rec + s.n_exact >= 1 && st.cap <= INT32_MAX);
      TQ_CHECK(s.n_exact == 0 || (s.rows.k && s.rows.v && s.n_exact <= s.rows.cap));
      const bool ok = st.head_dim == 128 && st.cap % 8 == 0 && aligned16(st.k_codes) &&
                      aligned16(st.v_codes) && aligned16(st.k_scale) && aligned16(st.v_scale) &&
                      (s.n_exact == 0 || (aligned16(s.rows.k) && aligned16(s.rows.v)));
      if (ok && !t0) t0 = &s;
      if (!ok || st.n_head_kv != t0->tq.n_head_kv ||
          !(st.k_codec->config() == t0->tq.k_codec->config()) ||
          !(st.v_codec->config() == t0->tq.v_codec->config())) {
        rest.push_back(s);
        continue;
      }
      cuda::DecodeSeqDesc d;
      d.k = st.k_codes;
      d.v = st.v_codes;
      d.k_scale = st.k_scale;
      d.v_scale = st.v_scale;
      d.head_stride = st.cap;
      d.len = int32_t(s.n_rec);
      d.row = int32_t(s.row);
      if (s.n_exact > 0) {
        d.k_tail = s.rows.k;
        d.v_tail = s.rows.v;
        d.tail_head_stride = s.rows.cap;
        d.tail_len = int32_t(s.n_exact);
        tq_tail = true;
        tq_tail_max = std::max(tq_tail_max, s.n_exact);
      }
      tqd.push_back(d);
      tq_max = std::max(tq_max, s.n_rec);
    }
  }

  // Plans, and the workspace for the most splits these heads get at any length (sized once per
  // batch size: growing contexts allocate nothing).
  auto plan_for = [&](const DecodeSeq& s0, int64_t batch, int64_t max_len, bool tq, bool tail) {
    cuda::AttnShape sh;
    sh.batch = batch;
    sh.n_query = 1;
    sh.n_head = n_head;
    sh.n_head_kv = tq ? s0.tq.n_head_kv : s0.kv.n_head_kv;
    sh.head_dim = tq ? s0.tq.head_dim : s0.kv.head_dim;
    sh.max_len = max_len;
    sh.format = tq ? cuda::KvFormat::TurboQuant : cuda::KvFormat::BF16;
    sh.tail_rows = tail ? tq_tail_max : 0;
    return std::make_pair(sh, cuda::choose_attention(info_, sh));
  };
  size_t ws = 0;
  cuda::AttnPlan dense_plan, tq_plan;
  cuda::TqCodecDev kc, vc;
  auto need = [&](cuda::AttnShape sh, const cuda::AttnPlan& plan) {
    sh.max_len = int64_t(1) << 40;
    sh.tail_rows = 0;
    const cuda::AttnPlan most = cuda::choose_attention(info_, sh);
    const cuda::AttnPlan& big = most.n_split > plan.n_split ? most : plan;
    return cuda::decode_attention_workspace(big, int(sh.batch), int(n_head), int(sh.head_dim));
  };
  if (!dense.empty()) {
    auto [sh, plan] = plan_for(*d0, int64_t(dense.size()), dense_max, false, false);
    dense_plan = plan;
    if (plan.kernel == cuda::AttnKernel::DecodeSplitK) {
      ws = std::max(ws, need(sh, plan));
    } else {  // no split-K kernel for this shape: per sequence
      for (const DecodeSeq& s : seqs)
        if (s.kv.k && s.kv.dtype == DType::BF16 && s.kv.n_head_kv == d0->kv.n_head_kv &&
            s.kv.head_dim == d0->kv.head_dim)
          rest.push_back(s);
      dense.clear();
    }
  }
  if (!tqd.empty()) {
    kc = tq_codec(*t0->tq.k_codec);
    vc = tq_codec(*t0->tq.v_codec);
    auto [sh, plan] = plan_for(*t0, int64_t(tqd.size()), tq_max, true, tq_tail);
    tq_plan = plan;
    if (plan.kernel != cuda::AttnKernel::DecodeSplitK)
      fail("CUDA decode_attention_batch: no TurboQuant decode kernel for this shape ({})",
           cuda::attn_kernel_name(plan.kernel));
    ws = std::max(ws, need(sh, plan));
  }
  if (!dense.empty() || !tqd.empty()) {
    batch_grow(int64_t(std::max(dense.size(), tqd.size())), ws);
    float* workspace = static_cast<float*>(batch_->ws);
    // The launches run one after the other on the stream: they share the workspace.
    for (int which = 0; which < 2; ++which) {
      const std::vector<cuda::DecodeSeqDesc>& group = which ? tqd : dense;
      if (group.empty()) continue;
      const DecodeSeq& s0 = which ? *t0 : *d0;
      cuda::DecodeAttnArgs a;
      a.q = q;
      a.out = out;
      a.format = which ? cuda::KvFormat::TurboQuant : cuda::KvFormat::BF16;
      a.batch = int(group.size());
      a.n_head = int(n_head);
      a.n_head_kv = int(which ? s0.tq.n_head_kv : s0.kv.n_head_kv);
      a.head_dim = int(which ? s0.tq.head_dim : s0.kv.head_dim);
      a.scale = scale;
      a.workspace = workspace;
      a.seqs = batch_upload(group.data(), int64_t(group.size()), which);
      if (which) {
        a.k_codec = &kc;
        a.v_codec = &vc;
        a.seqs_tail = tq_tail;
      }
      cuda::decode_attention(a, which ? tq_plan : dense_plan, stream_);
    }
  }
  if (!rest.empty()) Backend::decode_attention_batch(rest, q, out, n_head, scale);
}

}  // namespace tq
