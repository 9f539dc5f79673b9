// TqFormat implementation: width/rotation/head_dim validation and the version-1 byte layout.
// Parsing is strict because a misread descriptor would silently decode a cache into garbage.
#include "quant/tq_format.h"

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "quant/portable_random.h"

namespace tq::quant {

QuantWidth QuantWidth::bits(int b) {
  if (b < 1 || b > 8) fail("unsupported TurboQuant width {} bits (supported: 1..8)", b);
  return QuantWidth{uint8_t(2 * b)};
}

QuantWidth QuantWidth::half(int h) {
  if (h < 2 || h > 16)
    fail("unsupported TurboQuant width {} half-bits (supported: 2..16, i.e. 1..8 bits)", h);
  return QuantWidth{uint8_t(h)};
}

QuantWidth QuantWidth::parse(double b) {
  double h = b * 2.0;
  if (!(h >= 2.0 && h <= 16.0) || h != std::floor(h))
    fail("unsupported TurboQuant width {} bits (supported: 1..8 in steps of 0.5)", b);
  return QuantWidth{uint8_t(h)};
}

std::string QuantWidth::name() const {
  return fractional() ? fmt::format("{}.5", low_bits()) : fmt::format("{}", low_bits());
}

const char* rotation_name(RotationKind k) {
  switch (k) {
    case RotationKind::Hadamard: return "hadamard";
    case RotationKind::Haar: return "haar";
  }
  return "?";
}

void check_head_dim(int head_dim, RotationKind rotation) {
  if (head_dim < 16 || head_dim > 1024 || head_dim % 16 != 0)
    fail("unsupported head_dim {} for TurboQuant (need a multiple of 16 in [16, 1024])", head_dim);
  if (rotation == RotationKind::Hadamard && (head_dim & (head_dim - 1)) != 0)
    fail("head_dim {} is not a power of two: the Hadamard rotation cannot serve it "
         "(use the Haar rotation)", head_dim);
  if (rotation != RotationKind::Hadamard && rotation != RotationKind::Haar)
    fail("unknown rotation kind {}", int(rotation));
}

void TqFormat::validate() const {
  if (version != kVersion) fail("unsupported TurboQuant format version {} (this build reads {})",
                                version, kVersion);
  QuantWidth::half(key_width.half_bits);
  QuantWidth::half(value_width.half_bits);
  with_context("keys", [&] { check_head_dim(head_dim, key_rotation); });
  with_context("values", [&] { check_head_dim(head_dim, value_rotation); });
}

CodecConfig TqFormat::key_config(int layer) const {
  validate();
  return CodecConfig{head_dim, key_width, key_rotation,
                     per_layer_seeds ? derive_seed(key_seed, uint64_t(layer)) : key_seed, norm};
}

CodecConfig TqFormat::value_config(int layer) const {
  validate();
  return CodecConfig{head_dim, value_width, value_rotation,
                     per_layer_seeds ? derive_seed(value_seed, uint64_t(layer)) : value_seed,
                     norm};
}

namespace {

const uint8_t kMagic[4] = {'T', 'Q', 'K', 'V'};

void put_le(uint8_t* p, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) p[i] = uint8_t(v >> (8 * i));
}
uint64_t get_le(const uint8_t* p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= uint64_t(p[i]) << (8 * i);
  return v;
}

RotationKind parse_rotation(uint8_t b, const char* which) {
  if (b > uint8_t(RotationKind::Haar)) fail("unknown {} rotation kind {}", which, b);
  return RotationKind(b);
}

}  // namespace

std::vector<uint8_t> TqFormat::serialize() const {
  validate();
  std::vector<uint8_t> out(kSerializedSize, 0);
  uint8_t* p = out.data();
  std::memcpy(p, kMagic, 4);
  put_le(p + 4, version, 2);
  put_le(p + 6, uint64_t(head_dim), 2);
  p[8] = key_width.half_bits;
  p[9] = value_width.half_bits;
  p[10] = uint8_t(key_rotation);
  p[11] = uint8_t(value_rotation);
  put_le(p + 12, key_seed, 8);
  put_le(p + 20, value_seed, 8);
  p[28] = uint8_t((norm.corrected ? 1 : 0) | (norm.fp32 ? 2 : 0));
  p[29] = uint8_t(per_layer_seeds ? 1 : 0);
  p[30] = 0;  // variant: MSE
  p[31] = 0;
  return out;
}

