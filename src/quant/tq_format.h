// TqFormat: the versioned descriptor of a TurboQuant KV format (widths, rotations, seeds,
// head_dim, norm mode), its 32-byte binary form, validation and stable fingerprint.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tq::quant {

// A quantization width in half bits: 2 = 1 bit ... 16 = 8 bits; odd values are the fractional
// widths b + 0.5, stored as a fixed channel split (see VectorCodec). Construct through bits()
// or half(), which throw tq::Error outside 1..8 bits.
struct QuantWidth {
  uint8_t half_bits = 8;

  static QuantWidth bits(int b);          // integer width 1..8
  static QuantWidth half(int half_bits);  // 2..16
  static QuantWidth parse(double bits);   // 1, 1.5, ..., 8
  bool fractional() const { return half_bits & 1; }
  int low_bits() const { return half_bits / 2; }                   // b for b or b.5
  int high_bits() const { return (half_bits + 1) / 2; }            // b+1 for b.5, else b
  double value() const { return half_bits * 0.5; }
  std::string name() const;                                        // "4", "3.5"
  bool operator==(const QuantWidth&) const = default;
};

enum class RotationKind : uint8_t {
  Hadamard = 0,  // signs, fast Walsh-Hadamard, signs, / sqrt(d); needs a power-of-two head_dim
  Haar = 1,      // dense Haar-random orthogonal matrix; any supported head_dim
};
const char* rotation_name(RotationKind k);

// How the per-vector scale is stored next to the codes.
struct NormMode {
  bool fp32 = false;       // fp32 instead of fp16 (4 bytes instead of 2)
  bool corrected = false;  // store ||x|| / ||c[idx]|| so the decoded vector keeps ||x|| exactly
  bool operator==(const NormMode&) const = default;
};

// Everything one VectorCodec needs: a single (head_dim, width, rotation, seed, norm) choice.
struct CodecConfig {
  int head_dim = 128;
  QuantWidth width;
  RotationKind rotation = RotationKind::Hadamard;
  uint64_t seed = 0;
  NormMode norm;
  bool operator==(const CodecConfig&) const = default;
};

// Supported head_dim: a multiple of 16 in [16, 1024] (so fractional channel splits stay byte
// aligned); Hadamard also needs a power of two. Throws tq::Error otherwise.
void check_head_dim(int head_dim, RotationKind rotation);

// The stored descriptor. Binary form (version 1, 32 bytes, integers little-endian):
//   0  4  magic "TQKV"          4  2  version (1)          6  2  head_dim
//   8  1  key half-bits         9  1  value half-bits     10  1  key rotation  11 1 value rotation
//  12  8  key seed             20  8  value seed          28  1  norm mode (bit0 corrected, bit1 fp32)
//  29  1  flags (bit0: seeds are per-layer, derived by derive_seed(seed, layer))
//  30  1  variant (0 = MSE; nothing else decodes yet)    31  1  reserved, must be 0
// A reader refuses any unknown version, value, bit or trailing byte rather than guess.
struct TqFormat {
  static constexpr uint16_t kVersion = 1;
  static constexpr size_t kSerializedSize = 32;

  uint16_t version = kVersion;
  int head_dim = 128;
  QuantWidth key_width = QuantWidth::bits(4);
  QuantWidth value_width = QuantWidth::bits(4);
  RotationKind key_rotation = RotationKind::Hadamard;
  RotationKind value_rotation = RotationKind::Hadamard;
  uint64_t key_seed = 0x5451'4b45'5953'4545ull;
  uint64_t value_seed = 0x5451'5641'4c53'4545ull;
  NormMode norm;
  bool per_layer_seeds = false;

  // Throws tq::Error naming the first field this build cannot encode or decode.
  void validate() const;
  // Codec configuration for keys / values of one layer (the layer only matters with
  // per_layer_seeds).
  CodecConfig key_config(int layer = 0) const;
  CodecConfig value_config(int layer = 0) const;

  std::vector<uint8_t> serialize() const;  // validates first
  // Parses exactly kSerializedSize bytes (trailing bytes are an error unless `consumed` is
  // given, which then receives the bytes used). Throws tq::Error on anything undecodable.
  static TqFormat parse(const uint8_t* data, size_t size, size_t* consumed = nullptr);
  // FNV-1a 64 of the serialized bytes: stable across builds, usable in prefix-cache keys.
  uint64_t fingerprint() const;
  std::string describe() const;  // "tq1 d=128 K4/V4 hadamard ..."
  // Throws tq::Error listing every field in which this (e.g. a descriptor read from a stored
  // cache) differs from `expected` (the format the reader runs); a mismatch must never decode.
  void check_matches(const TqFormat& expected) const;

  bool operator==(const TqFormat&) const = default;
};

}  // namespace tq::quant
