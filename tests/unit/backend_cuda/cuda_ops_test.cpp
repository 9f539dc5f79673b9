// CUDA backend ops against double-precision references on the same (bf16-rounded where the
// device rounds) inputs: embedding, RMSNorm, linear (cuBLASLt), RoPE, SwiGLU, add, attention.
#include <gtest/gtest.h>

#include <cstdlib>

#include "gpu_test_util.h"

namespace tq::test {
namespace {

TEST(CudaOps, DeviceIsReported) {
  TQ_REQUIRE_GPU();
  std::printf("device: %s\n", cuda_device_summary().c_str());
  auto be = make_cuda_backend();
  EXPECT_STREQ(be->name(), "cuda");
}

TEST(CudaOps, EmbeddingRmsNormSwigluAdd) {
  TQ_REQUIRE_GPU();
  auto be = make_cuda_backend();
  const int64_t V = 1000, H = 896, T = 37;
  auto table = randn(size_t(V * H));
  std::vector<uint16_t> tb(table.size());
  for (size_t i = 0; i < table.size(); ++i) tb[i] = f32_to_bf16(table[i]);
  Weight wt = be->load_weight(DType::BF16, tb.data(), V, H);
  std::vector<int32_t> ids(T);
  for (auto& id : ids) id = int32_t(rng()() % V);
  DeviceBuffer x = poisoned(*be, size_t(T * H));
  be->embedding(ids, wt, x.f32());
  auto xh = from_dev(*be, x, size_t(T * H));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < H; ++i)
      ASSERT_EQ(xh[size_t(t * H + i)], bf16_to_f32(tb[size_t(ids[size_t(t)] * H + i)]));

  auto g = randn(size_t(H));
  Weight wg = be->load_weight(DType::F32, g.data(), 1, H);
  DeviceBuffer y = poisoned(*be, size_t(T * H));
  be->rms_norm(x.f32(), T, wg, 1e-6f, y.f32());
  auto yh = from_dev(*be, y, size_t(T * H));
  std::vector<double> ref(size_t(T * H));
  for (int64_t t = 0; t < T; ++t) {
    double ss = 0;
    for (int64_t i = 0; i < H; ++i) ss += double(xh[size_t(t * H + i)]) * xh[size_t(t * H + i)];
    double inv = 1.0 / std::sqrt(ss / double(H) + 1e-6);
    for (int64_t i = 0; i < H; ++i) ref[size_t(t * H + i)] = g[size_t(i)] * xh[size_t(t * H + i)] * inv;
  }
  EXPECT_LT(rel_err(yh, ref), 1e-5);

  be->swiglu(x.f32(), y.f32(), y.f32(), T * H);  // in place on up, as the model does
  auto sh = from_dev(*be, y, size_t(T * H));
  for (size_t i = 0; i < ref.size(); ++i) ref[i] = xh[i] / (1.0 + std::exp(-double(xh[i]))) * yh[i];
  EXPECT_LT(rel_err(sh, ref), 1e-5);
  be->add(y.f32(), x.f32(), T * H);
  auto ah = from_dev(*be, y, size_t(T * H));
  for (size_t i = 0; i < ref.size(); ++i) ref[i] = double(sh[i]) + xh[i];
  EXPECT_LT(rel_err(ah, ref), 1e-6);
}

TEST(CudaOps, LinearMatchesBf16Reference) {
  TQ_REQUIRE_GPU();
  auto be = make_cuda_backend();
  // TQ_GEMV_GRID=5: the staged GEMV's blocks each loop over several row groups;
  // TQ_GEMV_WARPS=32: one block of 32 warps per SM.
  for (const char* warps : {"8", "32"})
  for (const char* grid : {"", "5"})
  for (auto [T, N, K] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
           {1, 1536, 512}, {1, 1024, 4096}, {1, 151, 12288}, {7, 512, 1536}, {300, 4096, 512}}) {
    setenv("TQ_GEMV_GRID", grid, 1);
    setenv("TQ_GEMV_WARPS", warps, 1);
    // One token runs the GEMV on f32 activations; more go through cuBLASLt on bf16 ones.
    const bool f32_x = T == 1;
    auto w = randn(size_t(N * K), 0.05f);
    auto x = randn(size_t(T * K));
    auto bias = randn(size_t(N));
    Weight W = be->load_weight(DType::F32, w.data(), N, K);
    Weight B = be->load_weight(DType::F32, bias.data(), 1, N);
    DeviceBuffer xd = to_dev(*be, x), out = poisoned(*be, size_t(T * N));
    be->linear(xd.f32(), T, W, out.f32(), &B);
    auto oh = from_dev(*be, out, size_t(T * N));
    std::vector<double> ref(size_t(T * N));
    for (int64_t t = 0; t < T; ++t)
      for (int64_t n = 0; n < N; ++n) {
        double s = bias[size_t(n)];
        for (int64_t k = 0; k < K; ++k)
          s += double(f32_x ? x[size_t(t * K + k)] : round_bf16(x[size_t(t * K + k)])) *
               round_bf16(w[size_t(n * K + k)]);
        ref[size_t(t * N + n)] = s;
      }
    EXPECT_LT(rel_err(oh, ref), 1e-4) << T << "x" << N << "x" << K << " grid " << grid
                                      << " warps " << warps;
  }
  unsetenv("TQ_GEMV_GRID");
  unsetenv("TQ_GEMV_WARPS");
}

