// DeviceCompressedCache's bookkeeping on the CPU: a test backend implements the TurboQuant
// device contract (tq_write / tq_attention, backend.h) with the CPU reference codec and
// CompressedAttention, so the device cache (window sliding and compaction, trims, block bytes,
// conversion through backend memory) must reproduce the CPU CompressedCache exactly.
#include <gtest/gtest.h>

#include <cstring>

#include "backend/cpu/cpu_backend.h"
#include "common/random.h"
#include "core/thread_pool.h"
#include "kv/compressed_cache.h"
#include "kv/device_compressed_cache.h"
#include "kv/kv_cache.h"
#include "kv/kv_convert.h"
#include "quant/compressed_attention.h"

namespace tq {
namespace {

using test::randn;

const LayerShape kShape{8, 2, 128};

// The CPU backend plus the TurboQuant device contract, done with the CPU reference code.
class ReferenceTqBackend final : public Backend {
 public:
  const char* name() const override { return "reference-tq"; }
  void* alloc(size_t bytes) override { return cpu_->alloc(bytes); }
  void release(void* p, size_t bytes) override { cpu_->release(p, bytes); }
  void upload(void* d, const void* s, size_t n) override { cpu_->upload(d, s, n); }
  void download(void* d, const void* s, size_t n) override { cpu_->download(d, s, n); }
  void copy(void* d, const void* s, size_t n) override { cpu_->copy(d, s, n); }
  size_t allocated_bytes() const override { return cpu_->allocated_bytes(); }
  Weight load_weight(DType s, const void* h, int64_t r, int64_t c) override {
    return cpu_->load_weight(s, h, r, c);
  }
  void embedding(std::span<const int32_t> ids, const Weight& t, float* out) override {
    cpu_->embedding(ids, t, out);
  }
  void rms_norm(const float* x, int64_t r, const Weight& w, float e, float* o) override {
    cpu_->rms_norm(x, r, w, e, o);
  }
  void linear(const float* x, int64_t T, const Weight& w, float* o, const Weight* b) override {
    cpu_->linear(x, T, w, o, b);
  }
  void rope(float* x, int64_t T, int64_t nh, int64_t d, int64_t p0,
            std::span<const float> f) override {
    cpu_->rope(x, T, nh, d, p0, f);
  }
  void swiglu(const float* g, const float* u, float* o, int64_t n) override {
    cpu_->swiglu(g, u, o, n);
  }
  void add(float* x, const float* y, int64_t n) override { cpu_->add(x, y, n); }
  void attention(const AttentionArgs& a) override { cpu_->attention(a); }

  bool device_turboquant(const quant::VectorCodec& k, const quant::VectorCodec& v) const override {
    return k.head_dim() == 128 && !k.config().norm.fp32 && !v.config().norm.fp32;
  }
  void tq_write(const TqStore& dst, int64_t at, const float* k, const float* v, int64_t T,
                int64_t ts, int64_t hs, const TqRows* rows, int64_t rows_at) override {
    ++writes;
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < dst.n_head_kv; ++h) {
        const int64_t i = h * dst.cap + at + t;
        encode(*dst.k_codec, k + t * ts + h * hs, dst.k_codes, dst.k_scale, i);
        encode(*dst.v_codec, v + t * ts + h * hs, dst.v_codes, dst.v_scale, i);
        if (rows) {
          const int64_t r = (h * rows->cap + rows_at + t) * dst.head_dim;
          dst.k_codec->rotation().apply(k + t * ts + h * hs, rows->k + r);
          dst.v_codec->rotation().apply(v + t * ts + h * hs, rows->v + r);
        }
      }
  }
  void tq_attention(const TqAttentionArgs& in) override {
    // Fresh rows (a prefill chunk's, unwritten): the base class's long way into host rows.
    std::vector<float> rows;
    if (in.fresh.k) {
      ++fresh_chunks;
      rows.resize(size_t(2 * in.store.n_head_kv * in.n_exact * in.store.head_dim));
    }
    const TqAttentionArgs a = in.fresh.k ? write_fresh_rows(in, rows.data()) : in;
    const TqStore& s = a.store;
    ASSERT_LE(a.q_pos0 + a.T, a.n_rec + a.n_exact);
    // Records back in VectorCodec's layout (codes, then the scale), [n_head_kv][n_rec].
    std::vector<uint8_t> kr, vr;
    pack(*s.k_codec, s.k_codes, s.k_scale, s, a.n_rec, kr);
    pack(*s.v_codec, s.v_codes, s.v_scale, s, a.n_rec, vr);
    quant::KvBlock b[2];
    b[0].k = kr.data();
    b[0].v = vr.data();
    b[0].n_token = a.n_rec;
    b[0].k_head_stride = a.n_rec * int64_t(s.k_codec->bytes_per_vector());
    b[0].v_head_stride = a.n_rec * int64_t(s.v_codec->bytes_per_vector());
    b[1].k_rot = a.rows.k;
    b[1].v_rot = a.rows.v;
    b[1].n_token = a.n_exact;
    b[1].pos0 = a.n_rec;
    b[1].k_head_stride = b[1].v_head_stride = a.rows.cap * s.head_dim;
    std::vector<int64_t> pos(size_t(a.T));
    for (int64_t t = 0; t < a.T; ++t) pos[size_t(t)] = a.q_pos0 + t;
    quant::AttentionParams p;
    p.n_q_head = int(a.n_head);
    p.n_kv_head = int(s.n_head_kv);
    p.scale = a.scale;
    quant::CompressedAttention attn(*s.k_codec, *s.v_codec);
    attn.run(a.q, pos.data(), a.T, b, a.n_exact > 0 ? 2 : 1, p, a.out, &ThreadPool::global());
  }
  int64_t writes = 0, fresh_chunks = 0;

