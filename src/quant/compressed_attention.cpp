// CompressedAttention implementation: work split (kv head x query chunk x token split), the
// per-item online-softmax loop over packed K/V records, and the split-K merge.
#include "quant/compressed_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "quant/vec_ops.h"

namespace tq::quant {

using simd::accumulate_rows;
using simd::axpy;
using simd::dot;
using simd::scal;

namespace {

constexpr int kTile = 32;            // tokens per online-softmax rescale
constexpr int kMaxChunkQueries = 32;  // query vectors per work item (bounds the score tile)
constexpr int64_t kNoLow = -(int64_t(1) << 62), kNoHigh = int64_t(1) << 62;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

}  // namespace

struct CompressedAttention::Item {
  int kv_head = 0;
  int64_t q_begin = 0, q_count = 0;      // query positions [q_begin, q_begin + q_count)
  int64_t tok_begin = 0, tok_end = 0;    // token range in the concatenation of the blocks
  float* m = nullptr;                    // [Qc] running max of scores
  float* l = nullptr;                    // [Qc] running softmax denominators
  float* acc = nullptr;                  // [Qc][d] sum p * s_v * c[idx] (rotated V domain)
};

CompressedAttention::CompressedAttention(const VectorCodec& key_codec,
                                         const VectorCodec& value_codec)
    : kc_(key_codec), vc_(value_codec) {
  if (kc_.head_dim() != vc_.head_dim())
    fail("compressed attention: key head_dim {} != value head_dim {}", kc_.head_dim(),
         vc_.head_dim());
}

void CompressedAttention::run_item(const Item& it, const float* q_rot, const int64_t* q_pos,
                                   const KvBlock* blocks, int n_block, const AttentionParams& p,
                                   float* scratch) const {
  const int d = kc_.head_dim();
  const int G = p.n_q_head / p.n_kv_head;
  const int nq = int(it.q_count * G);
  const size_t kbpv = kc_.bytes_per_vector(), vbpv = vc_.bytes_per_vector();
  // A tile of centroid values c[idx] (rotated domain, unscaled): 2 x 16 KB at d=128. This is
  // the CPU stand-in for a GPU kernel's registers/shared memory, never a dequantized K or V.
  float* ktile = scratch;                    // [kTile][d]
  float* vtile = ktile + kTile * d;          // [kTile][d]
  float* kscale = vtile + kTile * d;         // [kTile]
  float* vscale = kscale + kTile;            // [kTile]
  float* sc = vscale + kTile;                // [nq][kTile] scores, then p, then p * s_v
  std::vector<int64_t> lo(nq), hi(nq);  // visible key positions [lo, hi] per query
  int64_t ulo = kNoHigh, uhi = kNoLow;
  for (int qi = 0; qi < nq; ++qi) {
    int64_t qp = q_pos[it.q_begin + qi / G];
    lo[qi] = p.window > 0 ? qp - p.window + 1 : kNoLow;
    hi[qi] = p.causal ? qp : kNoHigh;
    ulo = std::min(ulo, lo[qi]);
    uhi = std::max(uhi, hi[qi]);
    it.m[qi] = kNegInf;
    it.l[qi] = 0.0f;
  }
  std::fill(it.acc, it.acc + size_t(nq) * d, 0.0f);

  int64_t voff = 0;
  for (int b = 0; b < n_block; ++b) {
    const KvBlock& blk = blocks[b];
    const int64_t bstart = voff;
    voff += blk.n_token;
    int64_t t0 = std::max(it.tok_begin, bstart) - bstart;
    int64_t t1 = std::min(it.tok_end, voff) - bstart;
    // Tokens no query of this item can see are never read.
    t0 = std::max(t0, ulo - blk.pos0);
    t1 = std::min(t1, uhi - blk.pos0 + 1);
    if (t0 >= t1) continue;
    const bool exact = blk.exact();
    const int64_t krow = exact ? d : int64_t(kbpv), vrow = exact ? d : int64_t(vbpv);
    const int64_t khs = blk.k_head_stride >= 0 ? blk.k_head_stride : blk.n_token * krow;
    const int64_t vhs = blk.v_head_stride >= 0 ? blk.v_head_stride : blk.n_token * vrow;
    const uint8_t* kbase = exact ? nullptr : blk.k + it.kv_head * khs;
    const uint8_t* vbase = exact ? nullptr : blk.v + it.kv_head * vhs;
    const float* kexact = exact ? blk.k_rot + it.kv_head * khs : nullptr;
    const float* vexact = exact ? blk.v_rot + it.kv_head * vhs : nullptr;

    for (int64_t ts = t0; ts < t1; ts += kTile) {
      const int nt = int(std::min<int64_t>(kTile, t1 - ts));
      // Scores: decode each K token once, dot it with every query of the group.
      for (int j = 0; j < nt; ++j) {
        if (exact) {
          kscale[j] = 1.0f;
          std::memcpy(ktile + size_t(j) * d, kexact + (ts + j) * d, size_t(d) * sizeof(float));
          continue;
        }
        const uint8_t* rec = kbase + (ts + j) * int64_t(kbpv);
        kscale[j] = kc_.scale(rec);
        kc_.centroids(rec, ktile + size_t(j) * d);
      }
      for (int qi = 0; qi < nq; ++qi) {
        const float* qv = q_rot + size_t(qi) * d;
        for (int j = 0; j < nt; ++j) {
          const int64_t kp = blk.pos0 + ts + j;
          sc[qi * kTile + j] = (kp >= lo[qi] && kp <= hi[qi])
                                   ? kscale[j] * dot(qv, ktile + size_t(j) * d, d)
                                   : kNegInf;
        }
      }
      // Online softmax: one rescale of the accumulators per tile.
      for (int qi = 0; qi < nq; ++qi) {
        float* s = sc + qi * kTile;
        float mt = kNegInf;
        for (int j = 0; j < nt; ++j) mt = std::max(mt, s[j]);
        if (mt == kNegInf) {
          for (int j = 0; j < nt; ++j) s[j] = 0.0f;
          continue;
        }
        const float mn = std::max(it.m[qi], mt);
        if (it.m[qi] != mn) {
          const float corr = std::exp(it.m[qi] - mn);  // 0 when the old max was -inf
          it.l[qi] *= corr;
          scal(corr, it.acc + size_t(qi) * d, d);
          it.m[qi] = mn;
        }
        float sum = 0.0f;
        for (int j = 0; j < nt; ++j) {
          s[j] = std::exp(s[j] - mn);
          sum += s[j];
        }
        it.l[qi] += sum;
      }
      // Values: decode each V token some query sees once, then accumulate the tile per query.
      for (int j = 0; j < nt; ++j) {
        bool used = false;
        for (int qi = 0; qi < nq && !used; ++qi) used = sc[qi * kTile + j] != 0.0f;
        if (!used) {
          vscale[j] = 0.0f;
          continue;
        }
        if (exact) {
          vscale[j] = 1.0f;
          std::memcpy(vtile + size_t(j) * d, vexact + (ts + j) * d, size_t(d) * sizeof(float));
          continue;
        }
        const uint8_t* rec = vbase + (ts + j) * int64_t(vbpv);
        vscale[j] = vc_.scale(rec);
        vc_.centroids(rec, vtile + size_t(j) * d);
      }
      for (int qi = 0; qi < nq; ++qi) {
        float* w = sc + qi * kTile;
        // p == 0 stays 0 even against an inf/NaN scale: masked tokens are never touched.
        for (int j = 0; j < nt; ++j) w[j] = w[j] != 0.0f ? w[j] * vscale[j] : 0.0f;
        accumulate_rows(w, vtile, nt, d, it.acc + size_t(qi) * d);
      }
    }
  }
}

void CompressedAttention::run(const float* q, const int64_t* q_pos, int64_t n_q,
                              const KvBlock* blocks, int n_block, const AttentionParams& p,
                              float* out, ThreadPool* pool) const {
  const int d = kc_.head_dim();
  if (p.n_kv_head < 1 || p.n_q_head < 1 || p.n_q_head % p.n_kv_head != 0)
    fail("compressed attention: n_q_head {} is not a multiple of n_kv_head {}", p.n_q_head,
         p.n_kv_head);
  if (n_q <= 0) return;
  const int G = p.n_q_head / p.n_kv_head;
  const float scale = p.scale != 0.0f ? p.scale : 1.0f / std::sqrt(float(d));

  // Rotated, pre-scaled queries, grouped per kv head: [n_kv_head][n_q][G][d].
  std::vector<float> q_rot(size_t(p.n_kv_head) * n_q * G * d);
  for (int64_t t = 0; t < n_q; ++t)
    for (int h = 0; h < p.n_q_head; ++h) {
      const int hk = h / G, g = h % G;
      float* dst = &q_rot[((size_t(hk) * n_q + t) * G + g) * d];
      kc_.rotation().apply(q + (size_t(t) * p.n_q_head + h) * d, dst);
      for (int i = 0; i < d; ++i) dst[i] *= scale;
    }

  int64_t n_token = 0;
  for (int b = 0; b < n_block; ++b) n_token += blocks[b].n_token;
  const int64_t pos_per_chunk = std::max(1, kMaxChunkQueries / G);
  const int64_t n_qchunk = (n_q + pos_per_chunk - 1) / pos_per_chunk;
  const int64_t base_items = p.n_kv_head * n_qchunk;
  // Split-K only when heads x query chunks cannot keep the pool busy (decode), and only into
  // pieces of >= 512 tokens so that the merge stays negligible.
  const int threads = pool ? pool->size() : 1;
  int64_t n_split = 1;
  if (threads > 1 && base_items < 2 * threads)
    n_split = std::clamp<int64_t>((2 * threads + base_items - 1) / base_items, 1,
                                  std::max<int64_t>(1, n_token / 512));
  const int max_nq = int(std::min<int64_t>(pos_per_chunk, n_q) * G);
  const size_t scratch_floats = size_t(2 * kTile * d + 2 * kTile + max_nq * kTile);
  const size_t state_floats = size_t(max_nq) * (d + 2);

  auto item_at = [&](int64_t hk, int64_t qc, int64_t sp, float* state) {
    Item it;
    it.kv_head = int(hk);
    it.q_begin = qc * pos_per_chunk;
    it.q_count = std::min(pos_per_chunk, n_q - it.q_begin);
    it.tok_begin = n_token * sp / n_split;
    it.tok_end = n_token * (sp + 1) / n_split;
    it.m = state;
    it.l = state + max_nq;
    it.acc = state + 2 * max_nq;
    return it;
  };
  // acc / l, back from the rotated V domain, into out; zero where nothing was visible.
  auto finalize = [&](const Item& it) {
    std::vector<float> tmp(d);
    for (int qi = 0; qi < int(it.q_count * G); ++qi) {
      const int64_t t = it.q_begin + qi / G;
      const int h = it.kv_head * G + qi % G;
      float* o = out + (size_t(t) * p.n_q_head + h) * d;
      if (!(it.l[qi] > 0.0f)) {
        std::fill(o, o + d, 0.0f);
        continue;
      }
      const float inv = 1.0f / it.l[qi];
      for (int i = 0; i < d; ++i) tmp[i] = it.acc[size_t(qi) * d + i] * inv;
      vc_.rotation().apply_t(tmp.data(), o);
    }
  };
  auto q_rot_of = [&](const Item& it) {
    return &q_rot[((size_t(it.kv_head) * n_q + it.q_begin) * G) * d];
  };

  const int64_t n_items = base_items * n_split;
  // Split-K keeps every partial state until the merge; otherwise each item owns its state only
  // while it runs.
  std::vector<float> states(n_split > 1 ? size_t(n_items) * state_floats : 0);
  auto body = [&](int i) {
    const int64_t sp = i % n_split, qc = (i / n_split) % n_qchunk, hk = i / n_split / n_qchunk;
    std::vector<float> scratch(scratch_floats + (n_split > 1 ? 0 : state_floats));
    float* state = n_split > 1 ? &states[size_t(i) * state_floats] : scratch.data() + scratch_floats;
    Item it = item_at(hk, qc, sp, state);
    run_item(it, q_rot_of(it), q_pos, blocks, n_block, p, scratch.data());
    if (n_split == 1) finalize(it);
  };
  if (pool && n_items > 1)
    pool->parallel_for(int(n_items), body);
  else
    for (int64_t i = 0; i < n_items; ++i) body(int(i));
  if (n_split == 1) return;

  // Merge the token splits of each (kv head, query chunk) into split 0, then finalize.
  for (int64_t base = 0; base < base_items; ++base) {
    float* s0 = &states[size_t(base * n_split) * state_floats];
    Item it0 = item_at(base / n_qchunk, base % n_qchunk, 0, s0);
    const int nq = int(it0.q_count * G);
    for (int qi = 0; qi < nq; ++qi) {
      float mx = kNegInf;
      for (int64_t sp = 0; sp < n_split; ++sp)
        mx = std::max(mx, states[size_t(base * n_split + sp) * state_floats + qi]);
      if (mx == kNegInf) continue;  // nothing visible: l stays 0
      float l = 0.0f;
      std::vector<float> acc(d, 0.0f);
      for (int64_t sp = 0; sp < n_split; ++sp) {
        float* s = &states[size_t(base * n_split + sp) * state_floats];
        if (s[qi] == kNegInf) continue;
        const float w = std::exp(s[qi] - mx);
        l += w * s[max_nq + qi];
        axpy(w, s + 2 * max_nq + size_t(qi) * d, acc.data(), d);
      }
      it0.m[qi] = mx;
      it0.l[qi] = l;
      std::copy(acc.begin(), acc.end(), it0.acc + size_t(qi) * d);
    }
    finalize(it0);
  }
}

}  // namespace tq::quant
