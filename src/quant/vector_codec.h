// VectorCodec: encodes and decodes one head vector in one TurboQuant configuration (head_dim,
// width, rotation, seed, norm mode): rotate, Lloyd-Max quantize, pack, store the scale.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "quant/codebook.h"
#include "quant/rotation.h"
#include "quant/tq_format.h"

namespace tq {
class ThreadPool;
}

namespace tq::quant {

// Record layout of one encoded vector, bytes_per_vector() bytes, no alignment requirement:
//   [code_bytes(d, width)]  packed indices of the rotated unit vector (see bit_pack.h for the bit
//                           order and the fractional channel split)
//   [2 or 4]                scale s, fp16 (default) or fp32, little-endian:
//                           s = ||x||, or ||x|| / ||c[idx]|| with norm correction.
// Decoding is x_hat = s * R^T c[idx]. d=128 at 4 bits: 64 + 2 = 66 bytes (bf16: 256 bytes).
// A zero vector encodes with s = 0; a non-finite norm is stored as is (inf/NaN), never hidden.
class VectorCodec {
 public:
  explicit VectorCodec(const CodecConfig& config);  // throws tq::Error on an unsupported config

  const CodecConfig& config() const { return config_; }
  int head_dim() const { return config_.head_dim; }
  size_t code_bytes() const { return code_bytes_; }
  size_t scale_bytes() const { return config_.norm.fp32 ? 4 : 2; }
  size_t bytes_per_vector() const { return code_bytes_ + scale_bytes(); }
  const Rotation& rotation() const { return rotation_; }
  // Codebook of rotated coordinate i (fractional widths: the high part uses b+1 bits).
  const Codebook& codebook_for(int i) const { return i < high_count_ ? *high_cb_ : *low_cb_; }
  int high_count() const { return high_count_; }

  void encode(const float* x, uint8_t* out) const;
  // n vectors [n][d] -> [n][bytes_per_vector()]; byte-identical to n calls of encode(). Spread
  // over `pool` when given and n is large; pass nullptr from inside another parallel_for (the
  // pool is not reentrant).
  void encode_batch(const float* x, int64_t n, uint8_t* out, ThreadPool* pool) const;
  void encode_batch(const float* x, int64_t n, uint8_t* out) const;  // global pool
  // For tests and reference paths only: attention must not dequantize whole caches.
  void decode(const uint8_t* in, float* x) const;

  // Building blocks of compressed attention (rotated domain, no inverse rotation):
  // the stored scale s of a record, and c[idx] for its d coordinates, via byte lookup tables.
  float scale(const uint8_t* record) const;
  void centroids(const uint8_t* record, float* y) const;
  // Unpacked indices [d] of a record (tests, debugging).
  void indices(const uint8_t* record, uint8_t* idx) const;

 private:
  // One run of same-width coordinates: where its bytes start and how to turn them into floats.
  struct Segment {
    int first = 0, count = 0, bits = 0;
    size_t byte_offset = 0;
    const Codebook* cb = nullptr;
    // bits in {1, 2, 4}: [256][8 / bits] centroid values of the indices packed in one byte.
    std::vector<float> byte_lut;
  };
  void decode_segment(const Segment& s, const uint8_t* codes, float* y) const;

  CodecConfig config_;
  Rotation rotation_;
  const Codebook* high_cb_;
  const Codebook* low_cb_;
  int high_count_;
  size_t code_bytes_;
  std::vector<Segment> segments_;
};

}  // namespace tq::quant