 private:
  static void encode(const quant::VectorCodec& c, const float* x, uint8_t* codes,
                     uint16_t* scales, int64_t i) {
    std::vector<uint8_t> rec(c.bytes_per_vector());
    c.encode(x, rec.data());
    std::memcpy(codes + i * int64_t(c.code_bytes()), rec.data(), c.code_bytes());
    std::memcpy(scales + i, rec.data() + c.code_bytes(), 2);
  }
  static void pack(const quant::VectorCodec& c, const uint8_t* codes, const uint16_t* scales,
                   const TqStore& s, int64_t n, std::vector<uint8_t>& out) {
    const size_t cb = c.code_bytes();
    out.resize(size_t(s.n_head_kv * n) * (cb + 2));
    for (int64_t h = 0; h < s.n_head_kv; ++h)
      for (int64_t t = 0; t < n; ++t) {
        uint8_t* r = out.data() + size_t(h * n + t) * (cb + 2);
        std::memcpy(r, codes + (h * s.cap + t) * int64_t(cb), cb);
        std::memcpy(r + cb, scales + h * s.cap + t, 2);
      }
  }
  std::unique_ptr<Backend> cpu_ = make_cpu_backend();
};

quant::TqFormat format(uint32_t seed) {
  quant::TqFormat f;
  f.head_dim = 128;
  f.key_seed = 1000 + seed;
  f.value_seed = 2000 + seed;
  f.per_layer_seeds = true;
  f.norm.corrected = seed % 2 == 0;
  return f;
}

std::vector<uint8_t> records(const LayerCache& l) {
  std::vector<uint8_t> out;
  for (int64_t h = 0; h < kShape.n_head_kv; ++h)
    for (int64_t t = 0; t < l.n_tokens(); ++t) {
      if (auto* d = dynamic_cast<const DeviceCompressedCache*>(&l)) {
        auto k = d->key_record(h, t), v = d->value_record(h, t);
        out.insert(out.end(), k.begin(), k.end());
        out.insert(out.end(), v.begin(), v.end());
      } else {
        auto& c = dynamic_cast<const CompressedCache&>(l);
        out.insert(out.end(), c.key_record(h, t), c.key_record(h, t) + 66);
        out.insert(out.end(), c.value_record(h, t), c.value_record(h, t) + 66);
      }
    }
  return out;
}

// Runs the same steps on both caches; outputs and records must agree exactly.
void same_steps(Backend& be, LayerCache& dev, LayerCache& ref, const std::vector<int64_t>& steps,
                uint32_t seed) {
  for (int64_t n : steps) {
    auto q = randn(size_t(n * kShape.n_head * 128), seed++);
    auto k = randn(size_t(n * kShape.n_head_kv * 128), seed++, 2.0f);
    auto v = randn(k.size(), seed++);
    std::vector<float> got(q.size(), NAN), want(q.size());
    dev.append_and_attend(be, q.data(), k.data(), v.data(), n, 0.1f, got.data());
    ref.append_and_attend(be, q.data(), k.data(), v.data(), n, 0.1f, want.data());
    ASSERT_EQ(got, want) << "step of " << n << " tokens at " << ref.n_tokens() - n;
  }
  EXPECT_EQ(records(dev), records(ref));
}

TEST(DeviceCompressedCache, MatchesTheCpuCacheOnAReferenceBackend) {
  ReferenceTqBackend be;
  uint32_t seed = 1;
  int64_t chunks_in_a_window = 0;  // prefill chunks (T > 1) of caches with a window
  for (int64_t recent : {0, 16, 128})
    for (int64_t T : {1, 7, 64, 300})
      for (int64_t prefix : {0, 200}) {
        if (recent > 0) chunks_in_a_window += (prefix > 1) + (T > 1);
        const quant::TqFormat f = format(seed);
        std::unique_ptr<LayerCache> dev = make_compressed_cache(be, kShape, f, 3, recent);
        ASSERT_NE(dynamic_cast<DeviceCompressedCache*>(dev.get()), nullptr);
        CompressedCache ref(kShape, f, 3, recent);
        std::vector<int64_t> steps;
        if (prefix) steps.push_back(prefix);
        steps.push_back(T);
        for (int i = 0; i < 150; ++i) steps.push_back(1);  // rolls a 16-row window's buffer
        same_steps(be, *dev, ref, steps, seed += 1000);
        EXPECT_NE(dev->format_id(), ref.format_id());
      }
  // Those chunks hand their rows to the backend unwritten (TqFreshRows); no other call does.
  EXPECT_EQ(be.fresh_chunks, chunks_in_a_window);
}

TEST(DeviceCompressedCache, DecodeStepsAllocateNothing) {
  ReferenceTqBackend be;
  auto dev = std::make_unique<DeviceCompressedCache>(be, kShape, format(7), 0, 16);
  CompressedCache ref(kShape, format(7), 0, 16);
  dev->reserve(1000);
  same_steps(be, *dev, ref, {300}, 5);
  const size_t bytes = be.allocated_bytes() - 0;
  const size_t cache = dev->bytes();
  same_steps(be, *dev, ref, std::vector<int64_t>(200, 1), 77);
  EXPECT_EQ(dev->bytes(), cache);
  EXPECT_LE(be.allocated_bytes(), bytes);
}

TEST(DeviceCompressedCache, BlocksRoundTripAndRefuseMisfits) {
  ReferenceTqBackend be;
  for (int64_t recent : {0, 128}) {
    auto a = std::make_unique<DeviceCompressedCache>(be, kShape, format(3), 1, recent);
    auto b = std::make_unique<DeviceCompressedCache>(be, kShape, format(3), 1, recent);
    CompressedCache ref(kShape, format(3), 1, recent);
    same_steps(be, *a, ref, {150}, 11);
    std::vector<uint8_t> first, second;
    a->save_block(be, 0, first);
    same_steps(be, *a, ref, {90, 1}, 21);
    a->save_block(be, 150, second);
    EXPECT_FALSE(b->load_block(be, 0, 149, first));
    EXPECT_FALSE(b->load_block(be, 150, 91, second));  // b holds 0 tokens, not 150
    ASSERT_TRUE(b->load_block(be, 0, 150, first));
    ASSERT_TRUE(b->load_block(be, 150, 91, second));
    EXPECT_EQ(b->held(), a->held());
    EXPECT_EQ(records(*b), records(*a));
    // b now continues exactly as a does.
    same_steps(be, *b, *a, {5, 1, 1}, 31);
  }
}

TEST(DeviceCompressedCache, ConversionThroughBackendMemoryMatchesTheCpuCache) {
  ReferenceTqBackend be;
  auto cpu = make_cpu_backend();
  const int64_t n = 700;
  auto k = randn(size_t(n * kShape.n_head_kv * 128), 1), v = randn(k.size(), 2);
  auto q = randn(size_t(n * kShape.n_head * 128), 3);
  std::vector<float> out(q.size());
  for (int64_t recent : {0, 128}) {
    KvCache a, b;
    a.layers.push_back(make_dense_cache(be, kShape));
    b.layers.push_back(make_dense_cache(*cpu, kShape));
    a.layers[0]->append_and_attend(be, q.data(), k.data(), v.data(), n, 0.1f, out.data());
    b.layers[0]->append_and_attend(*cpu, q.data(), k.data(), v.data(), n, 0.1f, out.data());
    KvPolicy p;
    p.mode = KvPolicy::Mode::TurboQuant;
    p.format = format(9);
    p.slice_tokens = 256;
    p.recent_exact = recent;
    const int64_t writes = be.writes;
    const ConversionStats sa = convert_cache(be, a, kShape, p);
    convert_cache(*cpu, b, kShape, p);
    EXPECT_EQ(sa.slices, 3);
    EXPECT_EQ(be.writes - writes, recent ? 6 : 3);  // slices of 256: records, then the window
    ASSERT_NE(dynamic_cast<DeviceCompressedCache*>(a.layers[0].get()), nullptr);
    EXPECT_GE(sa.peak_bytes, a.layers[0]->bytes() + 2 * size_t(256 * 2 * 128) * 4);
    // Both converted layers have room for the decode that follows: their first
    // kConvertHeadroom one-token steps allocate nothing (sized to the prompt alone, the first
    // step regrew the records: on the H200, 30 ms a 36K request).
    const size_t bytes = be.allocated_bytes(), cache = a.layers[0]->bytes();
    const size_t cpu_cache = b.layers[0]->bytes();
    same_steps(be, *a.layers[0], *b.layers[0], std::vector<int64_t>(size_t(kConvertHeadroom), 1), 41);
    EXPECT_EQ(a.layers[0]->bytes(), cache);
    EXPECT_EQ(b.layers[0]->bytes(), cpu_cache);
    EXPECT_LE(be.allocated_bytes(), bytes);
  }
}

}  // namespace
}  // namespace tq
