// The CUDA backend's dense engine path: bf16 KV stores (kv_write / kv_read against host bf16
// rounding), memmove copies, attention on bf16 K/V through each kernel the dispatch picks
// (split-K decode, flash prefill, generic) against a double reference, and the fused ops
// against the composition of the basic ops (Backend's defaults) and double references.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

#include "backend/cuda/kernel_choice.h"
#include "backend/cuda/tq_cuda.h"
#include "gpu_test_util.h"

namespace tq::test {
namespace {

std::vector<uint16_t> download_u16(Backend& be, const void* p, size_t n) {
  cuda_synchronize();
  std::vector<uint16_t> v(n);
  be.download(v.data(), p, n * 2);
  return v;
}

TEST(CudaKv, WriteThenReadRoundTripsThroughBf16) {
  TQ_REQUIRE_GPU();
  auto be = make_cuda_backend();
  ASSERT_EQ(be->kv_dtype(), DType::BF16);
  const int64_t hk = 3, d = 128, cap = 77, at = 20, T = 41;
  const size_t n_store = size_t(hk * cap * d);
  const uint16_t kPoison = 0x7fc1;  // a bf16 NaN
  std::vector<uint16_t> poison(n_store, kPoison);
  DeviceBuffer sk = to_dev(*be, poison), sv = to_dev(*be, poison);
  const KvStore store{sk.data(), sv.data(), DType::BF16, cap, hk, d};
  auto k = randn(size_t(T * hk * d)), v = randn(size_t(T * hk * d));
  DeviceBuffer kd = to_dev(*be, k), vd = to_dev(*be, v);
  be->kv_write(store, at, kd.f32(), vd.f32(), T);

  // The store: slot at + t of head h holds bf16(k[t, h]); every other slot is untouched.
  auto hk_store = download_u16(*be, sk.data(), n_store);
  auto hv_store = download_u16(*be, sv.data(), n_store);
  for (int64_t h = 0; h < hk; ++h)
    for (int64_t j = 0; j < cap; ++j)
      for (int64_t i = 0; i < d; ++i) {
        const size_t o = size_t((h * cap + j) * d + i);
        if (j < at || j >= at + T) {
          ASSERT_EQ(hk_store[o], kPoison);
          ASSERT_EQ(hv_store[o], kPoison);
        } else {
          const size_t src = size_t(((j - at) * hk + h) * d + i);
          ASSERT_EQ(hk_store[o], f32_to_bf16(k[src])) << h << " " << j << " " << i;
          ASSERT_EQ(hv_store[o], f32_to_bf16(v[src]));
        }
      }

  const int64_t r0 = at + 5, rn = T - 9;
  DeviceBuffer kr = poisoned(*be, size_t(rn * hk * d)), vr = poisoned(*be, size_t(rn * hk * d));
  be->kv_read(store, r0, rn, kr.f32(), vr.f32());
  auto kh = from_dev(*be, kr, size_t(rn * hk * d)), vh = from_dev(*be, vr, size_t(rn * hk * d));
  for (size_t e = 0; e < kh.size(); ++e) {
    const size_t src = size_t((r0 - at) * hk * d) + e;
    ASSERT_EQ(kh[e], round_bf16(k[src])) << e;
    ASSERT_EQ(vh[e], round_bf16(v[src])) << e;
  }
}

TEST(CudaKv, CopyHasMemmoveSemantics) {
  TQ_REQUIRE_GPU();
  auto be = make_cuda_backend();
  const size_t n = 1 << 16;
  std::vector<uint8_t> init(n);
  for (auto& b : init) b = uint8_t(rng()());
  struct Case { size_t dst, src, bytes; };
  for (Case c : {Case{0, 4096, 40000}, Case{4096, 0, 40000}, Case{10, 11, 60000},
                 Case{1000, 0, 999}, Case{0, 30000, 30000}, Case{5, 5, 100}}) {
    DeviceBuffer b = to_dev(*be, init);
    auto* p = static_cast<uint8_t*>(b.data());
    be->copy(p + c.dst, p + c.src, c.bytes);
    std::vector<uint8_t> want = init, got(n);
    std::memmove(want.data() + c.dst, want.data() + c.src, c.bytes);
    cuda_synchronize();
    be->download(got.data(), b.data(), n);
    EXPECT_EQ(got, want) << c.dst << " <- " << c.src << " x " << c.bytes;
  }
}

// copy_rows: n rows of row_bytes between pitched regions, by the copy kernel (16-byte aligned,
// disjoint spans) or the 2D memcpy (unaligned, or spans that overlap with disjoint rows: the
// window's move back to row 0); bytes outside the rows untouched.
TEST(CudaKv, CopyRowsCopiesEachRowAndNothingElse) {
  TQ_REQUIRE_GPU();
  auto be = make_cuda_backend();
  const size_t n = 1 << 20;
  std::vector<uint8_t> init(n);
  for (auto& b : init) b = uint8_t(rng()());
  struct Case { size_t dst, dst_pitch, src, src_pitch, row_bytes, rows; };
  for (Case c : {Case{0, 66048, 600000, 4096, 4096, 8},      // aligned, disjoint: the kernel
                 Case{16, 8192, 500032, 65536, 8192, 7},     // aligned, pitch > row
                 Case{3, 5000, 700001, 4099, 4000, 9},       // unaligned: memcpy
                 Case{0, 65536, 8192, 65536, 4096, 8},       // spans overlap, rows disjoint
                 Case{0, 512, 900000, 512, 512, 1},          // one row
                 Case{400000, 131072, 0, 50000, 49152, 4}}) {
    DeviceBuffer b = to_dev(*be, init);
    auto* p = static_cast<uint8_t*>(b.data());
    be->copy_rows(p + c.dst, c.dst_pitch, p + c.src, c.src_pitch, c.row_bytes, c.rows);
    std::vector<uint8_t> want = init, got(n);
    for (size_t r = 0; r < c.rows; ++r)
      std::memcpy(want.data() + c.dst + r * c.dst_pitch, init.data() + c.src + r * c.src_pitch, c.row_bytes);
    cuda_synchronize();
    be->download(got.data(), b.data(), n);
    EXPECT_EQ(got, want) << c.dst << " <- " << c.src << ", " << c.rows << " rows of " << c.row_bytes;
  }
}

// Naive causal/window GQA attention in double on bf16 K/V (head-major, head stride in elements).
std::vector<double> ref_attention(const AttentionArgs& a, const std::vector<float>& q,
                                  const std::vector<uint16_t>& k, const std::vector<uint16_t>& v) {
  const int64_t d = a.head_dim, G = a.n_head / a.n_head_kv;
  std::vector<double> out(size_t(a.T * a.n_head * d), 0.0);
  for (int64_t t = 0; t < a.T; ++t)
    for (int64_t h = 0; h < a.n_head; ++h) {
      const int64_t qp = a.q_pos0 + t, hk = h / G;
      std::vector<double> s(size_t(a.L), 0.0);
      std::vector<bool> vis(size_t(a.L), false);
      double mx = -INFINITY;
      for (int64_t j = 0; j < a.L; ++j) {
        const int64_t kp = a.k_pos0 + j;
        if (kp > qp || (a.window > 0 && qp - kp >= a.window)) continue;
        double dot = 0;
        for (int64_t i = 0; i < d; ++i)
          dot += double(q[size_t((t * a.n_head + h) * d + i)]) *
                 bf16_to_f32(k[size_t(hk * a.kv_head_stride + j * d + i)]);
        s[size_t(j)] = dot * a.scale;
        vis[size_t(j)] = true;
        mx = std::max(mx, s[size_t(j)]);
      }
      if (mx == -INFINITY) continue;
      double sum = 0;
      for (int64_t j = 0; j < a.L; ++j)
        sum += vis[size_t(j)] ? (s[size_t(j)] = std::exp(s[size_t(j)] - mx)) : 0.0;
      for (int64_t j = 0; j < a.L; ++j)
        if (vis[size_t(j)])
          for (int64_t i = 0; i < d; ++i)
            out[size_t((t * a.n_head + h) * d + i)] +=
                s[size_t(j)] / sum * bf16_to_f32(v[size_t(hk * a.kv_head_stride + j * d + i)]);
    }
  return out;
}

TEST(CudaKv, Bf16AttentionMatchesReferenceOnEveryKernel) {
  TQ_REQUIRE_GPU();
  auto be = make_cuda_backend();
  const cuda::DeviceInfo dev = cuda::device_info(0);
  struct Case { int64_t T, L, nh, nkv, d, q_pos0, k_pos0, window; cuda::AttnKernel want; };
  using K = cuda::AttnKernel;
  for (Case c : {Case{1, 700, 32, 8, 128, 699, 0, 0, K::DecodeSplitK},     // dense decode
                 Case{1, 5000, 16, 2, 128, 4999, 0, 0, K::DecodeSplitK},   // long, GQA 8
                 Case{1, 33, 8, 8, 64, 32, 0, 0, K::DecodeSplitK},         // d = 64, MHA
                 Case{1, 48, 8, 2, 128, 90, 43, 48, K::DecodeSplitK},      // rotating, all held
                 Case{1, 60, 8, 2, 128, 90, 31, 48, K::Generic},           // window cuts keys
                 Case{50, 300, 32, 8, 128, 250, 0, 0, K::PrefillFlash},    // prefill chunk
                 Case{33, 80, 6, 3, 64, 120, 73, 48, K::PrefillFlash},     // window + k_pos0
                 Case{130, 130, 16, 4, 256, 0, 0, 0, K::PrefillFlash}}) {  // d = 256, fresh
    cuda::AttnShape s;
    s.n_query = c.T, s.n_head = c.nh, s.n_head_kv = c.nkv, s.head_dim = c.d, s.max_len = c.L;
    s.format = cuda::KvFormat::BF16;
    s.all_keys_visible = c.k_pos0 + c.L - 1 <= c.q_pos0 &&
                         (c.window == 0 || c.q_pos0 - c.k_pos0 < c.window);
    ASSERT_EQ(cuda::choose_attention(dev, s).kernel, c.want) << c.T << " x " << c.L;
    const int64_t cap = c.L + 19;
    auto q = randn(size_t(c.T * c.nh * c.d));
    auto bf16_randn = [](size_t n) {
      std::vector<uint16_t> b(n);
      auto f = randn(n);
      for (size_t i = 0; i < n; ++i) b[i] = f32_to_bf16(f[i]);
      return b;
    };
    auto k = bf16_randn(size_t(c.nkv * cap * c.d)), v = bf16_randn(size_t(c.nkv * cap * c.d));
    DeviceBuffer qd = to_dev(*be, q), kd = to_dev(*be, k), vd = to_dev(*be, v);
    DeviceBuffer od = poisoned(*be, q.size());
    AttentionArgs a;
    a.q = qd.f32(), a.k = kd.data(), a.v = vd.data(), a.out = od.f32();
    a.kv_dtype = DType::BF16;
    a.T = c.T, a.L = c.L, a.n_head = c.nh, a.n_head_kv = c.nkv, a.head_dim = c.d;
    a.kv_head_stride = cap * c.d, a.q_pos0 = c.q_pos0, a.k_pos0 = c.k_pos0, a.window = c.window;
    a.scale = 1.0f / std::sqrt(float(c.d));
    be->attention(a);
    auto oh = from_dev(*be, od, q.size());
    // The tensor-core kernels round q and the probabilities to bf16; generic reads K/V exactly.
    const double tol = c.want == K::Generic ? 1e-5 : 1.5e-2;
    EXPECT_LT(rel_err(oh, ref_attention(a, q, k, v)), tol)
        << cuda::attn_kernel_name(c.want) << " T=" << c.T << " L=" << c.L;
  }
}

// Each fused op against Backend's default (the composition of the basic ops, each tested
// against double references in cuda_ops_test.cpp) on the same inputs.
TEST(CudaKv, FusedOpsMatchTheComposedOps) {
  TQ_REQUIRE_GPU();
  struct Shape {
    int64_t T, H, N1, N2, NO, I;
  };
  // T = 1: the decode GEMVs; T = 7: the GEMM paths. N1 odd: a GEMV block straddles the two
  // weights' rows. The second T = 1 shape takes 8 rows per block (N1 + N2 >= 4096), K not a
  // multiple of 256 chunks (the per-lane tail), and a down projection whose staged input
  // (I * 4 bytes) exceeds 48 KB of shared memory.
  // TQ_GEMV_GRID=7: the staged GEMV runs at most 7 blocks, each looping over many row groups
  // (the path large weights take with a one-wave grid); TQ_GEMV_WARPS=32: one block of 32 warps
  // per SM (rows per block 4..32).
  for (const char* warps : {"8", "32"})
  for (const char* grid : {"", "7"})
  // I = 1003: the SwiGLU-pairs GEMV's last group holds fewer pairs than rows.
  for (const Shape& sh : {Shape{1, 512, 1027, 256, 384, 640}, Shape{7, 512, 1027, 256, 384, 640},
                          Shape{1, 1032, 4099, 1024, 4104, 12296},
                          Shape{1, 256, 64, 32, 64, 1003}}) {
    SCOPED_TRACE(testing::Message() << "T=" << sh.T << " H=" << sh.H << " I=" << sh.I
                                    << " TQ_GEMV_GRID=" << grid << " TQ_GEMV_WARPS=" << warps);
    // The references run the default grid and block (TQ_GEMV_GRID, TQ_GEMV_WARPS unset), the
    // fused ops the tested ones.
    auto use_grid = [&](bool tested) {
      setenv("TQ_GEMV_GRID", tested ? grid : "", 1);
      setenv("TQ_GEMV_WARPS", tested ? warps : "", 1);
    };
    auto be = make_cuda_backend();
    const int64_t T = sh.T, H = sh.H, N1 = sh.N1, N2 = sh.N2, NO = sh.NO, I = sh.I;
    auto host_w = [](int64_t r, int64_t c, float s) { return randn(size_t(r * c), s); };
    auto wn = host_w(1, H, 1.0f), w1 = host_w(N1, H, 0.05f), w2 = host_w(N2, H, 0.05f);
    auto b1 = host_w(1, N1, 1.0f), wo = host_w(H, NO, 0.05f), wd = host_w(H, I, 0.05f);
    Weight norm = be->load_weight(DType::F32, wn.data(), 1, H);
    Weight W1 = be->load_weight(DType::F32, w1.data(), N1, H);
    Weight W2 = be->load_weight(DType::F32, w2.data(), N2, H);
    Weight B1 = be->load_weight(DType::F32, b1.data(), 1, N1);
    Weight Wo = be->load_weight(DType::F32, wo.data(), H, NO);
    Weight Wd = be->load_weight(DType::F32, wd.data(), H, I);
    auto x = randn(size_t(T * H));
    DeviceBuffer xd = to_dev(*be, x);

    // norm_linear with a bias on the first weight only.
    DeviceBuffer hf = poisoned(*be, size_t(T * H)), o1 = poisoned(*be, size_t(T * N1)),
                 o2 = poisoned(*be, size_t(T * N2));
    DeviceBuffer hr = poisoned(*be, size_t(T * H)), r1 = poisoned(*be, size_t(T * N1)),
                 r2 = poisoned(*be, size_t(T * N2));
    const Weight* ws[] = {&W1, &W2};
    const Weight* bs[] = {&B1, nullptr};
    float* outs[] = {o1.f32(), o2.f32()};
    float* refs[] = {r1.f32(), r2.f32()};
    use_grid(true);
    be->norm_linear(xd.f32(), T, norm, 1e-6f, hf.f32(), ws, outs, bs);
    use_grid(false);
    be->Backend::norm_linear(xd.f32(), T, norm, 1e-6f, hr.f32(), ws, refs, bs);
    auto to_d = [](const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); };
    EXPECT_LT(rel_err(from_dev(*be, hf, size_t(T * H)), to_d(from_dev(*be, hr, size_t(T * H)))),
              1e-6);
    EXPECT_LT(rel_err(from_dev(*be, o1, size_t(T * N1)), to_d(from_dev(*be, r1, size_t(T * N1)))),
              1e-5);
    EXPECT_LT(rel_err(from_dev(*be, o2, size_t(T * N2)), to_d(from_dev(*be, r2, size_t(T * N2)))),
              1e-5);

    // linear_add: x += in . Wo^T.
    auto in = randn(size_t(T * NO));
    DeviceBuffer ind = to_dev(*be, in), xa = to_dev(*be, x), xb = to_dev(*be, x);
    DeviceBuffer scratch = poisoned(*be, size_t(T * H));
    use_grid(true);
    be->linear_add(ind.f32(), T, Wo, xa.f32(), scratch.f32());
    use_grid(false);
    be->Backend::linear_add(ind.f32(), T, Wo, xb.f32(), scratch.f32());
    EXPECT_LT(rel_err(from_dev(*be, xa, size_t(T * H)), to_d(from_dev(*be, xb, size_t(T * H)))),
              1e-5);

    // swiglu_down_add: x += Wd . (silu(gate) * up).
    auto gate = randn(size_t(T * I)), up = randn(size_t(T * I));
    DeviceBuffer ga = to_dev(*be, gate), gb = to_dev(*be, gate), ud = to_dev(*be, up);
    DeviceBuffer ya = to_dev(*be, x), yb = to_dev(*be, x);
    use_grid(true);
    be->swiglu_down_add(ga.f32(), ud.f32(), T, Wd, ya.f32(), scratch.f32());
    use_grid(false);
    be->Backend::swiglu_down_add(gb.f32(), ud.f32(), T, Wd, yb.f32(), scratch.f32());
    EXPECT_LT(rel_err(from_dev(*be, ya, size_t(T * H)), to_d(from_dev(*be, yb, size_t(T * H)))),
              1e-5);

    // norm_swiglu_down_add: the MLP block (at T = 1 one GEMV writes silu(gate) * up for the
    // down projection), workspaces poisoned.
    auto wg = host_w(I, H, 0.05f), wu = host_w(I, H, 0.05f);
    Weight Wg = be->load_weight(DType::F32, wg.data(), I, H);
    Weight Wu = be->load_weight(DType::F32, wu.data(), I, H);
    DeviceBuffer za = to_dev(*be, x), zb = to_dev(*be, x);
    DeviceBuffer g1 = poisoned(*be, size_t(T * I)), u1 = poisoned(*be, size_t(T * I));
    DeviceBuffer g2 = poisoned(*be, size_t(T * I)), u2 = poisoned(*be, size_t(T * I));
    use_grid(true);
    be->norm_swiglu_down_add(za.f32(), T, norm, 1e-6f, Wg, Wu, Wd, hf.f32(), g1.f32(), u1.f32());
    use_grid(false);
    be->Backend::norm_swiglu_down_add(zb.f32(), T, norm, 1e-6f, Wg, Wu, Wd, hr.f32(), g2.f32(),
                                      u2.f32());
    EXPECT_LT(rel_err(from_dev(*be, za, size_t(T * H)), to_d(from_dev(*be, zb, size_t(T * H)))),
              1e-5);
  }
  unsetenv("TQ_GEMV_GRID");
  unsetenv("TQ_GEMV_WARPS");
}

// Three one-token linear layers queued back to back, each reading the previous one's output
// (the decode GEMVs start with programmatic dependent launch: a block that read its input
// before the previous kernel finished would see the NaN poison), against a double reference
// over the bf16-rounded weights.
TEST(CudaKv, GemvChainReadsEachPreviousOutput) {
  TQ_REQUIRE_GPU();
  auto be = make_cuda_backend();
  const int64_t dims[] = {1024, 4096, 2048, 1032};  // K of layer i = dims[i], N = dims[i + 1]
  std::vector<Weight> ws;
  std::vector<std::vector<float>> hw;
  for (int i = 0; i < 3; ++i) {
    hw.push_back(randn(size_t(dims[i + 1] * dims[i]), 0.05f));
    ws.push_back(be->load_weight(DType::F32, hw.back().data(), dims[i + 1], dims[i]));
  }
  auto x = randn(size_t(dims[0]));
  DeviceBuffer in = to_dev(*be, x);
  std::vector<DeviceBuffer> outs;
  for (int i = 0; i < 3; ++i) outs.push_back(poisoned(*be, size_t(dims[i + 1])));
  for (int rep = 0; rep < 3; ++rep)  // repeated: later chains start behind a finished one
    for (int i = 0; i < 3; ++i)
      be->linear(i == 0 ? in.f32() : outs[size_t(i - 1)].f32(), 1, ws[size_t(i)],
                 outs[size_t(i)].f32(), nullptr);
  std::vector<double> ref(x.begin(), x.end());
  for (int i = 0; i < 3; ++i) {
    std::vector<double> next(size_t(dims[i + 1]));
    for (int64_t n = 0; n < dims[i + 1]; ++n) {
      double s = 0.0;
      for (int64_t k = 0; k < dims[i]; ++k)
        s += double(round_bf16(hw[size_t(i)][size_t(n * dims[i] + k)])) * ref[size_t(k)];
      next[size_t(n)] = s;
    }
    ref = std::move(next);
    EXPECT_LT(rel_err(from_dev(*be, outs[size_t(i)], size_t(dims[i + 1])), ref), 1e-4)
        << "layer " << i;
  }
}

// qk_norm_rope against a double reference (per-head RMSNorm, then rotate-half RoPE), with and
// without the norms.
TEST(CudaKv, QkNormRopeMatchesReference) {
  TQ_REQUIRE_GPU();
  auto be = make_cuda_backend();
  const int64_t T = 5, nh = 6, nkv = 2, d = 128, pos0 = 3000;
  std::vector<float> inv(size_t(d / 2));
  for (int64_t i = 0; i < d / 2; ++i) inv[size_t(i)] = float(std::pow(1e6, -2.0 * i / d));
  auto qn = randn(size_t(d)), kn = randn(size_t(d));
  Weight QN = be->load_weight(DType::F32, qn.data(), 1, d);
  Weight KN = be->load_weight(DType::F32, kn.data(), 1, d);
  for (bool with_norm : {true, false}) {
    auto q = randn(size_t(T * nh * d), 3.0f), k = randn(size_t(T * nkv * d), 3.0f);
    DeviceBuffer qd = to_dev(*be, q), kd = to_dev(*be, k);
    be->qk_norm_rope(qd.f32(), kd.f32(), T, nh, nkv, d, with_norm ? &QN : nullptr,
                     with_norm ? &KN : nullptr, 1e-6f, pos0, inv);
    auto ref = [&](const std::vector<float>& x, int64_t heads, const std::vector<float>& w) {
      std::vector<double> out(x.size());
      for (int64_t t = 0; t < T; ++t)
        for (int64_t h = 0; h < heads; ++h) {
          const size_t o = size_t((t * heads + h) * d);
          double ss = 0;
          for (int64_t i = 0; i < d; ++i) ss += double(x[o + size_t(i)]) * x[o + size_t(i)];
          const double inv_rms = with_norm ? 1.0 / std::sqrt(ss / double(d) + 1e-6) : 1.0;
          auto y = [&](int64_t i) {
            return with_norm ? w[size_t(i)] * x[o + size_t(i)] * inv_rms : double(x[o + size_t(i)]);
          };
          for (int64_t i = 0; i < d / 2; ++i) {
            const double a = double(float(pos0 + t) * inv[size_t(i)]);
            const double x1 = y(i), x2 = y(i + d / 2);
            out[o + size_t(i)] = x1 * std::cos(a) - x2 * std::sin(a);
            out[o + size_t(i + d / 2)] = x2 * std::cos(a) + x1 * std::sin(a);
          }
        }
      return out;
    };
    EXPECT_LT(rel_err(from_dev(*be, qd, q.size()), ref(q, nh, qn)), 1e-5) << with_norm;
    EXPECT_LT(rel_err(from_dev(*be, kd, k.size()), ref(k, nkv, kn)), 1e-5) << with_norm;
  }
}

}  // namespace
}  // namespace tq::test
