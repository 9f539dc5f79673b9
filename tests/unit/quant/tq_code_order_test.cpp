// Tests for backend/tq_code_order.h, the sign-magnitude order the CUDA kernels store TurboQuant
// codes in: against its definition (bit 3 the sign, bits 0-2 the rank of |c| in the real 4-bit
// codebooks), and the in-place byte maps.
#include "backend/tq_code_order.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "quant/codebook.h"

namespace tq {
namespace {

// For every 4-bit codebook the device uses (d = 64, 128, 256 and the Gaussian one): the centroid
// of the index behind code m is the m-th smallest positive one, behind code 8 + m its negation.
TEST(TqCodeOrder, SignAndMagnitudeOfTheRealCodebooks) {
  for (int d : {0, 64, 128, 256}) {
    const quant::Codebook& cb = quant::codebook(d, 4);
    ASSERT_EQ(cb.centroids.size(), 16u);
    std::vector<double> pos;  // positive centroids, ascending
    for (double c : cb.centroids)
      if (c > 0) pos.push_back(c);
    ASSERT_EQ(pos.size(), 8u);
    for (uint32_t m = 0; m < 8; ++m) {
      SCOPED_TRACE(testing::Message() << "d=" << d << " m=" << m);
      EXPECT_EQ(cb.centroids[index_of_sign_magnitude(m)], pos[m]);
      EXPECT_EQ(cb.centroids[index_of_sign_magnitude(8 + m)], -pos[m]);
    }
  }
}

TEST(TqCodeOrder, NibbleMapsAreInversePermutations) {
  uint32_t seen = 0;
  for (uint32_t n = 0; n < 16; ++n) {
    const uint32_t c = sign_magnitude_code(n);
    ASSERT_LT(c, 16u);
    seen |= 1u << c;
    EXPECT_EQ(index_of_sign_magnitude(c), n);
  }
  EXPECT_EQ(seen, 0xffffu);  // a bijection
}

TEST(TqCodeOrder, ByteMapsRoundTripAndLeaveIndexOrderAlone) {
  std::vector<uint8_t> all(256), bytes(256);
  for (int i = 0; i < 256; ++i) all[size_t(i)] = uint8_t(i);
  bytes = all;
  from_index_order(bytes.data(), bytes.size(), TqCodeOrder::kIndex);
  EXPECT_EQ(bytes, all);
  from_index_order(bytes.data(), bytes.size(), TqCodeOrder::kSignMagnitude);
  for (int i = 0; i < 256; ++i) {
    EXPECT_EQ(bytes[size_t(i)] & 15u, sign_magnitude_code(uint32_t(i) & 15u));
    EXPECT_EQ(bytes[size_t(i)] >> 4, sign_magnitude_code(uint32_t(i) >> 4));
  }
  to_index_order(bytes.data(), bytes.size(), TqCodeOrder::kSignMagnitude);
  EXPECT_EQ(bytes, all);
}

}  // namespace
}  // namespace tq