TqFormat TqFormat::parse(const uint8_t* data, size_t size, size_t* consumed) {
  return with_context("TurboQuant format descriptor", [&] {
    if (size >= 4 && std::memcmp(data, kMagic, 4) != 0) fail("bad magic (expected \"TQKV\")");
    if (size < 6) fail("truncated: {} bytes, need {}", size, kSerializedSize);
    TqFormat f;
    f.version = uint16_t(get_le(data + 4, 2));
    // Check the version before the size: a newer version may have another size.
    if (f.version != kVersion)
      fail("unsupported version {} (this build reads {})", f.version, kVersion);
    if (size < kSerializedSize) fail("truncated: {} bytes, need {}", size, kSerializedSize);
    if (size > kSerializedSize && !consumed)
      fail("{} trailing bytes after the descriptor", size - kSerializedSize);
    f.head_dim = int(get_le(data + 6, 2));
    f.key_width = with_context("key width", [&] { return QuantWidth::half(data[8]); });
    f.value_width = with_context("value width", [&] { return QuantWidth::half(data[9]); });
    f.key_rotation = parse_rotation(data[10], "key");
    f.value_rotation = parse_rotation(data[11], "value");
    f.key_seed = get_le(data + 12, 8);
    f.value_seed = get_le(data + 20, 8);
    if (data[28] & ~3u) fail("unknown norm mode bits 0x{:02x}", data[28]);
    f.norm.corrected = data[28] & 1;
    f.norm.fp32 = data[28] & 2;
    if (data[29] & ~1u) fail("unknown flag bits 0x{:02x}", data[29]);
    f.per_layer_seeds = data[29] & 1;
    if (data[30] != 0)
      fail("variant {} is not decodable by this build (only 0 = MSE)", data[30]);
    if (data[31] != 0) fail("reserved byte 31 is {} (must be 0)", data[31]);
    f.validate();
    if (consumed) *consumed = kSerializedSize;
    return f;
  });
}

uint64_t TqFormat::fingerprint() const {
  uint64_t h = 0xcbf29ce484222325ull;
  for (uint8_t b : serialize()) {
    h ^= b;
    h *= 0x100000001b3ull;
  }
  return h;
}

std::string TqFormat::describe() const {
  return fmt::format("tq{} d={} K{}/V{} {}/{} seeds {:#x}/{:#x}{} norm {}{}", version, head_dim,
                     key_width.name(), value_width.name(), rotation_name(key_rotation),
                     rotation_name(value_rotation), key_seed, value_seed,
                     per_layer_seeds ? " per-layer" : "", norm.fp32 ? "f32" : "f16",
                     norm.corrected ? " corrected" : "");
}

void TqFormat::check_matches(const TqFormat& expected) const {
  std::string diff;
  auto note = [&](bool same, const char* field, const std::string& got, const std::string& want) {
    if (!same)
      diff += fmt::format("{}{} {} (expected {})", diff.empty() ? "" : ", ", field, got, want);
  };
  note(version == expected.version, "version", fmt::format("{}", version),
       fmt::format("{}", expected.version));
  note(head_dim == expected.head_dim, "head_dim", fmt::format("{}", head_dim),
       fmt::format("{}", expected.head_dim));
  note(key_width == expected.key_width, "key bits", key_width.name(), expected.key_width.name());
  note(value_width == expected.value_width, "value bits", value_width.name(),
       expected.value_width.name());
  note(key_rotation == expected.key_rotation, "key rotation", rotation_name(key_rotation),
       rotation_name(expected.key_rotation));
  note(value_rotation == expected.value_rotation, "value rotation", rotation_name(value_rotation),
       rotation_name(expected.value_rotation));
  note(key_seed == expected.key_seed, "key seed", fmt::format("{:#x}", key_seed),
       fmt::format("{:#x}", expected.key_seed));
  note(value_seed == expected.value_seed, "value seed", fmt::format("{:#x}", value_seed),
       fmt::format("{:#x}", expected.value_seed));
  note(norm == expected.norm, "norm mode",
       fmt::format("{}{}", norm.fp32 ? "f32" : "f16", norm.corrected ? "+corrected" : ""),
       fmt::format("{}{}", expected.norm.fp32 ? "f32" : "f16",
                   expected.norm.corrected ? "+corrected" : ""));
  note(per_layer_seeds == expected.per_layer_seeds, "per-layer seeds",
       per_layer_seeds ? "on" : "off", expected.per_layer_seeds ? "on" : "off");
  if (!diff.empty()) fail("TurboQuant format mismatch: {}", diff);
}

}  // namespace tq::quant
