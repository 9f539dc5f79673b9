// The dense and rotating KV caches on the CUDA backend (bf16 stores, kv_write / kv_read, the
// memmove shift, attention through split-K decode and flash prefill) against the same caches on
// the CPU backend, over prefill chunks then decode steps. K/V are bf16 values, so both caches
// hold the same numbers; the GPU's kernels round q and the probabilities to bf16. Skips without
// a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_backend.h"
#include "core/dtype.h"
#include "kv/layer_cache.h"

namespace tq::test {
namespace {

std::vector<float> randn(std::mt19937& g, size_t n, bool bf16) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = bf16 ? bf16_to_f32(f32_to_bf16(d(g))) : d(g);
  return v;
}

double rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

class CudaCaches : public ::testing::TestWithParam<int64_t> {};  // window (0: dense)

TEST_P(CudaCaches, MatchTheCpuCachesOverPrefillAndDecode) {
  if (!cuda_available()) GTEST_SKIP() << "no usable CUDA GPU here: skipping";
  const int64_t window = GetParam();
  auto cpu = make_cpu_backend();
  auto gpu = make_cuda_backend();
  ASSERT_EQ(gpu->kv_dtype(), DType::BF16);
  const LayerShape s{8, 2, 128};
  auto make = [&](Backend& be) {
    return window ? make_rotating_cache(be, s, window) : make_dense_cache(be, s);
  };
  auto c_cpu = make(*cpu), c_gpu = make(*gpu);
  std::mt19937 g{std::random_device{}()};
  const float scale = 1.0f / std::sqrt(128.0f);
  int64_t pos = 0;
  // Prefill chunks (the first longer than the window), then one-token decode steps.
  std::vector<int64_t> steps = {300, 77, 1, 1, 2};
  for (int i = 0; i < 40; ++i) steps.push_back(1);
  for (int64_t T : steps) {
    const size_t nq = size_t(T * s.n_head * s.head_dim), nk = size_t(T * s.n_head_kv * s.head_dim);
    auto q = randn(g, nq, false), k = randn(g, nk, true), v = randn(g, nk, true);
    std::vector<float> want(nq), got(nq, NAN);
    c_cpu->append_and_attend(*cpu, q.data(), k.data(), v.data(), T, scale, want.data());

    DeviceBuffer qd(gpu.get(), nq * 4), kd(gpu.get(), nk * 4), vd(gpu.get(), nk * 4),
        od(gpu.get(), nq * 4);
    gpu->upload(qd.data(), q.data(), nq * 4);
    gpu->upload(kd.data(), k.data(), nk * 4);
    gpu->upload(vd.data(), v.data(), nk * 4);
    gpu->upload(od.data(), got.data(), nq * 4);  // NaN: every output must be written
    c_gpu->append_and_attend(*gpu, qd.f32(), kd.f32(), vd.f32(), T, scale, od.f32());
    gpu->download(got.data(), od.data(), nq * 4);
    EXPECT_LT(rel_err(got, want), 2e-2) << "window " << window << ": step of " << T
                                         << " tokens at position " << pos;
    pos += T;
    ASSERT_EQ(c_gpu->n_tokens(), pos);
  }
  if (window == 0) {  // the stored rows read back exactly (they are bf16 values)
    const size_t n = size_t(pos * s.n_head_kv * s.head_dim);
    std::vector<float> kw(n), vw(n), kg(n, NAN), vg(n, NAN);
    c_cpu->read_tokens(*cpu, 0, pos, kw.data(), vw.data());
    DeviceBuffer kd(gpu.get(), n * 4), vd(gpu.get(), n * 4);
    c_gpu->read_tokens(*gpu, 0, pos, kd.f32(), vd.f32());
    gpu->download(kg.data(), kd.data(), n * 4);
    gpu->download(vg.data(), vd.data(), n * 4);
    EXPECT_EQ(kg, kw);
    EXPECT_EQ(vg, vw);
  }
}

INSTANTIATE_TEST_SUITE_P(Windows, CudaCaches, ::testing::Values(0, 128, 300));

}  // namespace
}  // namespace tq::test
