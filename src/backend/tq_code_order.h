// How a backend's TurboQuant store orders the 4-bit codes of a coordinate. VectorCodec's code is
// the Lloyd-Max index (the number of boundaries below the value: 0 the most negative centroid).
// A backend may store another bijection of it; the CUDA kernels store sign and magnitude, which
// decodes with fewer instructions: bit 3 set for the codebook's lower half, bits 0-2 the rank of
// the distance from the middle (index 8 + m has code m, index 7 - m code 8 + m). For a
// symmetric codebook (c[15 - k] = -c[k]) code m and 8 + m are +-M[m] with M ascending.
// Part of the ops interface (Backend::tq_code_order); constexpr and header-only so that the
// kernels share these definitions.
#pragma once
#include <cstddef>
#include <cstdint>

namespace tq {

enum class TqCodeOrder { kIndex, kSignMagnitude };

// One 4-bit index n to its sign-magnitude code, and back.
constexpr uint32_t sign_magnitude_code(uint32_t n) { return n ^ (n >= 8 ? 8u : 15u); }
constexpr uint32_t index_of_sign_magnitude(uint32_t c) { return c ^ (c >= 8 ? 15u : 8u); }

// Both nibbles of a byte through f.
template <typename F>
constexpr uint8_t map_nibbles(uint8_t b, F f) {
  return uint8_t(f(b & 15u) | f(uint32_t(b) >> 4) << 4);
}

// Packed 4-bit codes in `order` to VectorCodec's index order, in place (n bytes).
inline void to_index_order(uint8_t* codes, size_t n, TqCodeOrder order) {
  if (order == TqCodeOrder::kIndex) return;
  for (size_t i = 0; i < n; ++i) codes[i] = map_nibbles(codes[i], index_of_sign_magnitude);
}
// VectorCodec's packed 4-bit indices to `order`, in place (n bytes).
inline void from_index_order(uint8_t* codes, size_t n, TqCodeOrder order) {
  if (order == TqCodeOrder::kIndex) return;
  for (size_t i = 0; i < n; ++i) codes[i] = map_nibbles(codes[i], sign_magnitude_code);
}

static_assert(sign_magnitude_code(8) == 0 && sign_magnitude_code(15) == 7);
static_assert(sign_magnitude_code(7) == 8 && sign_magnitude_code(0) == 15);
static_assert(index_of_sign_magnitude(sign_magnitude_code(3)) == 3);

}  // namespace tq
