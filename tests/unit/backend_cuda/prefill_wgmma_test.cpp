// The Hopper prefill kernel (prefill_wgmma.h) called directly against a double-precision CPU
// reference: bf16 K/V and TurboQuant 4-bit codes (decoded on the CPU), d=128, causal chunks
// after cached keys (q_pos0 > 0, keys starting later), odd T and L, non-causal, GQA, no keys,
// lse. Fresh random inputs, outputs poisoned with NaN, shared memory poisoned, NaN bit patterns
// in cache slots past L. TurboQuant runs both producer decodes (H8's table, the ALU one): each
// against the reference, and the two must agree bit for bit; with exact fp16 rows after the
// records, the one-launch variant against the reference rotated back. Skips off sm_90.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "backend/cuda/prefill_attention.h"
#include "backend/cuda/prefill_wgmma.h"
#include "backend/cuda/tq_cuda.h"
#include "gpu_test_util.h"
#include "quant/vector_codec.h"

namespace tq::test {
namespace {

struct WgCase {
  int n_head, n_kv;
  int64_t T, L, q_pos0 = 0, k_pos0 = 0;
  bool causal = true;
};

// out [T][n_head][128] and lse [T][n_head] over head-major K/V [n_kv][stride][128] (f32 values).
void attend(const WgCase& c, int64_t stride, const std::vector<float>& q, const std::vector<float>& k,
            const std::vector<float>& v, std::vector<double>& out, std::vector<double>& lse) {
  constexpr int d = 128;
  const int G = c.n_head / c.n_kv;
  out.assign(size_t(c.T * c.n_head * d), 0.0);
  lse.assign(size_t(c.T * c.n_head), -INFINITY);
  std::vector<double> s(size_t(std::max<int64_t>(c.L, 1)));
  std::vector<double> acc(d);
  for (int64_t t = 0; t < c.T; ++t)
    for (int h = 0; h < c.n_head; ++h) {
      const float* qr = &q[size_t((t * c.n_head + h) * d)];
      const size_t base = size_t(int64_t(h / G) * stride * d);
      double mx = -INFINITY;
      for (int64_t j = 0; j < c.L; ++j) {
        s[size_t(j)] = -INFINITY;
        if (c.causal && c.k_pos0 + j > c.q_pos0 + t) continue;
        double dot = 0;
        for (int i = 0; i < d; ++i) dot += double(qr[i]) * k[base + size_t(j * d + i)];
        s[size_t(j)] = dot / std::sqrt(double(d));
        mx = std::max(mx, s[size_t(j)]);
      }
      if (mx == -INFINITY) continue;
      std::fill(acc.begin(), acc.end(), 0.0);
      double sum = 0;
      for (int64_t j = 0; j < c.L; ++j) {
        if (s[size_t(j)] == -INFINITY) continue;
        const double w = std::exp(s[size_t(j)] - mx);
        sum += w;
        for (int i = 0; i < d; ++i) acc[size_t(i)] += w * v[base + size_t(j * d + i)];
      }
      for (int i = 0; i < d; ++i) out[size_t((t * c.n_head + h) * d + i)] = acc[size_t(i)] / sum;
      lse[size_t(t * c.n_head + h)] = mx + std::log(sum);
    }
}

// Compares out / lse with the reference; rows that see no key must be zero with lse -inf.
void compare(const WgCase& c, const char* kind, const std::vector<float>& out,
             const std::vector<float>& lse, const std::vector<double>& ref,
             const std::vector<double>& lref) {
  constexpr int d = 128;
  const double err = rel_err(out, ref);
  double lerr = 0;
  int64_t bad = 0;
  for (size_t i = 0; i < lref.size(); ++i) {
    if (lref[i] == -INFINITY) {
      bad += lse[i] != -INFINITY;
      for (int x = 0; x < d; ++x) bad += out[i * d + size_t(x)] != 0.0f;
      continue;
    }
    lerr = std::max(lerr, std::isfinite(lse[i]) ? std::abs(lse[i] - lref[i]) : INFINITY);
  }
  char what[220];
  std::snprintf(what, sizeof what, "%s heads %d/%d T=%lld L=%lld q_pos0=%lld k_pos0=%lld %s", kind,
                c.n_head, c.n_kv, (long long)c.T, (long long)c.L, (long long)c.q_pos0,
                (long long)c.k_pos0, c.causal ? "causal" : "non-causal");
  std::printf("wgmma %s: rel err %.2e, lse max err %.2e\n", what, err, lerr);
  EXPECT_LT(err, 1e-2) << what;
  EXPECT_LT(lerr, 5e-2) << what;
  EXPECT_EQ(bad, 0) << what << ": rows that see no key must be zero with lse -inf";
}

// fp16 bits to float (normal numbers and zero only: the test's scales).
float half_bits(uint16_t b) {
  if ((b & 0x7FFF) == 0) return 0.0f;
  return std::ldexp(1.0f + float(b & 0x3FF) / 1024.0f, int((b >> 10) & 31) - 15) * ((b & 0x8000) ? -1.0f : 1.0f);
}

// TurboQuant 4-bit K/V: random codes and fp16 scales (NaN scales, random codes past L), decoded
// on the CPU as centroid[code] * scale with the codec's centroids.
// Codebook: the codec's; kRandom: 16 random centroids (unsorted, asymmetric, both signs) for K
// and V alike, which the ALU decode (magnitudes only) must refuse and leave to the table decode;
// kRandomSymmetric: 8 random magnitudes (unsorted) mirrored as the device's sign-magnitude codes
// hold them (code m: +M[m], code 8 + m: -M[m]), which it takes.
// W >= 0: the one-launch variant (prefill_attention with rotate_back) with W exact fp16 rows after
// the L records (keys L .. L + W - 1, NaN patterns past W); the reference sees the records' and
// the rows' values as one key array, and its output rows are rotated back by the V codec's R^T
// in double.
enum class Codebook { kCodec, kRandom, kRandomSymmetric };
// want_ring 1 / 0: the ring kernel must / must not take the shape (prefill_wgmma_ring_bytes > 0);
// -1: either. Where it takes it, it runs too.
void check_tq(Backend& be, const WgCase& c, Codebook book = Codebook::kCodec, int64_t W = -1,
              int want_ring = -1) {
  const bool one = W >= 0;
  W = std::max<int64_t>(W, 0);
  constexpr int d = 128;
  quant::TqFormat f;
  f.head_dim = d;
  f.key_seed = rng()();
  f.value_seed = rng()();
  quant::VectorCodec kcodec(f.key_config()), vcodec(f.value_config());
  cuda::TqCodecDev kc = cuda::make_tq_codec_dev(kcodec), vc = cuda::make_tq_codec_dev(vcodec);
  if (book != Codebook::kCodec) {
    auto x = randn(16, 0.15f);
    if (book == Codebook::kRandomSymmetric)
      for (int m = 0; m < 8; ++m) x[size_t(m)] = std::fabs(x[size_t(m)]), x[size_t(8 + m)] = -x[size_t(m)];
    std::copy(x.begin(), x.end(), kc.centroids);
    std::copy(x.begin(), x.end(), vc.centroids);
  }
  ASSERT_TRUE(std::equal(kc.centroids, kc.centroids + 16, vc.centroids));
  EXPECT_EQ(cuda::prefill_wgmma_alu_decodes(kc.centroids), book != Codebook::kRandom);
  double ms = 0;
  for (float x : kc.centroids) ms += double(x) * x / 16;
  const int64_t stride = c.L + 23;
  std::vector<uint8_t> kcode(size_t(c.n_kv * stride * d / 2)), vcode(kcode.size());
  for (auto& x : kcode) x = uint8_t(rng()());
  for (auto& x : vcode) x = uint8_t(rng()());
  std::vector<uint16_t> ks(size_t(c.n_kv * stride), 0x7E00), vs(ks.size(), 0xFE00);  // NaN
  std::vector<float> k(size_t(c.n_kv * stride * d), 0.0f), v(k.size(), 0.0f);
  // Scales about 1 / rms(centroids) (values of unit size), exponent spread over x0.5 .. x4.
  const int e0 = int(std::floor(std::log2(1.0 / std::sqrt(ms)))) + 15;
  for (int h = 0; h < c.n_kv; ++h)
    for (int64_t j = 0; j < c.L; ++j) {
      const size_t slot = size_t(h * stride + j);
      ks[slot] = uint16_t((e0 - 1 + int(rng()() % 4)) << 10 | (rng()() & 0x3FF));
      vs[slot] = uint16_t((e0 - 1 + int(rng()() % 3)) << 10 | (rng()() & 0x3FF));
      const float sk = half_bits(ks[slot]), sv = half_bits(vs[slot]);
      for (int i = 0; i < d; ++i) {
        const int bk = kcode[slot * (d / 2) + size_t(i / 2)], bv = vcode[slot * (d / 2) + size_t(i / 2)];
        k[slot * d + size_t(i)] = kc.centroids[(i & 1) ? bk >> 4 : bk & 15] * sk;
        v[slot * d + size_t(i)] = vc.centroids[(i & 1) ? bv >> 4 : bv & 15] * sv;
      }
    }
  // The exact rows: fp16 [n_kv][t_stride][d]; the reference's keys: records then rows.
  const int64_t t_stride = W + 5, all = c.L + W;
  std::vector<uint16_t> tk(size_t(c.n_kv * t_stride * d), 0x7E01), tv(tk.size(), 0xFE01);
  std::vector<float> ka(size_t(c.n_kv * std::max<int64_t>(all, 1) * d)), va(ka.size());
  const auto tkx = randn(size_t(c.n_kv * W * d), 1.3f), tvx = randn(tkx.size());
  for (int h = 0; h < c.n_kv; ++h)
    for (int64_t j = 0; j < all; ++j)
      for (int i = 0; i < d; ++i) {
        const size_t dst = size_t((h * all + j) * d + i);
        if (j < c.L) {
          ka[dst] = k[size_t((h * stride + j) * d + i)], va[dst] = v[size_t((h * stride + j) * d + i)];
          continue;
        }
        const size_t t = size_t((h * t_stride + j - c.L) * d + i);
        const size_t x = size_t((h * W + j - c.L) * d + i);
        tk[t] = f32_to_f16(tkx[x]), tv[t] = f32_to_f16(tvx[x]);
        ka[dst] = f16_to_f32(tk[t]), va[dst] = f16_to_f32(tv[t]);
      }
  WgCase ca = c;
  ca.L = all;
  auto q = randn(size_t(c.T * c.n_head * d));
  std::vector<double> ref, lref;
  attend(ca, std::max<int64_t>(all, 1), q, ka, va, ref, lref);
  if (one) {  // out = R_v^T (attention in the rotated basis): R^T's columns from apply_t
    std::vector<double> m(size_t(d * d));
    std::vector<float> e(d), col(d);
    for (int j = 0; j < d; ++j) {
      std::fill(e.begin(), e.end(), 0.0f);
      e[size_t(j)] = 1.0f;
      vcodec.rotation().apply_t(e.data(), col.data());
      for (int i = 0; i < d; ++i) m[size_t(i * d + j)] = col[size_t(i)];
    }
    std::vector<double> row(d);
    for (size_t r = 0; r < lref.size(); ++r) {
      std::copy(ref.begin() + long(r * d), ref.begin() + long((r + 1) * d), row.begin());
      for (int i = 0; i < d; ++i) {
        double acc = 0;
        for (int j = 0; j < d; ++j) acc += m[size_t(i * d + j)] * row[size_t(j)];
        ref[r * d + size_t(i)] = acc;
      }
    }
  }
  DeviceBuffer qd = to_dev(be, q), kd = to_dev(be, kcode), vd = to_dev(be, vcode);
  DeviceBuffer tkd = to_dev(be, tk), tvd = to_dev(be, tv);
  DeviceBuffer ksd = to_dev(be, ks), vsd = to_dev(be, vs);
  cuda::PrefillAttnArgs a;
  a.q = qd.f32();
  a.format = cuda::KvFormat::TurboQuant, a.k = kd.data(), a.v = vd.data();
  a.k_scale = static_cast<const uint16_t*>(ksd.data());
  a.v_scale = static_cast<const uint16_t*>(vsd.data());
  a.k_codec = &kc, a.v_codec = &vc;
  a.head_stride = stride, a.T = c.T, a.L = c.L, a.n_head = c.n_head, a.n_head_kv = c.n_kv;
  a.head_dim = d, a.q_pos0 = c.q_pos0, a.k_pos0 = c.k_pos0, a.causal = c.causal;
  if (one) {
    a.rotate_back = true;
    a.tail_k = static_cast<const uint16_t*>(tkd.data()), a.tail_v = static_cast<const uint16_t*>(tvd.data());
    a.tail_stride = t_stride, a.tail_len = W;
    if (book == Codebook::kRandom) {  // the ALU decode, which the variant needs, refuses it
      EXPECT_FALSE(cuda::prefill_wgmma_one_launch(a));
      EXPECT_THROW(cuda::prefill_attention(a), std::exception);
      return;
    }
    ASSERT_TRUE(cuda::prefill_wgmma_one_launch(a));
    DeviceBuffer od = poisoned(be, ref.size()), ld = poisoned(be, lref.size());
    a.out = od.f32(), a.lse = ld.f32();
    for (int rep = 0; rep < 2; ++rep) {
      cuda::poison_shared_memory();
      cuda::prefill_attention(a);  // the engine's entry point: routes to the fused variant
    }
    cuda::check_last_launch("prefill_attention (TurboQuant + exact rows)");
    const auto out = from_dev(be, od, ref.size()), lse = from_dev(be, ld, lref.size());
    compare(ca, "tq4 one launch, rotated back", out, lse, ref, lref);
    // The ring kernel (each record tile decoded once per kv head) where it takes the shape: with
    // its full workspace and with an eighth of it (fewer slots, so they are reused), against the
    // reference and bit for bit against the blocks' own decode above.
    const size_t ring = cuda::prefill_wgmma_ring_bytes(a);
    if (want_ring >= 0) {
      EXPECT_EQ(ring > 0, want_ring == 1) << "T=" << c.T << " heads " << c.n_head << "/" << c.n_kv;
    }
    for (const size_t ws : {ring, ring / 8}) {
      if (ring == 0) break;
      DeviceBuffer wd(&be, ws), o2 = poisoned(be, ref.size()), l2 = poisoned(be, lref.size());
      a.ring_ws = wd.data(), a.ring_ws_bytes = ws, a.out = o2.f32(), a.lse = l2.f32();
      for (int rep = 0; rep < 2; ++rep) {
        cuda::poison_shared_memory();
        cuda::prefill_attention(a);
      }
      cuda::check_last_launch("prefill_attention (TurboQuant + exact rows, ring)");
      const auto out2 = from_dev(be, o2, ref.size()), lse2 = from_dev(be, l2, lref.size());
      compare(ca, ws == ring ? "tq4 ring" : "tq4 ring, reused slots", out2, lse2, ref, lref);
      EXPECT_EQ(std::memcmp(out.data(), out2.data(), out.size() * sizeof(float)), 0) << "ring output differs";
      EXPECT_EQ(std::memcmp(lse.data(), lse2.data(), lse.size() * sizeof(float)), 0) << "ring lse differs";
    }
    return;
  }
  ASSERT_TRUE(cuda::prefill_wgmma_handles(a));
  std::vector<float> outs[2], lses[2];
  const cuda::TqDecode decodes[2] = {cuda::TqDecode::kTable, cuda::TqDecode::kAlu};
  for (int dv = 0; dv < 2; ++dv) {
    DeviceBuffer od = poisoned(be, ref.size()), ld = poisoned(be, lref.size());
    a.out = od.f32(), a.lse = ld.f32();
    for (int rep = 0; rep < 2; ++rep) {
      cuda::poison_shared_memory();
      cuda::prefill_attention_wgmma(a, nullptr, decodes[dv]);
    }
    cuda::check_last_launch("prefill_attention_wgmma (TurboQuant)");
    outs[dv] = from_dev(be, od, ref.size()), lses[dv] = from_dev(be, ld, lref.size());
    compare(ca, dv ? "tq4 alu" : "tq4 table", outs[dv], lses[dv], ref, lref);
  }
  // Same fp16 K/V tiles, same consumers: the outputs are identical (NaN-safe bit compare).
  const auto same_bits = [](const std::vector<float>& x, const std::vector<float>& y) {
    return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
  };
  EXPECT_TRUE(same_bits(outs[0], outs[1])) << "table and ALU decodes differ (out)";
  EXPECT_TRUE(same_bits(lses[0], lses[1])) << "table and ALU decodes differ (lse)";
}

void check(Backend& be, const WgCase& c) {
  constexpr int d = 128;
  const int64_t stride = c.L + 29;  // odd stride; slots past L hold NaN patterns
  std::vector<uint16_t> kb(size_t(c.n_kv * stride * d), 0x7FC1), vb(kb.size(), 0xFFC1);
  std::vector<float> k(kb.size(), 0.0f), v(kb.size(), 0.0f);
  auto kx = randn(size_t(c.n_kv * c.L * d), 1.3f), vx = randn(kx.size());
  for (int h = 0; h < c.n_kv; ++h)
    for (int64_t j = 0; j < c.L * d; ++j) {
      const size_t dst = size_t(h * stride * d + j), src = size_t(h * c.L * d + j);
      kb[dst] = f32_to_bf16(kx[src]), vb[dst] = f32_to_bf16(vx[src]);
      k[dst] = bf16_to_f32(kb[dst]), v[dst] = bf16_to_f32(vb[dst]);
    }
  auto q = randn(size_t(c.T * c.n_head * d));
  std::vector<double> ref, lref;
  attend(c, stride, q, k, v, ref, lref);
  DeviceBuffer qd = to_dev(be, q), kd = to_dev(be, kb), vd = to_dev(be, vb);
  DeviceBuffer od = poisoned(be, ref.size()), ld = poisoned(be, lref.size());
  cuda::PrefillAttnArgs a;
  a.q = qd.f32(), a.out = od.f32(), a.lse = ld.f32();
  a.format = cuda::KvFormat::BF16, a.k = kd.data(), a.v = vd.data();
  a.head_stride = stride, a.T = c.T, a.L = c.L, a.n_head = c.n_head, a.n_head_kv = c.n_kv;
  a.head_dim = d, a.q_pos0 = c.q_pos0, a.k_pos0 = c.k_pos0, a.causal = c.causal;
  for (int rep = 0; rep < 2; ++rep) {
    cuda::poison_shared_memory();
    cuda::prefill_attention_wgmma(a);
  }
  cuda::check_last_launch("prefill_attention_wgmma");
  compare(c, "bf16", from_dev(be, od, ref.size()), from_dev(be, ld, lref.size()), ref, lref);
}

TEST(CudaPrefillWgmma, MatchesDoubleReference) {
  TQ_REQUIRE_GPU();
  auto be = make_cuda_backend();
  if (!cuda::prefill_wgmma_available()) GTEST_SKIP() << "not an sm_90 device";
  check(*be, {2, 1, 4096, 4096});               // causal 4K, one kv head shared by two
  check(*be, {8, 2, 1000, 1000});               // odd T = L
  check(*be, {32, 8, 77, 1077, 1000});          // chunk after 1000 cached keys
  check(*be, {8, 8, 300, 500, 500, 300});       // keys start at position 300
  check(*be, {4, 2, 20, 15, 0, 5});             // the first 5 queries see no key
  check(*be, {16, 2, 65, 333, 0, 0, false});    // non-causal
  check(*be, {4, 4, 200, 1000, 0, 0, false});
  check(*be, {4, 1, 1, 1});                     // one query, one key
  check(*be, {4, 2, 129, 0, 0, 0, false});      // no keys at all
  check(*be, {4, 2, 130, 200, 70});             // causal, partial last tiles
}

TEST(CudaPrefillWgmma, TurboQuantMatchesCpuDecodedReference) {
  TQ_REQUIRE_GPU();
  auto be = make_cuda_backend();
  if (!cuda::prefill_wgmma_available()) GTEST_SKIP() << "not an sm_90 device";
  check_tq(*be, {2, 1, 4096, 4096});             // causal 4K
  check_tq(*be, {8, 2, 1001, 1001});             // odd T = L
  check_tq(*be, {32, 8, 77, 1077, 1000});        // chunk after 1000 cached keys (q_pos0 > 0)
  check_tq(*be, {8, 8, 300, 517, 517, 300});     // keys start at position 300
  check_tq(*be, {4, 2, 20, 15, 0, 5});           // the first 5 queries see no key
  check_tq(*be, {16, 2, 65, 333, 0, 0, false});  // non-causal (records before the chunk)
  check_tq(*be, {32, 8, 300, 2001, 0, 0, false});
  check_tq(*be, {8, 2, 129, 4099, 0, 0, false});  // records of a later chunk: 33 tiles, the last partial
  check_tq(*be, {4, 1, 1, 1});                   // one query, one key
  check_tq(*be, {4, 2, 129, 0, 0, 0, false});    // no keys at all
  check_tq(*be, {4, 2, 131, 259, 128});          // causal, partial last tiles
  check_tq(*be, {8, 2, 600, 777}, Codebook::kRandom);
  check_tq(*be, {8, 2, 600, 777}, Codebook::kRandomSymmetric);
}

// Records and exact rows in one launch, rotated back (the engine's prefill chunk after a
// conversion): records before the chunk, then rows holding the chunk's own keys (causal), partial
// tiles on both sides, a window with older rows, a chunk whose first rows are records too (causal
// over both), a single key each, non-causal, records only (before or holding the chunk), rows
// only; and an asymmetric codebook refused (the variant decodes by ALU only).
TEST(CudaPrefillWgmma, TurboQuantWithExactRowsMatchesCpuReference) {
  TQ_REQUIRE_GPU();
  auto be = make_cuda_backend();
  if (!cuda::prefill_wgmma_available()) GTEST_SKIP() << "not an sm_90 device";
  if (!cuda::prefill_wgmma_one_launch_enabled())
    GTEST_SKIP() << "the one-launch variant is turned off (TQ_PREFILL_ONE_LAUNCH=0)";
  check_tq(*be, {8, 2, 700, 1000, 1000}, Codebook::kCodec, 700);   // records, then the chunk's rows
  check_tq(*be, {32, 8, 300, 2001, 2101}, Codebook::kCodec, 400);  // 100 older rows in the window
  check_tq(*be, {4, 2, 129, 4099, 4099}, Codebook::kCodec, 129);
  check_tq(*be, {8, 2, 500, 300, 100}, Codebook::kCodec, 300);     // records hold the chunk's first 200
  check_tq(*be, {4, 1, 1, 1, 1}, Codebook::kCodec, 1);             // one query, one record, one row
  check_tq(*be, {8, 2, 256, 128, 0, 0, false}, Codebook::kRandomSymmetric, 200);  // non-causal
  check_tq(*be, {8, 2, 300, 1000, 1000}, Codebook::kCodec, 0);  // records only
  check_tq(*be, {8, 2, 500, 400, 100}, Codebook::kCodec, 0);    // records hold the chunk (causal)
  check_tq(*be, {8, 2, 300, 0, 0}, Codebook::kCodec, 300);      // rows only (no records yet)
  check_tq(*be, {8, 2, 64, 128, 128}, Codebook::kRandom, 64);   // refused: not symmetric
}

// The ring kernel (prefill_wgmma_ring.cu): grids of group x query blocks >= 8 blocks a kv head,
// one or several rings, records before the chunk with its rows after them (causal, partial tiles
// on both sides, T not a multiple of 128), older rows in the window, records only, non-causal.
TEST(CudaPrefillWgmma, RingDecodeMatchesCpuReference) {
  TQ_REQUIRE_GPU();
  auto be = make_cuda_backend();
  if (!cuda::prefill_wgmma_available()) GTEST_SKIP() << "not an sm_90 device";
  if (!cuda::prefill_wgmma_one_launch_enabled())
    GTEST_SKIP() << "the one-launch variant is turned off (TQ_PREFILL_ONE_LAUNCH=0)";
  if (!cuda::prefill_wgmma_ring_enabled()) GTEST_SKIP() << "turned off (TQ_PREFILL_RING=0)";
  check_tq(*be, {8, 1, 500, 700, 700}, Codebook::kCodec, 500, 1);       // 32 blocks, one ring
  check_tq(*be, {16, 2, 512, 1100, 1100}, Codebook::kCodec, 512, 1);    // two rings
  check_tq(*be, {8, 1, 1000, 1500, 1700}, Codebook::kCodec, 1200, 1);   // 200 older rows
  check_tq(*be, {32, 2, 640, 600, 600}, Codebook::kCodec, 0, 1);        // records only, 2 kv heads a ring
  check_tq(*be, {8, 1, 512, 600, 0, 0, false}, Codebook::kRandomSymmetric, 100, 1);  // non-causal
  check_tq(*be, {8, 2, 256, 900, 900}, Codebook::kCodec, 256, 1);       // 8 blocks a kv head
  check_tq(*be, {4, 2, 100, 900, 900}, Codebook::kCodec, 100, 0);      // 2 blocks a kv head: not taken
}

}  // namespace
}  // namespace tq::test
