// SHA-256's compression function on the x86 SHA extensions (SHA-NI), for Sha256 (sha256.cpp):
// ~10x the portable code, so a validation run's model hashes do not dominate it.
#pragma once
#include <cstddef>
#include <cstdint>

namespace tq::detail {

// The 64 round constants (sha256.cpp), 16-byte aligned.
extern const uint32_t kSha256K[64];

// Whether this CPU has the SHA extensions with SSSE3 and SSE4.1 (false off x86-64).
bool sha256_x86_available();
// Runs n 64-byte blocks from p into state (h0..h7). Only when sha256_x86_available().
void sha256_x86_blocks(uint32_t state[8], const uint8_t* p, size_t n);

}  // namespace tq::detail
