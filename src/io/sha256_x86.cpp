// SHA-256 blocks on the SHA extensions. The state lives as two vectors, ABEF and CDGH (the layout
// sha256rnds2 takes: A in the top lane); each sha256rnds2 does two rounds, so a group of four
// message words takes two, and sha256msg1 / msg2 extend the message schedule four words at a time.
#include "io/sha256_x86.h"

#if defined(__x86_64__) || defined(_M_X64)
#include <cpuid.h>
#include <immintrin.h>

namespace tq::detail {

bool sha256_x86_available() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
  const bool ssse3 = c & (1u << 9), sse41 = c & (1u << 19);
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  const bool sha = b & (1u << 29);
  return ssse3 && sse41 && sha;
}

__attribute__((target("sha,sse4.1,ssse3"))) void sha256_x86_blocks(uint32_t state[8], const uint8_t* p,
                                                                 size_t n) {
  // Big-endian message words into little-endian lanes, word 0 in the low lane.
  const __m128i bswap = _mm_set_epi64x(0x0c0d0e0f08090a0bll, 0x0405060700010203ll);
  // (A B C D), (E F G H) -> ABEF (A in lane 3) and CDGH.
  __m128i t = _mm_shuffle_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(state)), 0xB1);  // B A D C
  __m128i cdgh = _mm_shuffle_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(state + 4)), 0x1B);  // H G F E
  __m128i abef = _mm_alignr_epi8(t, cdgh, 8);  // F E B A
  cdgh = _mm_blend_epi16(cdgh, t, 0xF0);        // H G D C
  for (; n > 0; --n, p += 64) {
    const __m128i abef0 = abef, cdgh0 = cdgh;
    __m128i w[4];
    for (int i = 0; i < 4; ++i)
      w[i] = _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * i)), bswap);
    for (int r = 0; r < 16; ++r) {  // words 4r .. 4r + 3, rounds 4r .. 4r + 3
      if (r >= 4) {
        // W[t] = s1(W[t-2]) + W[t-7] + s0(W[t-15]) + W[t-16], four at a time: slot r & 3 holds
        // words 4r - 16.., the next slots 4r - 12.., 4r - 8.., 4r - 4...
        __m128i& g = w[r & 3];
        const __m128i x = _mm_sha256msg1_epu32(g, w[(r + 1) & 3]);
        const __m128i y = _mm_add_epi32(x, _mm_alignr_epi8(w[(r + 3) & 3], w[(r + 2) & 3], 4));
        g = _mm_sha256msg2_epu32(y, w[(r + 3) & 3]);
      }
      __m128i m = _mm_add_epi32(w[r & 3], _mm_load_si128(reinterpret_cast<const __m128i*>(kSha256K + 4 * r)));
      cdgh = _mm_sha256rnds2_epu32(cdgh, abef, m);  // now the new ABEF; the old one is CDGH
      m = _mm_shuffle_epi32(m, 0x0E);
      abef = _mm_sha256rnds2_epu32(abef, cdgh, m);
    }
    abef = _mm_add_epi32(abef, abef0);
    cdgh = _mm_add_epi32(cdgh, cdgh0);
  }
  // Back to (A B C D), (E F G H).
  t = _mm_shuffle_epi32(abef, 0x1B);      // A B E F
  cdgh = _mm_shuffle_epi32(cdgh, 0xB1);   // G H C D
  abef = _mm_blend_epi16(t, cdgh, 0xF0);  // A B C D
  cdgh = _mm_alignr_epi8(cdgh, t, 8);     // E F G H
  _mm_storeu_si128(reinterpret_cast<__m128i*>(state), abef);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(state + 4), cdgh);
}

}  // namespace tq::detail

#else

namespace tq::detail {
bool sha256_x86_available() { return false; }
void sha256_x86_blocks(uint32_t*, const uint8_t*, size_t) {}
}  // namespace tq::detail

#endif
