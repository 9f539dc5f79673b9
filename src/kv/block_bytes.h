// ByteSink / ByteSource: little helpers that append and read plain values for prefix-cache block
// payloads and block files (host byte order is little-endian on every supported target).
#pragma once
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

namespace tq {

inline void put_bytes(std::vector<uint8_t>& out, const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  out.insert(out.end(), b, b + n);
}
template <class T>
void put_value(std::vector<uint8_t>& out, T v) {
  put_bytes(out, &v, sizeof v);
}
// Grows `out` by n bytes and returns where they start (for backends that download into it).
inline uint8_t* grow_bytes(std::vector<uint8_t>& out, size_t n) {
  size_t at = out.size();
  out.resize(at + n);
  return out.data() + at;
}

// Reads from a span; every read is bounds-checked and a failed read leaves ok() false.
class ByteSource {
 public:
  explicit ByteSource(std::span<const uint8_t> in) : in_(in) {}
  bool ok() const { return ok_; }
  size_t left() const { return in_.size() - at_; }
  const uint8_t* take(size_t n) {
    if (!ok_ || n > left()) {
      ok_ = false;
      return nullptr;
    }
    const uint8_t* p = in_.data() + at_;
    at_ += n;
    return p;
  }
  template <class T>
  bool read(T& v) {
    const uint8_t* p = take(sizeof v);
    if (p) std::memcpy(&v, p, sizeof v);
    return p != nullptr;
  }

 private:
  std::span<const uint8_t> in_;
  size_t at_ = 0;
  bool ok_ = true;
};

}  // namespace tq
