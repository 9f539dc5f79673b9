// SHA-256 (FIPS 180-4), streaming, and file hashing: the validation runner proves that model
// files were not modified during a run by hashing them before and after.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace tq {

class Sha256 {
 public:
  // Fastest: the CPU's SHA extensions when it has them (hardware_available()), else Portable.
  enum class Impl { Fastest, Portable };
  explicit Sha256(Impl impl = Impl::Fastest);
  static bool hardware_available();
  bool hardware() const { return hw_; }
  void reset();
  void update(const void* data, size_t n);
  void update(std::string_view s) { update(s.data(), s.size()); }
  std::array<uint8_t, 32> finish();  // the object must be reset() before reuse
  std::string finish_hex();

 private:
  void block(const uint8_t* p);                 // the portable compression function
  void blocks(const uint8_t* p, size_t n);      // n 64-byte blocks on the chosen implementation
  std::array<uint32_t, 8> h_{};
  uint8_t buf_[64] = {};
  size_t buf_len_ = 0;
  uint64_t total_ = 0;
  bool hw_ = false;
};

std::string sha256_hex(std::string_view data);
// Hashes a whole file in bounded reads; throws Error (naming the file) when it cannot be read.
std::string sha256_file(const std::filesystem::path& path);

}  // namespace tq
