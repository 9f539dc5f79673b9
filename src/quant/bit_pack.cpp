// Bit packing implementation: a group-of-eight path (eight indices = `bits` whole bytes) for the
// common case and a bit-accumulator path for ragged tails; both produce the same stream.
#include "quant/bit_pack.h"

namespace tq::quant {

void pack_bits(const uint8_t* idx, int64_t n, int bits, uint8_t* out) {
  const uint64_t mask = (1u << bits) - 1;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t v = 0;
    for (int j = 0; j < 8; ++j) v |= (uint64_t(idx[i + j]) & mask) << (j * bits);
    for (int k = 0; k < bits; ++k) *out++ = uint8_t(v >> (8 * k));
  }
  uint64_t acc = 0;
  int n_acc = 0;
  for (; i < n; ++i) {
    acc |= (uint64_t(idx[i]) & mask) << n_acc;
    n_acc += bits;
    while (n_acc >= 8) {
      *out++ = uint8_t(acc);
      acc >>= 8;
      n_acc -= 8;
    }
  }
  if (n_acc > 0) *out = uint8_t(acc);
}

void unpack_bits(const uint8_t* in, int64_t n, int bits, uint8_t* idx) {
  const uint64_t mask = (1u << bits) - 1;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t v = 0;
    for (int k = 0; k < bits; ++k) v |= uint64_t(in[k]) << (8 * k);
    in += bits;
    for (int j = 0; j < 8; ++j) idx[i + j] = uint8_t((v >> (j * bits)) & mask);
  }
  uint64_t acc = 0;
  int n_acc = 0;
  for (; i < n; ++i) {
    if (n_acc < bits) {
      acc |= uint64_t(*in++) << n_acc;
      n_acc += 8;
    }
    idx[i] = uint8_t(acc & mask);
    acc >>= bits;
    n_acc -= bits;
  }
}

void pack_codes(const uint8_t* idx, int d, QuantWidth w, uint8_t* out) {
  int hi = split_high_count(d, w);
  pack_bits(idx, hi, w.high_bits(), out);
  pack_bits(idx + hi, d - hi, w.low_bits(), out + packed_bytes(hi, w.high_bits()));
}

void unpack_codes(const uint8_t* in, int d, QuantWidth w, uint8_t* idx) {
  int hi = split_high_count(d, w);
  unpack_bits(in, hi, w.high_bits(), idx);
  unpack_bits(in + packed_bytes(hi, w.high_bits()), d - hi, w.low_bits(), idx + hi);
}

}  // namespace tq::quant
