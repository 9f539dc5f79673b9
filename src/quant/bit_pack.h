// Dense bit packing of quantization indices (1..8 bits each) and the fixed channel split that
// gives fractional widths b.5: the code layout of one TurboQuant vector.
#pragma once
#include <cstddef>
#include <cstdint>

#include "quant/tq_format.h"

namespace tq::quant {

// Bit order (little-endian throughout): index i of a run of `bits`-bit indices occupies stream
// bits [i*bits, (i+1)*bits), least significant bit first, and stream bit k is bit (k % 8) of
// byte k / 8. So eight indices always fill exactly `bits` bytes, read as one little-endian
// integer sum_j idx_j << (j * bits). Unused high bits of the last byte are written as 0.
inline size_t packed_bytes(int64_t n, int bits) { return size_t((n * bits + 7) / 8); }

// Writes packed_bytes(n, bits) bytes. Index bits above `bits` are ignored.
void pack_bits(const uint8_t* idx, int64_t n, int bits, uint8_t* out);
void unpack_bits(const uint8_t* in, int64_t n, int bits, uint8_t* idx);

// Channel split of a width w over d rotated coordinates: coordinates [0, high_count) use
// w.high_bits(), the rest w.low_bits(). For a fractional width high_count = d / 2 (after a random
// rotation every coordinate has the same law, so the first half is as good as any fixed subset);
// for an integer width it is 0. Each part is packed as above, the low part starting at the next
// byte boundary (a no-op for supported head_dims, which are multiples of 16).
inline int split_high_count(int d, QuantWidth w) { return w.fractional() ? d / 2 : 0; }
inline size_t code_bytes(int d, QuantWidth w) {
  int hi = split_high_count(d, w);
  return packed_bytes(hi, w.high_bits()) + packed_bytes(d - hi, w.low_bits());
}
void pack_codes(const uint8_t* idx, int d, QuantWidth w, uint8_t* out);
void unpack_codes(const uint8_t* in, int d, QuantWidth w, uint8_t* idx);

}  // namespace tq::quant
