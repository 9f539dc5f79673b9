// Element-type names, sizes and the f16 conversions.
#include "core/dtype.h"

#include "core/check.h"

namespace tq {
namespace {
struct DTypeInfo {
  DType type;
  std::string_view name;
  size_t size;
};
constexpr DTypeInfo kTypes[] = {
    {DType::F32, "F32", 4},  {DType::F16, "F16", 2},   {DType::BF16, "BF16", 2},
    {DType::I32, "I32", 4},  {DType::I64, "I64", 8},   {DType::U8, "U8", 1},
    {DType::I8, "I8", 1},    {DType::BOOL, "BOOL", 1}, {DType::F64, "F64", 8},
    {DType::I16, "I16", 2},  {DType::U16, "U16", 2},   {DType::U32, "U32", 4},
    {DType::U64, "U64", 8},
};
}  // namespace

size_t dtype_size(DType t) {
  for (const auto& i : kTypes)
    if (i.type == t) return i.size;
  TQ_CHECK(false);
  return 0;
}

std::string_view dtype_name(DType t) {
  for (const auto& i : kTypes)
    if (i.type == t) return i.name;
  return "?";
}

bool parse_dtype(std::string_view s, DType* out) {
  for (const auto& i : kTypes)
    if (i.name == s) {
      *out = i.type;
      return true;
    }
  return false;
}

float f16_to_f32(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400u) == 0);
      bits = sign | uint32_t(127 - 15 - e) << 23 | (mant & 0x3ffu) << 13;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | mant << 13;
  } else {
    bits = sign | (exp + 112) << 23 | mant << 13;
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t f32_to_f16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t absx = x & 0x7fffffffu;
  if (absx > 0x7f800000u) return uint16_t(sign | 0x7e00u);  // NaN
  if (absx >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // overflow -> inf
  if (absx < 0x38800000u) {                                  // subnormal or zero
    if (absx < 0x33000000u) return uint16_t(sign);
    uint32_t e = absx >> 23;
    uint32_t m = (absx & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - e;  // 14 + (113 - e) - 1
    uint32_t half = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1);
    uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1u))) ++half;
    return uint16_t(sign | half);
  }
  uint32_t r = absx + 0xfffu + ((absx >> 13) & 1u);  // round to nearest even
  return uint16_t(sign | ((r - 0x38000000u) >> 13));
}

void to_f32(DType t, const void* src, float* dst, size_t n) {
  switch (t) {
    case DType::F32:
      std::memcpy(dst, src, n * 4);
      return;
    case DType::BF16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(s[i]);
      return;
    }
    case DType::F16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = f16_to_f32(s[i]);
      return;
    }
    default:
      TQ_CHECK_MSG(false, "to_f32: not a float type");
  }
}

}  // namespace tq