TEST(CudaOps, RopeRotatesHalves) {
  TQ_REQUIRE_GPU();
  auto be = make_cuda_backend();
  const int64_t T = 9, nh = 4, d = 128, pos0 = 1000;
  std::vector<float> inv(size_t(d / 2));
  for (int64_t i = 0; i < d / 2; ++i) inv[size_t(i)] = float(std::pow(1e6, -2.0 * i / d));
  auto x = randn(size_t(T * nh * d));
  DeviceBuffer xd = to_dev(*be, x);
  be->rope(xd.f32(), T, nh, d, pos0, inv);
  auto oh = from_dev(*be, xd, x.size());
  std::vector<double> ref(x.size());
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < nh; ++h)
      for (int64_t i = 0; i < d / 2; ++i) {
        double a = double(float(pos0 + t) * inv[size_t(i)]);
        size_t o = size_t((t * nh + h) * d);
        double x1 = x[o + size_t(i)], x2 = x[o + size_t(i + d / 2)];
        ref[o + size_t(i)] = x1 * std::cos(a) - x2 * std::sin(a);
        ref[o + size_t(i + d / 2)] = x2 * std::cos(a) + x1 * std::sin(a);
      }
  EXPECT_LT(rel_err(oh, ref), 1e-5);
}

// Naive causal/window GQA attention in double.
std::vector<double> ref_attention(const AttentionArgs& a, const std::vector<float>& q,
                                  const std::vector<float>& k, const std::vector<float>& v) {
  const int64_t d = a.head_dim, G = a.n_head / a.n_head_kv;
  std::vector<double> out(size_t(a.T * a.n_head * d), 0.0);
  for (int64_t t = 0; t < a.T; ++t)
    for (int64_t h = 0; h < a.n_head; ++h) {
      const int64_t qp = a.q_pos0 + t, hk = h / G;
      std::vector<double> s(size_t(a.L), -INFINITY);
      double mx = -INFINITY;
      for (int64_t j = 0; j < a.L; ++j) {
        const int64_t kp = a.k_pos0 + j;
        if (kp > qp || (a.window > 0 && qp - kp >= a.window)) continue;
        double dot = 0;
        for (int64_t i = 0; i < d; ++i)
          dot += double(q[size_t((t * a.n_head + h) * d + i)]) *
                 k[size_t(hk * a.kv_head_stride + j * d + i)];
        s[size_t(j)] = dot * a.scale;
        mx = std::max(mx, s[size_t(j)]);
      }
      if (mx == -INFINITY) continue;
      double sum = 0;
      for (auto& x : s) sum += (x = std::exp(x - mx));
      for (int64_t j = 0; j < a.L; ++j)
        for (int64_t i = 0; i < d; ++i)
          out[size_t((t * a.n_head + h) * d + i)] +=
              s[size_t(j)] / sum * v[size_t(hk * a.kv_head_stride + j * d + i)];
    }
  return out;
}

TEST(CudaOps, GenericAttentionCausalWindowGqa) {
  TQ_REQUIRE_GPU();
  auto be = make_cuda_backend();
  struct Case { int64_t T, L, nh, nkv, d, q_pos0, k_pos0, window; };
  for (Case c : {Case{1, 700, 8, 2, 128, 699, 0, 0}, Case{50, 300, 4, 2, 128, 250, 0, 0},
                 Case{33, 80, 6, 3, 64, 120, 73, 48}, Case{5, 5, 2, 1, 256, 0, 0, 0}}) {
    const int64_t cap = c.L + 17;
    auto q = randn(size_t(c.T * c.nh * c.d));
    auto k = randn(size_t(c.nkv * cap * c.d));
    auto v = randn(size_t(c.nkv * cap * c.d));
    DeviceBuffer qd = to_dev(*be, q), kd = to_dev(*be, k), vd = to_dev(*be, v);
    DeviceBuffer od = poisoned(*be, q.size());
    AttentionArgs a;
    a.q = qd.f32(), a.k = kd.f32(), a.v = vd.f32(), a.out = od.f32();
    a.T = c.T, a.L = c.L, a.n_head = c.nh, a.n_head_kv = c.nkv, a.head_dim = c.d;
    a.kv_head_stride = cap * c.d, a.q_pos0 = c.q_pos0, a.k_pos0 = c.k_pos0, a.window = c.window;
    a.scale = 1.0f / std::sqrt(float(c.d));
    be->attention(a);
    auto oh = from_dev(*be, od, q.size());
    EXPECT_LT(rel_err(oh, ref_attention(a, q, k, v)), 1e-5) << c.T << " x " << c.L;
  }
}

}  // namespace
}  // namespace tq::test
