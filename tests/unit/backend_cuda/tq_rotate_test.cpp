// The TurboQuant prefill's helper kernels (tq_rotate.h) against the CPU: the rotation of rows
// against quant::Rotation (the same float operations, so bit for bit), the merge of two attention
// parts with the inverse rotation against a double-precision merge and Rotation::apply_t, and the
// f32 -> bf16 window copy against the host rounding, and qk_norm_rope with the query rotation
// fused against the two passes. Vector (aligned) and scalar (misaligned) paths both; fresh
// random data, outputs poisoned.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "backend/cuda/ops_kernels.h"
#include "backend/cuda/tq_cuda.h"
#include "backend/cuda/tq_rotate.h"
#include "gpu_test_util.h"
#include "quant/vector_codec.h"

namespace tq::test {
namespace {

quant::VectorCodec codec_for(int d) {
  quant::TqFormat f;
  f.head_dim = d;
  f.key_seed = rng()();
  f.value_seed = rng()();
  return quant::VectorCodec(f.key_config());
}

// Device copy of `v` starting `shift` floats into its buffer (shift 1: 4-byte aligned only).
DeviceBuffer shifted(Backend& be, const std::vector<float>& v, int shift) {
  std::vector<float> padded(v.size() + 4, std::numeric_limits<float>::quiet_NaN());
  std::copy(v.begin(), v.end(), padded.begin() + shift);
  return to_dev(be, padded);
}
std::vector<float> read_shifted(Backend& be, const DeviceBuffer& b, size_t n, int shift) {
  std::vector<float> all = from_dev(be, b, n + 4);
  return std::vector<float>(all.begin() + shift, all.begin() + shift + long(n));
}

TEST(CudaTqRotate, RowsMatchTheCpuRotationBitForBit) {
  TQ_REQUIRE_GPU();
  auto be = make_cuda_backend();
  for (int d : {64, 128, 256})
    for (bool inverse : {false, true})
      for (int shift : {0, 1}) {
        SCOPED_TRACE(testing::Message() << "d " << d << " inverse " << inverse << " shift " << shift);
        const quant::VectorCodec codec = codec_for(d);
        const cuda::TqCodecDev dc = cuda::make_tq_codec_dev(codec);
        const int64_t rows = 1003;  // not a multiple of the 8 rows a block
        const auto x = randn(size_t(rows * d), 2.0f);
        DeviceBuffer xd = shifted(*be, x, shift);
        DeviceBuffer yd = shifted(*be, std::vector<float>(x.size(), NAN), shift);
        cuda::tq_rotate(xd.f32() + shift, yd.f32() + shift, rows, dc, inverse);
        const auto y = read_shifted(*be, yd, x.size(), shift);
        std::vector<float> ref(static_cast<size_t>(d));
        int64_t diff = 0;
        for (int64_t r = 0; r < rows; ++r) {
          if (inverse)
            codec.rotation().apply_t(x.data() + r * d, ref.data());
          else
            codec.rotation().apply(x.data() + r * d, ref.data());
          diff += std::memcmp(ref.data(), y.data() + r * d, size_t(d) * 4) != 0;
        }
        EXPECT_EQ(diff, 0) << "rows differing from the CPU rotation";
        // In place gives the same bytes.
        cuda::tq_rotate(xd.f32() + shift, xd.f32() + shift, rows, dc, inverse);
        EXPECT_EQ(read_shifted(*be, xd, x.size(), shift), y);
      }
}

TEST(CudaTqRotate, MergeRotateMatchesTheMergedRowsRotatedBack) {
  TQ_REQUIRE_GPU();
  auto be = make_cuda_backend();
  const float inf = std::numeric_limits<float>::infinity();
  for (int d : {64, 128, 256})
    for (int shift : {0, 1}) {
      SCOPED_TRACE(testing::Message() << "d " << d << " shift " << shift);
      const quant::VectorCodec codec = codec_for(d);
      const cuda::TqCodecDev dc = cuda::make_tq_codec_dev(codec);
      const int64_t rows = 517;
      auto a = randn(size_t(rows * d)), b = randn(size_t(rows * d));
      auto la = randn(size_t(rows), 3.0f), lb = randn(size_t(rows), 3.0f);
      // Rows with one side empty (its output NaN: it must not be read) and both empty (zeros).
      for (int64_t r = 0; r < rows; r += 7) {
        la[size_t(r)] = -inf;
        std::fill_n(a.begin() + r * d, d, NAN);
      }
      for (int64_t r = 3; r < rows; r += 11) {
        lb[size_t(r)] = -inf;
        std::fill_n(b.begin() + r * d, d, NAN);
      }
      la[14] = lb[14] = -inf;  // (14: a multiple of 7, so its a row is NaN too)
      std::fill_n(b.begin() + 14 * d, d, NAN);
      DeviceBuffer ad = shifted(*be, a, shift), bd = shifted(*be, b, shift);
      DeviceBuffer lad = to_dev(*be, la), lbd = to_dev(*be, lb);
      DeviceBuffer yd = shifted(*be, std::vector<float>(a.size(), NAN), shift);
      cuda::tq_merge_rotate(ad.f32() + shift, lad.f32(), bd.f32() + shift, lbd.f32(), yd.f32() + shift,
                            rows, dc);
      const auto y = read_shifted(*be, yd, a.size(), shift);
      std::vector<double> ref(a.size());
      std::vector<float> merged(static_cast<size_t>(d)), rot(static_cast<size_t>(d));
      for (int64_t r = 0; r < rows; ++r) {
        const double m = std::max(la[size_t(r)], lb[size_t(r)]);
        const double wa = m == -inf ? 0.0 : std::exp(la[size_t(r)] - m);
        const double wb = m == -inf ? 0.0 : std::exp(lb[size_t(r)] - m);
        for (int i = 0; i < d; ++i) {
          const double xa = wa > 0 ? a[size_t(r * d + i)] : 0.0, xb = wb > 0 ? b[size_t(r * d + i)] : 0.0;
          merged[size_t(i)] = wa + wb > 0 ? float((wa * xa + wb * xb) / (wa + wb)) : 0.0f;
        }
        codec.rotation().apply_t(merged.data(), rot.data());
        for (int i = 0; i < d; ++i) ref[size_t(r * d + i)] = rot[size_t(i)];
      }
      EXPECT_LT(rel_err(y, ref), 2e-6);
      for (int i = 0; i < d; ++i) EXPECT_EQ(y[size_t(14 * d + i)], 0.0f) << "both sides empty";
      // The output may replace one of the inputs.
      cuda::tq_merge_rotate(ad.f32() + shift, lad.f32(), bd.f32() + shift, lbd.f32(), ad.f32() + shift,
                            rows, dc);
      EXPECT_EQ(read_shifted(*be, ad, a.size(), shift), y);
    }
}

TEST(CudaTqRotate, RowsTo16BitMatchTheHostRounding) {
  TQ_REQUIRE_GPU();
  auto be = make_cuda_backend();
  const int n_head = 3, d = 128;
  const int64_t n_rows = 517, src_hs = 600, dst_hs = 576;
  for (int kind = 0; kind < 4; ++kind) {
    const bool fp16 = kind >= 2;
    const int shift = kind & 1;
    SCOPED_TRACE(testing::Message() << "shift " << shift << (fp16 ? " fp16" : " bf16"));
    const auto x = randn(size_t(n_head * src_hs * d), 5.0f);
    DeviceBuffer xd = shifted(*be, x, shift);
    const std::vector<uint16_t> poison(size_t(n_head * dst_hs * d + 8), 0xFFFF);
    DeviceBuffer yd = to_dev(*be, poison);
    auto* dst = static_cast<uint16_t*>(yd.data()) + shift;  // shift 1: 2-byte aligned only
    cuda::tq_rows_to_16bit(xd.f32() + shift, src_hs, dst, dst_hs, n_head, n_rows, d, fp16);
    cuda_synchronize();
    std::vector<uint16_t> y(poison.size());
    be->download(y.data(), yd.data(), y.size() * 2);
    int64_t wrong = 0, touched = 0;
    for (int h = 0; h < n_head; ++h)
      for (int64_t t = 0; t < dst_hs; ++t)
        for (int i = 0; i < d; ++i) {
          const uint16_t got = y[size_t(shift + (h * dst_hs + t) * d + i)];
          const float xi = t < n_rows ? x[size_t((h * src_hs + t) * d + i)] : 0.0f;
          if (t < n_rows)
            wrong += got != (fp16 ? f32_to_f16(xi) : f32_to_bf16(xi));
          else
            touched += got != 0xFFFF;
        }
    EXPECT_EQ(wrong, 0);
    EXPECT_EQ(touched, 0) << "rows past n_rows were written";
  }
}

// qk_norm_rope with the query rotation in the same launch: the bytes of qk_norm_rope and then
// tq_rotate of the q rows (k as qk_norm_rope leaves it), with and without the head norms.
TEST(CudaTqRotate, RopeWithTheQueryRotationMatchesTwoPasses) {
  TQ_REQUIRE_GPU();
  auto be = make_cuda_backend();
  const int d = 128;
  const int64_t T = 37, n_head = 8, n_kv = 2, pos0 = 1000;
  const quant::VectorCodec codec = codec_for(d);
  const cuda::TqCodecDev dc = cuda::make_tq_codec_dev(codec);
  std::vector<float> inv_freq(size_t(d / 2));
  for (size_t i = 0; i < inv_freq.size(); ++i)
    inv_freq[i] = std::pow(1e6f, -2.0f * float(i) / float(d));
  DeviceBuffer f = to_dev(*be, inv_freq);
  const auto qn = randn(size_t(d), 0.3f), kn = randn(size_t(d), 0.3f);
  DeviceBuffer qw = to_dev(*be, qn), kw = to_dev(*be, kn);
  for (bool norms : {false, true}) {
    const auto q = randn(size_t(T * n_head * d), 2.0f), k = randn(size_t(T * n_kv * d), 2.0f);
    DeviceBuffer q1 = to_dev(*be, q), k1 = to_dev(*be, k), q2 = to_dev(*be, q), k2 = to_dev(*be, k);
    const float* w_q = norms ? qw.f32() : nullptr;
    const float* w_k = norms ? kw.f32() : nullptr;
    cuda::launch_qk_norm_rope(q1.f32(), k1.f32(), T, n_head, n_kv, d, w_q, w_k, 1e-6f, pos0,
                              f.f32(), nullptr);
    cuda::tq_rotate(q1.f32(), q1.f32(), T * n_head, dc, false);
    cuda::launch_qk_norm_rope_rotate_q(q2.f32(), k2.f32(), T, n_head, n_kv, d, w_q, w_k, 1e-6f,
                                       pos0, f.f32(), dc);
    EXPECT_EQ(from_dev(*be, q1, q.size()), from_dev(*be, q2, q.size())) << "q, norms " << norms;
    EXPECT_EQ(from_dev(*be, k1, k.size()), from_dev(*be, k2, k.size())) << "k, norms " << norms;
    EXPECT_NE(from_dev(*be, q2, q.size()), q) << "q was not written";
  }
}

}  // namespace
}  // namespace tq::test
