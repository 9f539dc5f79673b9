// Fuzz target for the TurboQuant format descriptor (quant/tq_format): arbitrary bytes must parse
// or throw tq::Error, and whatever parses must round-trip and build working codecs.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "quant/tq_format.h"
#include "quant/vector_codec.h"

using tq::quant::TqFormat;
using tq::quant::VectorCodec;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  TqFormat f;
  size_t used = 0;
  try {
    f = TqFormat::parse(data, size, &used);
  } catch (const tq::Error&) {
    return 0;  // refused: the expected outcome for almost all inputs
  }
  // Accepted bytes are canonical: re-serializing gives them back, and parsing that gives f.
  std::vector<uint8_t> bytes = f.serialize();
  if (used != bytes.size() || std::memcmp(bytes.data(), data, used) != 0) std::abort();
  TqFormat g = TqFormat::parse(bytes.data(), bytes.size());
  if (!(g == f) || g.fingerprint() != f.fingerprint()) std::abort();
  f.check_matches(g);
  (void)f.describe();
  // A descriptor that validates must give codecs that work (bounded cost: small head dims only).
  if (f.head_dim <= 128) {
    VectorCodec k(f.key_config(1)), v(f.value_config(1));
    std::vector<float> x(f.head_dim), back(f.head_dim);
    for (int i = 0; i < f.head_dim; ++i) x[i] = float((i * 37) % 11) - 5.0f;
    for (const VectorCodec* c : {&k, &v}) {
      std::vector<uint8_t> rec(c->bytes_per_vector());
      c->encode(x.data(), rec.data());
      c->decode(rec.data(), back.data());
      for (float b : back)
        if (!std::isfinite(b)) std::abort();
    }
  }
  return 0;
}
