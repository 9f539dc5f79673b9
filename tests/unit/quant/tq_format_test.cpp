// Tests for quant/tq_format: widths, the 32-byte descriptor round trip, strict parsing of bad or
// truncated bytes, mismatch reporting and the stable fingerprint.
#include "quant/tq_format.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace tq::quant {
namespace {

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

TqFormat sample() {
  TqFormat f;
  f.head_dim = 96;
  f.key_width = QuantWidth::parse(3.5);
  f.value_width = QuantWidth::bits(2);
  f.key_rotation = RotationKind::Haar;
  f.value_rotation = RotationKind::Haar;
  f.key_seed = 0x0123456789abcdefull;
  f.value_seed = 42;
  f.norm.corrected = true;
  f.per_layer_seeds = true;
  return f;
}

TEST(QuantWidth, ParsesAndRejects) {
  EXPECT_EQ(QuantWidth::bits(4).half_bits, 8);
  EXPECT_EQ(QuantWidth::parse(2.5).half_bits, 5);
  EXPECT_EQ(QuantWidth::parse(2.5).low_bits(), 2);
  EXPECT_EQ(QuantWidth::parse(2.5).high_bits(), 3);
  EXPECT_EQ(QuantWidth::parse(3.5).name(), "3.5");
  EXPECT_EQ(QuantWidth::bits(8).name(), "8");
  EXPECT_THROW(QuantWidth::bits(0), Error);
  EXPECT_THROW(QuantWidth::bits(9), Error);
  EXPECT_THROW(QuantWidth::parse(2.25), Error);
  EXPECT_THROW(QuantWidth::parse(8.5), Error);
  EXPECT_THROW(QuantWidth::half(1), Error);
  EXPECT_NE(error_of([] { QuantWidth::bits(9); }).find("9 bits"), std::string::npos);
}

TEST(TqFormat, RoundTripAndEquality) {
  for (TqFormat f : {TqFormat{}, sample()}) {
    std::vector<uint8_t> bytes = f.serialize();
    ASSERT_EQ(bytes.size(), TqFormat::kSerializedSize);
    TqFormat g = TqFormat::parse(bytes.data(), bytes.size());
    EXPECT_EQ(f, g);
    EXPECT_EQ(f.fingerprint(), g.fingerprint());
    EXPECT_EQ(g.serialize(), bytes);
  }
  EXPECT_NE(TqFormat{}, sample());
}

TEST(TqFormat, FingerprintIsStable) {
  // FNV-1a 64 of the default descriptor's 32 bytes, computed independently in Python.
  EXPECT_EQ(TqFormat{}.fingerprint(), 0x840f0277b3c4ce5eull);
  // Every field feeds the fingerprint.
  TqFormat base = sample();
  std::vector<TqFormat> variants(9, base);
  variants[0].head_dim = 128;
  variants[1].key_width = QuantWidth::bits(4);
  variants[2].value_width = QuantWidth::parse(2.5);
  variants[3].key_rotation = RotationKind::Hadamard, variants[3].head_dim = 128;
  variants[4].value_seed = 43;
  variants[5].key_seed ^= 1ull << 63;
  variants[6].norm.corrected = false;
  variants[7].norm.fp32 = true;
  variants[8].per_layer_seeds = false;
  for (const TqFormat& v : variants) EXPECT_NE(v.fingerprint(), base.fingerprint()) << v.describe();
}

TEST(TqFormat, RejectsTruncatedBytes) {
  std::vector<uint8_t> bytes = sample().serialize();
  for (size_t n = 0; n < bytes.size(); ++n) {
    std::string e = error_of([&] { TqFormat::parse(bytes.data(), n); });
    EXPECT_NE(e.find("truncated"), std::string::npos) << n << ": " << e;
  }
}

TEST(TqFormat, RejectsWhatItCannotDecode) {
  const std::vector<uint8_t> good = sample().serialize();
  struct Case {
    size_t offset;
    uint8_t value;
    const char* expect;
  };
  const Case cases[] = {
      {0, 'X', "magic"},        {4, 2, "version 2"},       {5, 1, "version"},
      {6, 100, "head_dim 100"}, {7, 0x10, "head_dim"},     {8, 0, "key width"},
      {8, 17, "key width"},     {9, 1, "value width"},     {10, 2, "rotation"},
      {11, 9, "rotation"},      {28, 4, "norm mode"},      {29, 2, "flag"},
      {30, 1, "variant"},       {31, 1, "reserved"},
  };
  for (const Case& c : cases) {
    std::vector<uint8_t> b = good;
    b[c.offset] = c.value;
    std::string e = error_of([&] { TqFormat::parse(b.data(), b.size()); });
    EXPECT_NE(e.find(c.expect), std::string::npos) << "byte " << c.offset << ": " << e;
    EXPECT_NE(e.find("TurboQuant format descriptor"), std::string::npos) << e;
  }
  // Hadamard cannot serve head_dim 96.
  std::vector<uint8_t> b = good;
  b[10] = 0;
  EXPECT_NE(error_of([&] { TqFormat::parse(b.data(), b.size()); }).find("power of two"),
            std::string::npos);
}

TEST(TqFormat, TrailingBytesNeedConsumed) {
  std::vector<uint8_t> b = sample().serialize();
  b.push_back(0);
  EXPECT_THROW(TqFormat::parse(b.data(), b.size()), Error);
  size_t used = 0;
  EXPECT_EQ(TqFormat::parse(b.data(), b.size(), &used), sample());
  EXPECT_EQ(used, TqFormat::kSerializedSize);
}

TEST(TqFormat, SerializeValidates) {
  TqFormat f;
  f.head_dim = 96;  // Hadamard default
  EXPECT_THROW(f.serialize(), Error);
  f.key_rotation = f.value_rotation = RotationKind::Haar;
  EXPECT_NO_THROW(f.serialize());
  f.key_width.half_bits = 0;
  EXPECT_THROW(f.serialize(), Error);
  EXPECT_THROW(f.key_config(), Error);
}

TEST(TqFormat, MismatchNamesTheFields) {
  TqFormat stored = sample(), running = sample();
  EXPECT_NO_THROW(stored.check_matches(running));
  running.key_width = QuantWidth::bits(4);
  running.value_seed = 7;
  std::string e = error_of([&] { stored.check_matches(running); });
  EXPECT_NE(e.find("key bits 3.5 (expected 4)"), std::string::npos) << e;
  EXPECT_NE(e.find("value seed"), std::string::npos) << e;
  EXPECT_EQ(e.find("head_dim"), std::string::npos) << e;
}

TEST(TqFormat, PerLayerSeeds) {
  TqFormat f = sample();
  EXPECT_NE(f.key_config(0).seed, f.key_config(1).seed);
  EXPECT_NE(f.key_config(0).seed, f.value_config(0).seed);
  EXPECT_EQ(f.key_config(3), f.key_config(3));
  f.per_layer_seeds = false;
  EXPECT_EQ(f.key_config(5).seed, f.key_seed);
  EXPECT_EQ(f.value_config(5).width, QuantWidth::bits(2));
  EXPECT_EQ(f.key_config(5).rotation, RotationKind::Haar);
}

}  // namespace
}  // namespace tq::quant
