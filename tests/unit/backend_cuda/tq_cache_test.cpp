// TurboQuant caches in device memory (kv/device_compressed_cache.h on the CUDA backend) against
// the CPU CompressedCache on the same random K/V/q: record bytes, attention outputs of decode
// steps and prefill chunks (with and without a recent-exact window), block save/load, and the
// dense -> compressed conversion on the device. Outputs are poisoned before every call.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "gpu_test_util.h"
#include "kv/compressed_cache.h"
#include "kv/device_compressed_cache.h"
#include "kv/kv_cache.h"
#include "kv/kv_convert.h"

namespace tq::test {
namespace {

const LayerShape kShape{8, 2, 128};  // GQA groups of 4
constexpr int kLayer = 3;

quant::TqFormat random_format(bool corrected) {
  quant::TqFormat f;
  f.head_dim = 128;
  f.key_seed = rng()();
  f.value_seed = rng()();
  f.per_layer_seeds = true;
  f.norm.corrected = corrected;
  return f;
}

std::unique_ptr<DeviceCompressedCache> device_cache(Backend& be, const quant::TqFormat& f,
                                                    int64_t recent) {
  std::unique_ptr<LayerCache> l = make_compressed_cache(be, kShape, f, kLayer, recent);
  auto* d = dynamic_cast<DeviceCompressedCache*>(l.get());
  if (!d) return nullptr;
  l.release();
  return std::unique_ptr<DeviceCompressedCache>(d);
}

// Differences between the device and CPU records: code nibbles (a float tie on a Lloyd-Max
// boundary may round either way; the operations are the same, so ties are rare) and scales
// (more than one fp16 ulp apart).
struct RecordDiff {
  int64_t nibbles = 0, scales = 0, total_nibbles = 0;
};
RecordDiff compare_records(const DeviceCompressedCache& dev, const CompressedCache& cpu) {
  RecordDiff r;
  const size_t cb = kShape.head_dim / 2;
  for (int key = 0; key < 2; ++key)
    for (int64_t h = 0; h < kShape.n_head_kv; ++h)
      for (int64_t t = 0; t < cpu.n_tokens(); ++t) {
        std::vector<uint8_t> got = key ? dev.key_record(h, t) : dev.value_record(h, t);
        const uint8_t* want = key ? cpu.key_record(h, t) : cpu.value_record(h, t);
        for (size_t i = 0; i < cb; ++i) {
          r.nibbles += (got[i] & 15) != (want[i] & 15);
          r.nibbles += (got[i] >> 4) != (want[i] >> 4);
        }
        r.total_nibbles += 2 * int64_t(cb);
        const int gs = got[cb] | got[cb + 1] << 8, ws = want[cb] | want[cb + 1] << 8;
        r.scales += std::abs(gs - ws) > 1;
      }
  return r;
}

struct Step {
  std::vector<float> q, k, v;
  int64_t T;
};
Step random_step(int64_t T) {
  Step s;
  s.T = T;
  s.q = randn(size_t(T * kShape.n_head * kShape.head_dim), 1.0f);
  s.k = randn(size_t(T * kShape.n_head_kv * kShape.head_dim), 2.0f);
  s.v = randn(size_t(T * kShape.n_head_kv * kShape.head_dim), 1.0f);
  return s;
}

// Runs one step on the device cache (outputs poisoned) and returns its output.
std::vector<float> device_step(Backend& be, LayerCache& dev, const Step& s, float scale) {
  DeviceBuffer q = to_dev(be, s.q), k = to_dev(be, s.k), v = to_dev(be, s.v);
  DeviceBuffer out = poisoned(be, s.q.size());
  dev.append_and_attend(be, q.f32(), k.f32(), v.f32(), s.T, scale, out.f32());
  return from_dev(be, out, s.q.size());
}

// The model's decode step at batch 1 instead: decode_reserve, the fused RoPE + append with the
// record deferred (zero frequencies: RoPE leaves q and k as they are; no norms), the attention,
// then finish_appends() writes the record.
std::vector<float> device_step_deferred(Backend& be, LayerCache& dev, const Step& s, float scale,
                                        int64_t pos) {
  DeviceBuffer q = to_dev(be, s.q), k = to_dev(be, s.k), v = to_dev(be, s.v);
  DeviceBuffer out = poisoned(be, s.q.size());
  DecodeSeq view;
  KvAppend app;
  if (!dev.decode_reserve(be, app, view)) return {};
  app.defer_record = true;
  const std::vector<float> no_rope(size_t(kShape.head_dim / 2), 0.0f);
  const std::vector<int64_t> positions{pos};
  be.qk_norm_rope_append(q.f32(), k.f32(), v.f32(), 1, kShape.n_head, kShape.n_head_kv,
                         kShape.head_dim, nullptr, nullptr, 1e-6f, positions, no_rope, {&app, 1});
  be.decode_attention_batch({&view, 1}, q.f32(), out.f32(), kShape.n_head, scale);
  dev.finish_decode(be);
  be.finish_appends();
  return from_dev(be, out, s.q.size());
}

double rel(const std::vector<float>& got, const std::vector<float>& want) {
  return rel_err(got, std::vector<double>(want.begin(), want.end()));
}

// A prefix chunk, then a chunk of T tokens, then three decode steps: each output against the CPU
// cache's, then the records byte by byte.
void run_case(int64_t recent, int64_t prefix, int64_t T, bool corrected) {
  auto be = make_cuda_backend();
  Backend* cpu = be.get();  // CompressedCache runs on host memory and never calls its backend
  const quant::TqFormat f = random_format(corrected);
  auto dev = device_cache(*be, f, recent);
  ASSERT_TRUE(dev) << "the CUDA backend should keep this format on the device";
  CompressedCache ref(kShape, f, kLayer, recent);
  const float scale = 1.0f / std::sqrt(float(kShape.head_dim));
  std::vector<int64_t> steps;
  if (prefix > 0) steps.push_back(prefix);
  steps.push_back(T);
  for (int i = 0; i < 3; ++i) steps.push_back(1);
  double worst_chunk = 0, worst_decode = 0;
  for (int64_t n : steps) {
    const Step s = random_step(n);
    std::vector<float> want(s.q.size());
    ref.append_and_attend(*cpu, s.q.data(), s.k.data(), s.v.data(), n, scale, want.data());
    std::vector<float> got = device_step(*be, *dev, s, scale);
    const double e = rel(got, want);
    (n == 1 ? worst_decode : worst_chunk) = std::max(n == 1 ? worst_decode : worst_chunk, e);
    // bf16-level: the exact rows of a prefill chunk run as bf16, records decode in fp16.
    EXPECT_LT(e, 1e-2) << "recent " << recent << " prefix " << prefix << " T " << T
                                    << " step of " << n << " at " << ref.n_tokens() - n;
    ASSERT_EQ(dev->n_tokens(), ref.n_tokens());
  }
  EXPECT_EQ(dev->held(), std::min(recent, ref.n_tokens()));
  const RecordDiff d = compare_records(*dev, ref);
  std::printf("[tq-cache] recent %3lld prefix %3lld T %3lld: rel err chunks %.2e decode %.2e, "
              "nibbles differing %lld / %lld, scales %lld\n",
              (long long)recent, (long long)prefix, (long long)T, worst_chunk, worst_decode,
              (long long)d.nibbles, (long long)d.total_nibbles, (long long)d.scales);
  EXPECT_LE(d.nibbles, d.total_nibbles / 10000) << "code nibbles differ";
  EXPECT_EQ(d.scales, 0) << "scales differ by more than one fp16 ulp";
}

TEST(CudaTqCache, DecodeAndPrefillMatchTheCpuCache) {
  TQ_REQUIRE_GPU();
  for (int64_t recent : {0, 128})
    for (int64_t T : {1, 7, 64, 300}) {
      run_case(recent, 0, T, true);
      run_case(recent, 200, T, recent == 0);
    }
}

// 300 steps through a 16-row window: every step's record is read 16 steps later. Also as the
// model steps (the record deferred past the attention, written with it or after it).
TEST(CudaTqCache, LongDecodeRollsTheWindow) {
  TQ_REQUIRE_GPU();
  auto be = make_cuda_backend();
  Backend* cpu = be.get();  // CompressedCache runs on host memory and never calls its backend
  for (bool deferred : {false, true}) {
    SCOPED_TRACE(deferred ? "deferred records" : "appends");
    const quant::TqFormat f = random_format(true);
    const int64_t recent = 16;  // the window buffer (2R + 64 rows) wraps several times
    auto dev = device_cache(*be, f, recent);
    ASSERT_TRUE(dev);
    CompressedCache ref(kShape, f, kLayer, recent);
    const float scale = 0.09f;
    double worst = 0;
    auto step = [&](int64_t n) {
      const Step s = random_step(n);
      std::vector<float> want(s.q.size());
      const int64_t pos = ref.n_tokens();
      ref.append_and_attend(*cpu, s.q.data(), s.k.data(), s.v.data(), n, scale, want.data());
      const std::vector<float> got = deferred && n == 1
                                         ? device_step_deferred(*be, *dev, s, scale, pos)
                                         : device_step(*be, *dev, s, scale);
      ASSERT_EQ(got.size(), want.size()) << "at " << pos << ": no decode_reserve";
      worst = std::max(worst, rel(got, want));
    };
    for (int64_t n : {40, 1, 1, 1}) step(n);
    dev->reserve(1000);  // records sized once: decode steps must then allocate nothing
    const size_t bytes = be->allocated_bytes();
    for (int i = 0; i < 300; ++i) {
      step(1);
      EXPECT_EQ(be->allocated_bytes(), bytes) << "decode step " << i << " allocated";
    }
    std::printf("[tq-cache] 300 decode steps, recent 16%s: worst rel err %.2e\n",
                deferred ? ", records deferred" : "", worst);
    EXPECT_LT(worst, 1e-2);
    const RecordDiff d = compare_records(*dev, ref);
    EXPECT_LE(d.nibbles, d.total_nibbles / 10000);
    EXPECT_EQ(d.scales, 0);
  }
}

TEST(CudaTqCache, SaveLoadBlockRoundTrip) {
  TQ_REQUIRE_GPU();
  auto be = make_cuda_backend();
  const quant::TqFormat f = random_format(true);
  for (int64_t recent : {0, 128}) {
    auto a = device_cache(*be, f, recent);
    auto b = device_cache(*be, f, recent);
    ASSERT_TRUE(a && b);
    EXPECT_NE(a->format_id(), CompressedCache(kShape, f, kLayer, recent).format_id());
    const float scale = 0.1f;
    const Step s1 = random_step(150), s2 = random_step(90);
    device_step(*be, *a, s1, scale);
    std::vector<uint8_t> first;
    a->save_block(*be, 0, first);
    device_step(*be, *a, s2, scale);
    std::vector<uint8_t> second;
    a->save_block(*be, 150, second);
    EXPECT_FALSE(b->load_block(*be, 0, 149, first));  // wrong length: refused, b unchanged
    ASSERT_TRUE(b->load_block(*be, 0, 150, first));
    ASSERT_TRUE(b->load_block(*be, 150, 90, second));
    ASSERT_EQ(b->n_tokens(), 240);
    EXPECT_EQ(b->held(), a->held());
    for (int64_t h = 0; h < kShape.n_head_kv; ++h)
      for (int64_t t = 0; t < 240; t += 7) {
        EXPECT_EQ(a->key_record(h, t), b->key_record(h, t));
        EXPECT_EQ(a->value_record(h, t), b->value_record(h, t));
      }
    // The same next step on both: the same records and window give the same output bits.
    const Step s3 = random_step(1);
    EXPECT_EQ(device_step(*be, *a, s3, scale), device_step(*be, *b, s3, scale));
  }
}

TEST(CudaTqCache, ConversionOnTheDeviceEncodesLikeDirectAppends) {
  TQ_REQUIRE_GPU();
  auto be = make_cuda_backend();
  const int64_t n = 700;
  for (int64_t recent : {0, 128}) {
    KvCache cache;
    cache.layers.push_back(make_dense_cache(*be, kShape));
    const Step s = random_step(n);
    device_step(*be, *cache.layers[0], s, 0.1f);
    KvPolicy policy;
    policy.mode = KvPolicy::Mode::TurboQuant;
    policy.format = random_format(true);
    policy.slice_tokens = 256;  // three slices, the last one partial
    policy.recent_exact = recent;
    const ConversionStats st = convert_cache(*be, cache, kShape, policy);
    EXPECT_EQ(st.layers, 1);
    EXPECT_EQ(st.slices, 3);
    auto* conv = dynamic_cast<DeviceCompressedCache*>(cache.layers[0].get());
    ASSERT_TRUE(conv) << "the converted layer should live on the device";
    ASSERT_EQ(conv->n_tokens(), n);
    // The dense layer is read straight from its bf16 store: the peak is the two layers side by
    // side, without the f32 slice of K and V (2 MiB here) the copy path allocates.
    EXPECT_GE(st.peak_bytes, st.dense_bytes + conv->bytes());
    EXPECT_LT(st.peak_bytes, st.dense_bytes + conv->bytes() + size_t(256 * kShape.n_head_kv * 128) * 4)
        << "conversion went through the f32 slice";
    // Direct: the dense cache holds bf16, so encode the bf16-rounded K/V on the CPU.
    std::vector<float> kr(s.k), vr(s.v);
    for (float& x : kr) x = round_bf16(x);
    for (float& x : vr) x = round_bf16(x);
    CompressedCache direct(kShape, policy.format, 0, recent);  // layer 0, as converted
    direct.append(kr.data(), vr.data(), n);
    const RecordDiff d = compare_records(*conv, direct);
    EXPECT_LE(d.nibbles, d.total_nibbles / 10000);
    EXPECT_EQ(d.scales, 0);
    EXPECT_EQ(conv->held(), std::min<int64_t>(recent, n));
    // The window converted too: the next step matches the CPU cache fed the same rows.
    Backend* cpu = be.get();  // CompressedCache runs on host memory and never calls its backend
    const Step s2 = random_step(1);
    std::vector<float> want(s2.q.size());
    direct.append_and_attend(*cpu, s2.q.data(), s2.k.data(), s2.v.data(), 1, 0.1f, want.data());
    const double e = rel(device_step(*be, *conv, s2, 0.1f), want);
    std::printf("[tq-cache] conversion recent %lld: nibbles differing %lld / %lld, next step rel "
                "err %.2e\n", (long long)recent, (long long)d.nibbles, (long long)d.total_nibbles, e);
    EXPECT_LT(e, 1e-2) << "recent " << recent;
  }
}

// The model's prefill path for a compressed layer: q rotated in the RoPE pass
// (qk_norm_rope_rotate_q with the layer's query_rotation) and append_and_attend_rotated gives the
// bytes of RoPE alone and append_and_attend (which rotates q itself), chunk after chunk.
TEST(CudaTqCache, RotatedQueriesGiveTheSameChunks) {
  TQ_REQUIRE_GPU();
  auto be = make_cuda_backend();
  const quant::TqFormat f = random_format(true);
  auto a = device_cache(*be, f, 128), b = device_cache(*be, f, 128);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->query_rotation(1), nullptr) << "decode steps rotate their query in the kernel";
  const float scale = 1.0f / std::sqrt(float(kShape.head_dim));
  std::vector<float> inv_freq(size_t(kShape.head_dim / 2));
  for (size_t i = 0; i < inv_freq.size(); ++i)
    inv_freq[i] = std::pow(10000.0f, -2.0f * float(i) / float(kShape.head_dim));
  int64_t pos = 0;
  for (int64_t n : {300, 257, 1}) {
    const Step s = random_step(n);
    std::vector<float> outs[2];
    for (int side = 0; side < 2; ++side) {
      LayerCache& c = side ? *b : *a;
      DeviceBuffer q = to_dev(*be, s.q), k = to_dev(*be, s.k), v = to_dev(*be, s.v);
      DeviceBuffer out = poisoned(*be, s.q.size());
      const quant::VectorCodec* rq = side ? c.query_rotation(n) : nullptr;
      if (rq) {
        be->qk_norm_rope_rotate_q(q.f32(), k.f32(), n, kShape.n_head, kShape.n_head_kv,
                                  kShape.head_dim, nullptr, nullptr, 1e-6f, pos, inv_freq, *rq);
        c.append_and_attend_rotated(*be, q.f32(), k.f32(), v.f32(), n, scale, out.f32());
      } else {
        be->qk_norm_rope(q.f32(), k.f32(), n, kShape.n_head, kShape.n_head_kv, kShape.head_dim,
                         nullptr, nullptr, 1e-6f, pos, inv_freq);
        c.append_and_attend(*be, q.f32(), k.f32(), v.f32(), n, scale, out.f32());
      }
      outs[side] = from_dev(*be, out, s.q.size());
    }
    EXPECT_EQ(std::memcmp(outs[0].data(), outs[1].data(), outs[0].size() * 4), 0)
        << "chunk of " << n << " at " << pos;
    EXPECT_TRUE(std::all_of(outs[1].begin(), outs[1].end(), [](float x) { return std::isfinite(x); }));
    pos += n;
  }
  int64_t differing = 0;
  for (int64_t h = 0; h < kShape.n_head_kv; ++h)
    for (int64_t t = 0; t < a->n_tokens(); t += 7)
      differing += a->key_record(h, t) != b->key_record(h, t) ||
                   a->value_record(h, t) != b->value_record(h, t);
  EXPECT_EQ(differing, 0) << "records";
}

}  // namespace
}  // namespace tq::test
