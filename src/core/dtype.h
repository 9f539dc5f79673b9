// Element types of stored tensors and exact conversions bf16/f16 <-> f32.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace tq {

enum class DType : uint8_t { F32, F16, BF16, I32, I64, U8, I8, BOOL, F64, I16, U16, U32, U64 };

size_t dtype_size(DType t);
std::string_view dtype_name(DType t);  // safetensors spelling: "F32", "BF16", ...
// Parses a safetensors dtype string; false when unknown.
bool parse_dtype(std::string_view s, DType* out);

inline float bf16_to_f32(uint16_t h) {
  uint32_t bits = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Round to nearest even, NaN stays NaN (as PyTorch does).
inline uint16_t f32_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return uint16_t((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return uint16_t(bits >> 16);
}

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

// Converts n stored elements of type t at src to f32. t must be F32, F16 or BF16.
void to_f32(DType t, const void* src, float* dst, size_t n);

}  // namespace tq
