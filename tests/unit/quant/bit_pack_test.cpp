// Tests for quant/bit_pack: the documented little-endian bit order, round trips for every width
// 1..8 (aligned and ragged lengths) and the fractional 2.5 / 3.5 channel split.
#include "quant/bit_pack.h"

#include <gtest/gtest.h>

#include <vector>

#include "quant/portable_random.h"

namespace tq::quant {
namespace {

TEST(BitPack, DocumentedBitOrder) {
  // 3-bit indices 1..7,0 -> stream 001 010 011 100 101 110 111 000 (LSB first) =
  // integer 0b000'111'110'101'100'011'010'001 = 0x1f58d1, bytes d1 58 1f.
  const uint8_t idx[8] = {1, 2, 3, 4, 5, 6, 7, 0};
  uint8_t out[3] = {};
  pack_bits(idx, 8, 3, out);
  EXPECT_EQ(out[0], 0xd1);
  EXPECT_EQ(out[1], 0x58);
  EXPECT_EQ(out[2], 0x1f);
  // 4-bit: first index in the low nibble.
  const uint8_t nib[2] = {0xa, 0x5};
  uint8_t b = 0;
  pack_bits(nib, 2, 4, &b);
  EXPECT_EQ(b, 0x5a);
  // 1-bit ragged: bits 1,0,1 -> 0b101, high bits zero.
  const uint8_t bits[3] = {1, 0, 1};
  uint8_t c = 0xff;
  pack_bits(bits, 3, 1, &c);
  EXPECT_EQ(c, 0x05);
}

TEST(BitPack, RoundTripAllWidthsAndLengths) {
  PortableRandom rng(1);
  for (int bits = 1; bits <= 8; ++bits) {
    for (int n : {0, 1, 7, 8, 9, 63, 64, 128, 131, 256}) {
      std::vector<uint8_t> idx(n), back(n, 0xee);
      for (auto& v : idx) v = uint8_t(rng.next_u64() & ((1u << bits) - 1));
      // Canary past the end: packing must write exactly packed_bytes.
      std::vector<uint8_t> packed(packed_bytes(n, bits) + 1, 0xcc);
      pack_bits(idx.data(), n, bits, packed.data());
      EXPECT_EQ(packed.back(), 0xcc) << "bits=" << bits << " n=" << n;
      EXPECT_EQ(packed.size() - 1, size_t((n * bits + 7) / 8));
      unpack_bits(packed.data(), n, bits, back.data());
      EXPECT_EQ(idx, back) << "bits=" << bits << " n=" << n;
    }
  }
}

TEST(BitPack, HighIndexBitsAreIgnored) {
  const uint8_t idx[8] = {0xff, 0xfe, 0xfd, 0xfc, 0xfb, 0xfa, 0xf9, 0xf8};
  uint8_t out[2] = {};
  pack_bits(idx, 8, 2, out);
  uint8_t back[8];
  unpack_bits(out, 8, 2, back);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(back[i], idx[i] & 3);
}

TEST(BitPack, FractionalSplitLayoutAndRoundTrip) {
  PortableRandom rng(2);
  for (int half : {3, 5, 7, 15}) {  // 1.5, 2.5, 3.5, 7.5 bits
    QuantWidth w = QuantWidth::half(half);
    for (int d : {16, 64, 128, 256}) {
      const int hi = split_high_count(d, w);
      EXPECT_EQ(hi, d / 2);
      EXPECT_EQ(code_bytes(d, w), size_t(d * half / 16)) << "d*bits/8 exactly";
      std::vector<uint8_t> idx(d), back(d);
      for (int i = 0; i < d; ++i)
        idx[i] = uint8_t(rng.next_u64() & ((1u << (i < hi ? w.high_bits() : w.low_bits())) - 1));
      std::vector<uint8_t> packed(code_bytes(d, w));
      pack_codes(idx.data(), d, w, packed.data());
      unpack_codes(packed.data(), d, w, back.data());
      EXPECT_EQ(idx, back) << w.name() << " d=" << d;
      // The high part is a plain (b+1)-bit run at byte 0, the low part a b-bit run after it.
      std::vector<uint8_t> low(d - hi);
      unpack_bits(packed.data() + packed_bytes(hi, w.high_bits()), d - hi, w.low_bits(),
                  low.data());
      EXPECT_TRUE(std::equal(low.begin(), low.end(), idx.begin() + hi));
    }
  }
  EXPECT_EQ(code_bytes(128, QuantWidth::parse(2.5)), 40u);
  EXPECT_EQ(code_bytes(128, QuantWidth::parse(3.5)), 56u);
  EXPECT_EQ(code_bytes(128, QuantWidth::bits(4)), 64u);
  for (int b = 1; b <= 8; ++b) {
    EXPECT_EQ(split_high_count(128, QuantWidth::bits(b)), 0);
    EXPECT_EQ(code_bytes(128, QuantWidth::bits(b)), size_t(16 * b));
  }
}

}  // namespace
}  // namespace tq::quant
