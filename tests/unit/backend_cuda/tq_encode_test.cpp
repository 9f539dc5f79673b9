// The device TurboQuant encoders against the CPU codec: tq_encode_rows (f32 rows, aligned or not,
// with and without the exact-window rows) and tq_encode_rows_bf16 (a dense store) vs
// VectorCodec::encode and Rotation::apply, including vectors that are zero, non-finite or too
// small to invert; and the bulk encoder's table quantization vs Codebook::quantize at and around
// every boundary. Fresh random data; outputs pre-filled with junk.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "backend/cuda/tq_cuda.h"
#include "backend/cuda/tq_rotate.h"
#include "gpu_test_util.h"
#include "quant/vector_codec.h"

namespace tq::test {
namespace {

enum class Input { F32, F32Unaligned, Bf16Store };

const char* input_name(Input in) {
  return in == Input::F32 ? "f32" : in == Input::F32Unaligned ? "f32 unaligned" : "bf16 store";
}

// Vector v (of T * nkv) made special: zero, NaN, +inf, or a norm whose inverse overflows.
void make_special(float* x, int d, int kind) {
  for (int i = 0; i < d; ++i) x[i] = 0.0f;
  if (kind == 1) x[3] = std::numeric_limits<float>::quiet_NaN();
  if (kind == 2) x[d - 1] = std::numeric_limits<float>::infinity();
  if (kind == 3) x[5] = 1e-40f;  // subnormal: 1 / n overflows to inf
}

TEST(CudaTurboQuant, EncodeMatchesTheCpuCodec) {
  TQ_REQUIRE_GPU();
  auto be = make_cuda_backend();
  for (int d : {64, 128, 256})
    for (bool corrected : {false, true})
      for (Input in : {Input::F32, Input::F32Unaligned, Input::Bf16Store})
        for (bool window : {false, true}) {
          SCOPED_TRACE(testing::Message() << "d=" << d << " corrected=" << corrected << " "
                                          << input_name(in) << " window=" << window);
          quant::TqFormat f;
          f.head_dim = d;
          f.key_seed = rng()();
          f.value_seed = rng()();
          f.norm.corrected = corrected;
          quant::VectorCodec codec(f.key_config());
          cuda::TqCodecDev dc = cuda::make_tq_codec_dev(codec);
          const int64_t T = 301, nkv = 3, cap = 320, t0 = 5, rot_cap = 310, rot_t0 = 4;
          // Host vectors [t][h][d]; the device input laid out per `in`.
          auto x = randn(size_t(T * nkv * d), 3.0f);
          for (int k = 0; k < 4; ++k) make_special(&x[size_t((37 * k + 11) * d)], d, k);
          if (in == Input::Bf16Store)
            for (float& v : x) v = round_bf16(v);
          int64_t x_ts = nkv * d, x_hs = d;
          DeviceBuffer xd;
          if (in == Input::F32) {
            xd = to_dev(*be, x);
          } else if (in == Input::F32Unaligned) {
            x_ts = nkv * d + 1;  // rows one float apart: no vector loads
            std::vector<float> xs(size_t(T * x_ts), 0.0f);
            for (int64_t t = 0; t < T; ++t)
              std::memcpy(&xs[size_t(t * x_ts)], &x[size_t(t * nkv * d)], size_t(nkv * d) * 4);
            xd = to_dev(*be, xs);
          } else {
            x_ts = d, x_hs = cap * d;  // [h][cap][d] bf16, tokens from slot 0
            std::vector<uint16_t> xs(size_t(nkv * cap * d), 0);
            for (int64_t t = 0; t < T; ++t)
              for (int64_t h = 0; h < nkv; ++h)
                for (int i = 0; i < d; ++i)
                  xs[size_t((h * cap + t) * d + i)] =
                      uint16_t(std::bit_cast<uint32_t>(x[size_t((t * nkv + h) * d + i)]) >> 16);
            xd = to_dev(*be, xs);
          }
          std::vector<uint8_t> junk(size_t(nkv * cap * d / 2), 0xA5);
          DeviceBuffer codes = to_dev(*be, junk), scales(be.get(), size_t(nkv * cap) * 2);
          DeviceBuffer rot = poisoned(*be, size_t(nkv * rot_cap * d));
          float* rot_p = window ? rot.f32() : nullptr;
          auto* cp = static_cast<uint8_t*>(codes.data());
          auto* sp = static_cast<uint16_t*>(scales.data());
          if (in == Input::Bf16Store)
            cuda::tq_encode_rows_bf16(static_cast<const uint16_t*>(xd.data()), T, int(nkv), x_ts,
                                      x_hs, dc, cp, sp, cap, t0, rot_p, rot_cap, rot_t0);
          else
            cuda::tq_encode_rows(xd.f32(), T, int(nkv), x_ts, x_hs, dc, cp, sp, cap, t0, rot_p,
                                 rot_cap, rot_t0);
          cuda_synchronize();
          std::vector<uint8_t> ch(junk.size());
          std::vector<uint16_t> sh(size_t(nkv * cap));
          be->download(ch.data(), codes.data(), ch.size());
          std::vector<uint8_t> ci = ch;  // the codes as the codec's indices
          to_index_order(ci.data(), ci.size(), be->tq_code_order());
          be->download(sh.data(), scales.data(), sh.size() * 2);
          const std::vector<float> rh = from_dev(*be, rot, size_t(nkv * rot_cap * d));
          std::vector<uint8_t> rec(codec.bytes_per_vector());
          std::vector<float> want_rot(static_cast<size_t>(d));
          int64_t idx_diff = 0, scale_diff = 0, rot_diff = 0;
          for (int64_t t = 0; t < T; ++t)
            for (int64_t h = 0; h < nkv; ++h) {
              const float* xv = x.data() + (t * nkv + h) * d;
              codec.encode(xv, rec.data());
              const uint8_t* got = ci.data() + (h * cap + t0 + t) * d / 2;
              for (int i = 0; i < d / 2; ++i) {
                idx_diff += (got[i] & 15) != (rec[size_t(i)] & 15);
                idx_diff += (got[i] >> 4) != (rec[size_t(i)] >> 4);
              }
              const uint16_t want = uint16_t(rec[size_t(d / 2)] | rec[size_t(d / 2 + 1)] << 8);
              const uint16_t have = sh[size_t(h * cap + t0 + t)];
              const bool both_nan = (want & 0x7c00) == 0x7c00 && (want & 0x3ff) &&
                                    (have & 0x7c00) == 0x7c00 && (have & 0x3ff);
              scale_diff += !both_nan && std::abs(int(have) - int(want)) > 1;
              if (!window) continue;
              codec.rotation().apply(xv, want_rot.data());
              const float* gr = rh.data() + (h * rot_cap + rot_t0 + t) * d;
              for (int i = 0; i < d; ++i)
                rot_diff += std::bit_cast<uint32_t>(gr[i]) != std::bit_cast<uint32_t>(want_rot[size_t(i)]) &&
                            !(std::isnan(gr[i]) && std::isnan(want_rot[size_t(i)]));
            }
          // Same float operations in the same order: at most a rare boundary tie may differ.
          EXPECT_LE(idx_diff, T * nkv * d / 10000);
          EXPECT_EQ(scale_diff, 0);
          EXPECT_EQ(rot_diff, 0);
          // Nothing outside the records [t0, t0 + T) of each head was written.
          for (int64_t h = 0; h < nkv; ++h)
            for (int64_t t = 0; t < cap; ++t) {
              if (t >= t0 && t < t0 + T) continue;
              for (int i = 0; i < d / 2; ++i)
                ASSERT_EQ(ch[size_t((h * cap + t) * d / 2 + i)], 0xA5) << "h " << h << " t " << t;
            }
        }
}

// tq_encode_rows_out, as a prefill chunk's fresh rows use it (TqRowsOut): the same records as
// tq_encode_rows; fp16 rotated rows equal to tq_rows_to_16bit of that call's f32 rows (which the
// test above checks against Rotation::apply) and within fp16 rounding of Rotation::apply; f32 rows
// only for tokens from f32_from on, where asked; nothing written outside the rows asked for.
TEST(CudaTurboQuant, EncodeWritesFp16RowsAndOnlyTheKeptF32Rows) {
  TQ_REQUIRE_GPU();
  auto be = make_cuda_backend();
  for (int d : {64, 128, 256})
    for (int64_t keep : {0, 1, 40, 301}) {
      SCOPED_TRACE(testing::Message() << "d=" << d << " keep=" << keep);
      quant::TqFormat f;
      f.head_dim = d;
      f.key_seed = rng()();
      f.value_seed = rng()();
      quant::VectorCodec codec(f.key_config());
      cuda::TqCodecDev dc = cuda::make_tq_codec_dev(codec);
      const int64_t T = 301, nkv = 3, cap = 320, t0 = 5, f32_cap = 310, f32_at = 4, f16_cap = 320,
                    f16_t0 = 7;
      const auto x = randn(size_t(T * nkv * d), 3.0f);
      DeviceBuffer xd = to_dev(*be, x);
      // Reference: every row in f32 by tq_encode_rows.
      DeviceBuffer codes_a(be.get(), size_t(nkv * cap * d / 2)), scales_a(be.get(), size_t(nkv * cap) * 2);
      DeviceBuffer rot_a = poisoned(*be, size_t(nkv * T * d));
      cuda::tq_encode_rows(xd.f32(), T, int(nkv), nkv * d, d, dc, static_cast<uint8_t*>(codes_a.data()),
                           static_cast<uint16_t*>(scales_a.data()), cap, t0, rot_a.f32(), T, 0);
      // Under test: fp16 rows for all, f32 rows for the last `keep` tokens at rows f32_at ...
      std::vector<uint8_t> junk(size_t(nkv * cap * d / 2), 0xA5);
      DeviceBuffer codes_b = to_dev(*be, junk), scales_b(be.get(), size_t(nkv * cap) * 2);
      DeviceBuffer rot_b = poisoned(*be, size_t(nkv * f32_cap * d));
      const std::vector<uint16_t> junk16(size_t(nkv * f16_cap * d), 0x7e01);
      DeviceBuffer r16 = to_dev(*be, junk16);
      cuda::TqRowsOut o;
      o.f32 = keep > 0 ? rot_b.f32() : nullptr;
      o.f32_head_stride = f32_cap;
      o.f32_t0 = f32_at - (T - keep);
      o.f32_from = T - keep;
      o.f16 = static_cast<uint16_t*>(r16.data());
      o.f16_head_stride = f16_cap;
      o.f16_t0 = f16_t0;
      cuda::tq_encode_rows_out(xd.f32(), T, int(nkv), nkv * d, d, dc, static_cast<uint8_t*>(codes_b.data()),
                               static_cast<uint16_t*>(scales_b.data()), cap, t0, o);
      // tq_rows_to_16bit of the reference rows.
      DeviceBuffer want16(be.get(), size_t(nkv * T * d) * 2);
      cuda::tq_rows_to_16bit(rot_a.f32(), T, static_cast<uint16_t*>(want16.data()), T, int(nkv), T, d, true);
      cuda_synchronize();
      auto bytes = [&](const DeviceBuffer& b, size_t n) {
        std::vector<uint8_t> h(n);
        be->download(h.data(), b.data(), n);
        return h;
      };
      const size_t code_bytes = size_t(nkv * cap * d / 2);
      const std::vector<uint8_t> ca = bytes(codes_a, code_bytes), cb = bytes(codes_b, code_bytes);
      for (int64_t h = 0; h < nkv; ++h)
        for (int64_t t = 0; t < cap; ++t)
          for (int i = 0; i < d / 2; ++i) {
            const size_t at = size_t((h * cap + t) * d / 2 + i);
            if (t >= t0 && t < t0 + T)
              ASSERT_EQ(cb[at], ca[at]) << "record h " << h << " t " << t;
            else
              ASSERT_EQ(cb[at], 0xA5) << "outside the records: h " << h << " t " << t;
          }
      // (The scales: the slots outside the records are uninitialised in both buffers.)
      const std::vector<uint8_t> sa = bytes(scales_a, size_t(nkv * cap) * 2),
                                 sb = bytes(scales_b, size_t(nkv * cap) * 2);
      for (int64_t h = 0; h < nkv; ++h)
        EXPECT_EQ(std::memcmp(&sa[size_t(h * cap + t0) * 2], &sb[size_t(h * cap + t0) * 2], size_t(T) * 2), 0)
            << "scales of head " << h;
      std::vector<uint16_t> got16(junk16.size()), w16(size_t(nkv * T * d));
      be->download(got16.data(), r16.data(), got16.size() * 2);
      be->download(w16.data(), want16.data(), w16.size() * 2);
      const std::vector<float> ra = from_dev(*be, rot_a, size_t(nkv * T * d));
      const std::vector<float> rb = from_dev(*be, rot_b, size_t(nkv * f32_cap * d));
      std::vector<float> cpu_rot(static_cast<size_t>(d));
      int64_t far = 0;
      for (int64_t h = 0; h < nkv; ++h) {
        for (int64_t r = 0; r < f16_cap; ++r) {
          const int64_t t = r - f16_t0;
          if (t >= 0 && t < T) codec.rotation().apply(x.data() + (t * nkv + h) * d, cpu_rot.data());
          for (int i = 0; i < d; ++i) {
            const uint16_t g = got16[size_t((h * f16_cap + r) * d + i)];
            if (t < 0 || t >= T) {
              ASSERT_EQ(g, 0x7e01) << "fp16 row outside the chunk: h " << h << " row " << r;
              continue;
            }
            ASSERT_EQ(g, w16[size_t((h * T + t) * d + i)]) << "fp16 h " << h << " t " << t << " i " << i;
            // fp16 of the exact rotation: within half an fp16 ulp (2^-11 relative) plus underflow.
            const float want = cpu_rot[size_t(i)];
            const uint32_t e = (g >> 10) & 31, m = g & 1023;
            const float gv = (g & 0x8000 ? -1.0f : 1.0f) *
                             (e == 0 ? std::ldexp(float(m), -24) : std::ldexp(float(m + 1024), int(e) - 25));
            far += std::fabs(gv - want) > std::fabs(want) * 0x1p-11f + 0x1p-25f;
          }
        }
        for (int64_t r = 0; r < f32_cap; ++r) {
          const int64_t t = r - o.f32_t0;  // the token whose row this is, if written
          const bool written = keep > 0 && t >= T - keep && t < T;
          for (int i = 0; i < d; ++i) {
            const float g = rb[size_t((h * f32_cap + r) * d + i)];
            if (!written) {
              ASSERT_TRUE(std::isnan(g)) << "f32 row not asked for was written: h " << h << " row " << r;
            } else {
              ASSERT_EQ(std::bit_cast<uint32_t>(g), std::bit_cast<uint32_t>(ra[size_t((h * T + t) * d + i)]))
                  << "f32 h " << h << " t " << t;
            }
          }
        }
      }
      EXPECT_EQ(far, 0) << "fp16 rows off the CPU rotation by more than fp16 rounding";
    }
}

// The table quantizer against Codebook::quantize on every boundary and its negation, the 4
// floats each side of them, signed zeros, tiny, large and infinite values and random ones, for
// each head_dim's codebook.
TEST(CudaTurboQuant, TableQuantizationIsExact) {
  TQ_REQUIRE_GPU();
  auto be = make_cuda_backend();
  for (int d : {64, 128, 256}) {
    quant::TqFormat f;
    f.head_dim = d;
    quant::VectorCodec codec(f.key_config());
    const quant::Codebook& cb = codec.codebook_for(0);
    std::vector<float> y = {0.0f, -0.0f, 1e-40f, -1e-40f, 1e-30f, -1e-30f, 0.999f, -0.999f,
                            1.0f, -1.0f, 2.0f, -2.0f, 3e38f, -3e38f,
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity()};
    constexpr float kInf = std::numeric_limits<float>::infinity();
    for (float b : cb.boundaries)
      for (float s : {b, -b}) {
        float up = s, down = s;
        y.push_back(s);
        for (int k = 0; k < 4; ++k) {
          y.push_back(up = std::nextafter(up, kInf));
          y.push_back(down = std::nextafter(down, -kInf));
        }
      }
    auto r = randn(20000, 1.0f / std::sqrt(float(d)));
    y.insert(y.end(), r.begin(), r.end());
    DeviceBuffer yd = to_dev(*be, y), idx(be.get(), y.size()), ok(be.get(), 4);
    cuda::tq_quantize_probe(yd.f32(), int64_t(y.size()), cuda::make_tq_codec_dev(codec),
                            static_cast<uint8_t*>(idx.data()), static_cast<int*>(ok.data()));
    cuda_synchronize();
    std::vector<uint8_t> got(y.size());
    int table_ok = 0;
    be->download(got.data(), idx.data(), got.size());
    be->download(&table_ok, ok.data(), 4);
    EXPECT_EQ(table_ok, 1) << "d=" << d << ": the 4-bit codebook should fit the table";
    int64_t wrong = 0;
    for (size_t i = 0; i < y.size(); ++i)
      if (got[i] != cb.quantize(y[i]) && ++wrong <= 5)
        ADD_FAILURE() << "d=" << d << " y=" << y[i] << " (bits " << std::hex
                      << std::bit_cast<uint32_t>(y[i]) << std::dec << "): table " << int(got[i])
                      << ", codebook " << cb.quantize(y[i]);
    EXPECT_EQ(wrong, 0) << "d=" << d;
  }
}

}  // namespace
}  // namespace tq::test
