// VectorCodec implementation: encode (norm, rotate, nearest centroid, pack, scale) and the
// lookup-table decode of packed codes that compressed attention runs once per token.
#include "quant/vector_codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/dtype.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "quant/bit_pack.h"

namespace tq::quant {

namespace {
constexpr int kMaxDim = 1024;  // check_head_dim's bound; sizes the stack scratch below

// Validates before any member is built, so errors name the config rather than a codebook.
const CodecConfig& validated(const CodecConfig& c) {
  QuantWidth::half(c.width.half_bits);
  check_head_dim(c.head_dim, c.rotation);
  return c;
}
// One lookup-table row per code byte: 8 / B floats copied at once (a fixed-size copy, i.e. one
// or two moves, not a libc call).
template <int B>
inline void decode_bytes(const uint8_t* in, int count, const float* lut, float* out) {
  constexpr int per = 8 / B;
  for (int b = 0; b < count / per; ++b) std::memcpy(out + b * per, lut + in[b] * per, per * 4);
}
}  // namespace

VectorCodec::VectorCodec(const CodecConfig& config)
    : config_(validated(config)),
      rotation_(config.rotation, config.head_dim, config.seed),
      high_cb_(&codebook(config.head_dim, config.width.high_bits())),
      low_cb_(&codebook(config.head_dim, config.width.low_bits())),
      high_count_(split_high_count(config.head_dim, config.width)),
      code_bytes_(::tq::quant::code_bytes(config.head_dim, config.width)) {
  const int d = config.head_dim;
  auto add_segment = [&](int first, int count, int bits, size_t offset, const Codebook* cb) {
    if (count == 0) return;
    Segment s;
    s.first = first;
    s.count = count;
    s.bits = bits;
    s.byte_offset = offset;
    s.cb = cb;
    if (bits == 1 || bits == 2 || bits == 4) {
      const int per = 8 / bits;
      s.byte_lut.resize(256 * per);
      for (int byte = 0; byte < 256; ++byte)
        for (int j = 0; j < per; ++j)
          s.byte_lut[byte * per + j] = cb->centroids[(byte >> (j * bits)) & ((1 << bits) - 1)];
    }
    segments_.push_back(std::move(s));
  };
  const int hb = config.width.high_bits(), lb = config.width.low_bits();
  add_segment(0, high_count_, hb, 0, high_cb_);
  add_segment(high_count_, d - high_count_, lb, packed_bytes(high_count_, hb), low_cb_);
}

void VectorCodec::encode(const float* x, uint8_t* out) const {
  const int d = config_.head_dim;
  float u[kMaxDim], y[kMaxDim];
  uint8_t idx[kMaxDim];
  double ss = 0.0;
  for (int i = 0; i < d; ++i) ss += double(x[i]) * x[i];
  const float n = float(std::sqrt(ss));
  // Zero (or non-finite) norm: quantize the zero vector; the stored scale carries the truth.
  const float inv = (n > 0.0f && std::isfinite(n)) ? 1.0f / n : 0.0f;
  for (int i = 0; i < d; ++i) u[i] = x[i] * inv;
  rotation_.apply(u, y);
  high_cb_->quantize_n(y, high_count_, idx);
  low_cb_->quantize_n(y + high_count_, d - high_count_, idx + high_count_);
  pack_codes(idx, d, config_.width, out);
  float s = n;
  if (config_.norm.corrected) {
    double cc = 0.0;
    for (int i = 0; i < d; ++i) {
      double c = codebook_for(i).centroids[idx[i]];
      cc += c * c;
    }
    s = float(double(n) / std::sqrt(cc));  // centroids are never 0, so cc > 0
  }
  uint8_t* sp = out + code_bytes_;
  if (config_.norm.fp32) {
    uint32_t bits;
    std::memcpy(&bits, &s, 4);
    for (int k = 0; k < 4; ++k) sp[k] = uint8_t(bits >> (8 * k));
  } else {
    uint16_t h = f32_to_f16(s);
    sp[0] = uint8_t(h);
    sp[1] = uint8_t(h >> 8);
  }
}

void VectorCodec::encode_batch(const float* x, int64_t n, uint8_t* out, ThreadPool* pool) const {
  const int d = config_.head_dim;
  const size_t bpv = bytes_per_vector();
  // Chunks of at least 64 vectors keep the pool's fixed cost (~microseconds) negligible.
  int n_chunk = pool ? int(std::min<int64_t>(n / 64, int64_t(pool->size()) * 4)) : 1;
  if (n_chunk <= 1) {
    for (int64_t v = 0; v < n; ++v) encode(x + v * d, out + v * bpv);
    return;
  }
  pool->parallel_for(n_chunk, [&](int c) {
    int64_t begin = n * c / n_chunk, end = n * (c + 1) / n_chunk;
    for (int64_t v = begin; v < end; ++v) encode(x + v * d, out + v * bpv);
  });
}

void VectorCodec::encode_batch(const float* x, int64_t n, uint8_t* out) const {
  encode_batch(x, n, out, &ThreadPool::global());
}

float VectorCodec::scale(const uint8_t* record) const {
  const uint8_t* sp = record + code_bytes_;
  if (config_.norm.fp32) {
    uint32_t bits = uint32_t(sp[0]) | uint32_t(sp[1]) << 8 | uint32_t(sp[2]) << 16 |
                    uint32_t(sp[3]) << 24;
    float s;
    std::memcpy(&s, &bits, 4);
    return s;
  }
  return f16_to_f32(uint16_t(sp[0] | sp[1] << 8));
}

void VectorCodec::decode_segment(const Segment& s, const uint8_t* codes, float* y) const {
  const uint8_t* in = codes + s.byte_offset;
  float* out = y + s.first;
  const float* c = s.cb->centroids.data();
  switch (s.bits) {
    case 8:
      for (int i = 0; i < s.count; ++i) out[i] = c[in[i]];
      return;
    case 4: decode_bytes<4>(in, s.count, s.byte_lut.data(), out); return;
    case 2: decode_bytes<2>(in, s.count, s.byte_lut.data(), out); return;
    case 1: decode_bytes<1>(in, s.count, s.byte_lut.data(), out); return;
    default: {
      // 3, 5, 6, 7 bits: eight indices per `bits` bytes, read as one little-endian word.
      const int bits = s.bits;
      const uint64_t mask = (1u << bits) - 1;
      for (int i = 0; i < s.count; i += 8) {
        uint64_t v = 0;
        for (int k = 0; k < bits; ++k) v |= uint64_t(in[k]) << (8 * k);
        in += bits;
        for (int j = 0; j < 8; ++j) out[i + j] = c[(v >> (j * bits)) & mask];
      }
      return;
    }
  }
}

void VectorCodec::centroids(const uint8_t* record, float* y) const {
  for (const Segment& s : segments_) decode_segment(s, record, y);
}

void VectorCodec::indices(const uint8_t* record, uint8_t* idx) const {
  unpack_codes(record, config_.head_dim, config_.width, idx);
}

void VectorCodec::decode(const uint8_t* in, float* x) const {
  const int d = config_.head_dim;
  float z[kMaxDim];
  centroids(in, z);
  const float s = scale(in);
  for (int i = 0; i < d; ++i) z[i] *= s;
  rotation_.apply_t(z, x);
}

}  // namespace tq::quant
