// Prefill attention kernels (prefill_attention.h) against double-precision CPU references: dense
// bf16 K/V (causal chunks after cached keys, sliding window, non-causal, GQA, d=64/128/256, lse),
// TurboQuant 4-bit codes decoded on the CPU, and merge_attention of two disjoint key sets.
// Fresh random inputs, outputs poisoned, garbage (NaN bit patterns) in cache slots past L.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <tuple>

#include "backend/cuda/prefill_attention.h"
#include "backend/cuda/tq_cuda.h"
#include "gpu_test_util.h"
#include "quant/vector_codec.h"

namespace tq::test {
namespace {

using cuda::KvFormat;

struct Case {
  int d, n_head, n_kv;
  int64_t T, q_pos0 = 0, k_pos0 = 0, window = 0;
  bool causal = true;
  int64_t L = -1;  // -1: q_pos0 + T - k_pos0 (the chunk's keys are the last ones)
};

int64_t keys_of(const Case& c) { return c.L >= 0 ? c.L : std::max<int64_t>(0, c.q_pos0 + c.T - c.k_pos0); }

// Double-precision attention over head-major K/V values [n_kv][stride][d] (already decoded).
// Returns out [T][n_head][d] and lse [T][n_head] (-inf and zeros for a query that sees nothing).
void reference(const Case& c, int64_t L, int64_t stride, const std::vector<float>& q,
               const std::vector<float>& k, const std::vector<float>& v, std::vector<double>& out,
               std::vector<double>& lse) {
  const int d = c.d, G = c.n_head / c.n_kv;
  const double scale = 1.0 / std::sqrt(double(d));
  out.assign(size_t(c.T * c.n_head * d), 0.0);
  lse.assign(size_t(c.T * c.n_head), -INFINITY);
  std::vector<double> s(size_t(std::max<int64_t>(L, 1)));
  for (int64_t t = 0; t < c.T; ++t)
    for (int h = 0; h < c.n_head; ++h) {
      const float* qr = q.data() + (t * c.n_head + h) * d;
      const size_t kv0 = size_t(int64_t(h / G) * stride * d);
      const int64_t qp = c.q_pos0 + t;
      double mx = -INFINITY;
      for (int64_t j = 0; j < L; ++j) {
        const int64_t kp = c.k_pos0 + j;
        const bool vis = !c.causal || (kp <= qp && (c.window == 0 || qp - kp < c.window));
        if (!vis) {
          s[size_t(j)] = -INFINITY;
          continue;
        }
        double dot = 0;
        for (int i = 0; i < d; ++i) dot += double(qr[i]) * k[kv0 + size_t(j * d + i)];
        s[size_t(j)] = dot * scale;
        mx = std::max(mx, s[size_t(j)]);
      }
      if (mx == -INFINITY) continue;
      double sum = 0;
      for (int64_t j = 0; j < L; ++j) sum += (s[size_t(j)] = std::exp(s[size_t(j)] - mx));
      double* o = out.data() + (t * c.n_head + h) * d;
      for (int64_t j = 0; j < L; ++j) {
        if (s[size_t(j)] == 0.0) continue;
        for (int i = 0; i < d; ++i) o[i] += s[size_t(j)] / sum * v[kv0 + size_t(j * d + i)];
      }
      lse[size_t(t * c.n_head + h)] = mx + std::log(sum);
    }
}

// Checks out (rel err) and lse (max abs diff; -inf must match exactly).
void expect_close(const std::vector<float>& out, const std::vector<double>& ref,
                  const std::vector<float>& lse, const std::vector<double>& lref,
                  const std::string& what, double tol = 1e-2) {
  const double err = rel_err(out, ref);
  double lerr = 0;
  int64_t bad_inf = 0, nonzero_empty = 0;
  for (size_t i = 0; i < lref.size(); ++i) {
    if (lref[i] == -INFINITY) {
      bad_inf += lse[i] != -INFINITY;
      continue;
    }
    lerr = std::max(lerr, std::isfinite(lse[i]) ? std::abs(lse[i] - lref[i]) : INFINITY);
  }
  const size_t d = out.size() / lref.size();
  for (size_t i = 0; i < out.size(); ++i) nonzero_empty += lref[i / d] == -INFINITY && out[i] != 0.0f;
  std::printf("%s: rel err %.2e, lse max err %.2e\n", what.c_str(), err, lerr);
  EXPECT_LT(err, tol) << what;
  EXPECT_LT(lerr, 5e-2) << what;
  EXPECT_EQ(bad_inf, 0) << what;
  EXPECT_EQ(nonzero_empty, 0) << what;
}

std::string describe(const Case& c, const char* kind) {
  char b[200];
  std::snprintf(b, sizeof b, "%s d=%d heads %d/%d T=%lld q_pos0=%lld k_pos0=%lld L=%lld win=%lld %s",
                kind, c.d, c.n_head, c.n_kv, (long long)c.T, (long long)c.q_pos0,
                (long long)c.k_pos0, (long long)keys_of(c), (long long)c.window,
                c.causal ? "causal" : "non-causal");
  return b;
}

// Runs the kernel twice (shared memory poisoned before each) and downloads out, lse.
void run_kernel(Backend& be, cuda::PrefillAttnArgs a, size_t n_out, size_t n_lse,
                std::vector<float>& out, std::vector<float>& lse) {
  DeviceBuffer od = poisoned(be, n_out), ld = poisoned(be, std::max<size_t>(n_lse, 1));
  a.out = od.f32(), a.lse = ld.f32();
  for (int rep = 0; rep < 2; ++rep) {
    cuda::poison_shared_memory();
    cuda::prefill_attention(a);
  }
  cuda::check_last_launch("prefill_attention");
  out = from_dev(be, od, n_out);
  lse = from_dev(be, ld, n_lse);
}

void bf16_case(Backend& be, const Case& c) {
  const int d = c.d;
  const int64_t L = keys_of(c), stride = L + 37;  // odd stride, garbage past L
  std::vector<uint16_t> kb(size_t(c.n_kv * stride * d), 0x7FC0), vb(kb.size(), 0xFFC0);  // NaN
  std::vector<float> k(kb.size(), 0.0f), v(kb.size(), 0.0f);
  auto kx = randn(size_t(c.n_kv * L * d), 1.5f), vx = randn(kx.size());
  for (int h = 0; h < c.n_kv; ++h)
    for (int64_t j = 0; j < L * d; ++j) {
      const size_t dst = size_t(h * stride * d + j), src = size_t(h * L * d + j);
      kb[dst] = f32_to_bf16(kx[src]), vb[dst] = f32_to_bf16(vx[src]);
      k[dst] = bf16_to_f32(kb[dst]), v[dst] = bf16_to_f32(vb[dst]);
    }
  auto q = randn(size_t(c.T * c.n_head * d));
  std::vector<double> ref, lref;
  reference(c, L, stride, q, k, v, ref, lref);
  DeviceBuffer qd = to_dev(be, q), kd = to_dev(be, kb), vd = to_dev(be, vb);
  cuda::PrefillAttnArgs a;
  a.q = qd.f32(), a.format = KvFormat::BF16, a.k = kd.data(), a.v = vd.data();
  a.head_stride = stride, a.T = c.T, a.L = L;
  a.n_head = c.n_head, a.n_head_kv = c.n_kv, a.head_dim = d;
  a.q_pos0 = c.q_pos0, a.k_pos0 = c.k_pos0, a.window = c.window, a.causal = c.causal;
  std::vector<float> out, lse;
  run_kernel(be, a, ref.size(), lref.size(), out, lse);
  expect_close(out, ref, lse, lref, describe(c, "bf16"));
}

TEST(CudaPrefillAttention, Bf16MatchesDoubleReference) {
  TQ_REQUIRE_GPU();
  auto be = make_cuda_backend();
  bf16_case(*be, {128, 32, 8, 1});                             // one query, one key
  bf16_case(*be, {128, 32, 8, 300});                           // several query blocks
  bf16_case(*be, {128, 32, 8, 77, 1000});                      // chunk after 1000 cached keys
  bf16_case(*be, {128, 8, 8, 129, 200, 0, 100});               // sliding window
  bf16_case(*be, {128, 16, 2, 65, 0, 0, 0, false, 333});       // non-causal
  bf16_case(*be, {128, 32, 8, 40, 500, 300, 128});             // keys start at position 300
  bf16_case(*be, {128, 32, 8, 20, 0, 5});                      // first 5 queries see no key
  bf16_case(*be, {128, 4, 2, 5, 0, 0, 0, false, 0});           // no keys at all
  bf16_case(*be, {64, 16, 2, 257, 64});
  bf16_case(*be, {64, 8, 8, 3, 0, 0, 0, false, 1000});
  bf16_case(*be, {64, 32, 8, 191, 17, 0, 33});
  bf16_case(*be, {256, 8, 8, 100, 31});
  bf16_case(*be, {256, 16, 2, 33, 97, 0, 50});
  bf16_case(*be, {256, 4, 4, 9, 0, 0, 0, false, 131});
}

TEST(CudaPrefillAttention, TurboQuantMatchesCpuDecodedReference) {
  TQ_REQUIRE_GPU();
  auto be = make_cuda_backend();
  auto tq_case = [&](const Case& c) {
    const int d = 128;
    quant::TqFormat f;
    f.head_dim = d;
    f.key_seed = rng()();
    f.value_seed = rng()();
    quant::VectorCodec kc(f.key_config()), vc(f.value_config());
    cuda::TqCodecDev kdev = cuda::make_tq_codec_dev(kc), vdev = cuda::make_tq_codec_dev(vc);
    const int64_t L = keys_of(c), stride = L + 37;
    const size_t cb = size_t(d / 2), rec = kc.bytes_per_vector();
    std::vector<uint8_t> kcodes(size_t(c.n_kv * stride) * cb), vcodes(kcodes.size());
    std::vector<uint16_t> ks(size_t(c.n_kv * stride)), vs(ks.size());
    for (auto& x : kcodes) x = uint8_t(rng()());
    for (auto& x : vcodes) x = uint8_t(rng()());
    for (auto& x : ks) x = uint16_t(rng()() | 0x7C00);  // inf/NaN patterns past L
    for (auto& x : vs) x = uint16_t(rng()() | 0x7C00);
    std::vector<float> k(size_t(c.n_kv * stride * d), 0.0f), v(k.size(), 0.0f);
    std::vector<uint8_t> kr(rec), vr(rec);
    std::vector<float> y(static_cast<size_t>(d));
    for (int h = 0; h < c.n_kv; ++h)
      for (int64_t j = 0; j < L; ++j) {
        auto kx = randn(size_t(d), 2.0f), vx = randn(size_t(d));
        kc.encode(kx.data(), kr.data());
        vc.encode(vx.data(), vr.data());
        const size_t slot = size_t(h * stride + j);
        std::memcpy(&kcodes[slot * cb], kr.data(), cb);
        std::memcpy(&vcodes[slot * cb], vr.data(), cb);
        ks[slot] = uint16_t(kr[cb] | kr[cb + 1] << 8);
        vs[slot] = uint16_t(vr[cb] | vr[cb + 1] << 8);
        // The rotated-basis values the kernel must use: centroid[code] * scale.
        kc.centroids(kr.data(), y.data());
        for (int i = 0; i < d; ++i) k[slot * size_t(d) + size_t(i)] = y[size_t(i)] * kc.scale(kr.data());
        vc.centroids(vr.data(), y.data());
        for (int i = 0; i < d; ++i) v[slot * size_t(d) + size_t(i)] = y[size_t(i)] * vc.scale(vr.data());
      }
    auto q = randn(size_t(c.T * c.n_head * d));
    std::vector<double> ref, lref;
    reference(c, L, stride, q, k, v, ref, lref);
    from_index_order(kcodes.data(), kcodes.size(), be->tq_code_order());  // the device's order
    from_index_order(vcodes.data(), vcodes.size(), be->tq_code_order());
    DeviceBuffer qd = to_dev(*be, q), kcd = to_dev(*be, kcodes), vcd = to_dev(*be, vcodes);
    DeviceBuffer ksd = to_dev(*be, ks), vsd = to_dev(*be, vs);
    cuda::PrefillAttnArgs a;
    a.q = qd.f32(), a.format = KvFormat::TurboQuant, a.k = kcd.data(), a.v = vcd.data();
    a.k_scale = static_cast<const uint16_t*>(ksd.data());
    a.v_scale = static_cast<const uint16_t*>(vsd.data());
    a.k_codec = &kdev, a.v_codec = &vdev;
    a.head_stride = stride, a.T = c.T, a.L = L;
    a.n_head = c.n_head, a.n_head_kv = c.n_kv, a.head_dim = d;
    a.q_pos0 = c.q_pos0, a.k_pos0 = c.k_pos0, a.window = c.window, a.causal = c.causal;
    std::vector<float> out, lse;
    run_kernel(*be, a, ref.size(), lref.size(), out, lse);
    const bool one_codebook =
        std::equal(kdev.centroids, kdev.centroids + 16, vdev.centroids);  // fp16 table path
    expect_close(out, ref, lse, lref, describe(c, one_codebook ? "tq4 (one codebook)" : "tq4"));
  };
  tq_case({128, 32, 8, 300});
  tq_case({128, 32, 8, 100, 900});
  tq_case({128, 4, 2, 150, 70, 0, 64});
  tq_case({128, 16, 2, 7, 0, 0, 0, false, 2000});
  tq_case({128, 8, 8, 33, 400, 100});
}

// Prefix keys [0, P) non-causal + the chunk's own keys [P, P + T) causal, merged, must equal
// causal attention over all P + T keys.
TEST(CudaPrefillAttention, MergeOfTwoKeySetsEqualsAttentionOverAll) {
  TQ_REQUIRE_GPU();
  auto be = make_cuda_backend();
  for (auto [d, n_head, n_kv, P, T] : {std::tuple{128, 32, 8, 500, 129}, std::tuple{64, 8, 2, 0, 70},
                                        std::tuple{128, 8, 8, 1, 1}, std::tuple{256, 4, 1, 333, 64}}) {
    const Case all{d, n_head, n_kv, T, P};
    const int64_t L = P + T, stride = L + 5;
    std::vector<uint16_t> kb(size_t(n_kv * stride * d), 0x7FC0), vb(kb.size(), 0x7FC0);
    std::vector<float> k(kb.size(), 0.0f), v(kb.size(), 0.0f);
    for (int h = 0; h < n_kv; ++h) {
      auto kx = randn(size_t(L * d)), vx = randn(size_t(L * d), 2.0f);
      for (int64_t j = 0; j < L * d; ++j) {
        const size_t dst = size_t(h * stride * d + j);
        kb[dst] = f32_to_bf16(kx[size_t(j)]), vb[dst] = f32_to_bf16(vx[size_t(j)]);
        k[dst] = bf16_to_f32(kb[dst]), v[dst] = bf16_to_f32(vb[dst]);
      }
    }
    auto q = randn(size_t(T * n_head * d));
    std::vector<double> ref, lref;
    reference(all, L, stride, q, k, v, ref, lref);
    const size_t n_out = ref.size(), rows = lref.size();
    DeviceBuffer qd = to_dev(*be, q), kd = to_dev(*be, kb), vd = to_dev(*be, vb);
    DeviceBuffer oa = poisoned(*be, n_out), la = poisoned(*be, rows);
    DeviceBuffer ob = poisoned(*be, n_out), lb = poisoned(*be, rows);
    cuda::PrefillAttnArgs a;
    a.q = qd.f32(), a.format = KvFormat::BF16, a.k = kd.data(), a.v = vd.data();
    a.head_stride = stride, a.T = T, a.n_head = n_head, a.n_head_kv = n_kv, a.head_dim = d;
    a.out = oa.f32(), a.lse = la.f32(), a.L = P, a.causal = false;  // the prefix
    cuda::prefill_attention(a);
    const size_t off_bytes = size_t(P) * size_t(d) * 2;
    a.k = static_cast<const uint8_t*>(kd.data()) + off_bytes;
    a.v = static_cast<const uint8_t*>(vd.data()) + off_bytes;
    a.out = ob.f32(), a.lse = lb.f32(), a.L = T, a.causal = true, a.q_pos0 = P, a.k_pos0 = P;
    cuda::prefill_attention(a);
    cuda::merge_attention(oa.f32(), la.f32(), ob.f32(), lb.f32(), int64_t(rows), d);
    cuda::check_last_launch("merge_attention");
    auto out = from_dev(*be, oa, n_out), lse = from_dev(*be, la, rows);
    expect_close(out, ref, lse, lref, describe(all, "merged"));
  }
}

}  // namespace
}  // namespace tq::test
