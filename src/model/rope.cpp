// rope_inv_freq: default, linear and llama3 frequency schedules.
#include "model/rope.h"

#include <cmath>

namespace tq {

std::vector<float> rope_inv_freq(const RopeConfig& rope, int64_t head_dim) {
  const int64_t half = head_dim / 2;
  std::vector<float> f(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    // transformers: 1.0 / (base ** (arange(0, dim, 2).float() / dim)), all in fp32.
    float expo = float(2 * i) / float(head_dim);
    f[size_t(i)] = 1.0f / std::pow(float(rope.theta), expo);
  }
  if (rope.type == "linear") {
    for (float& x : f) x = float(x / rope.factor);
  } else if (rope.type == "llama3") {
    const double pi = 3.14159265358979323846;
    double low_wavelen = double(rope.original_max_position) / rope.low_freq_factor;
    double high_wavelen = double(rope.original_max_position) / rope.high_freq_factor;
    for (float& x : f) {
      double wavelen = 2 * pi / x;
      if (wavelen > low_wavelen) {
        x = float(x / rope.factor);
      } else if (wavelen >= high_wavelen) {
        double smooth = (double(rope.original_max_position) / wavelen - rope.low_freq_factor) /
                        (rope.high_freq_factor - rope.low_freq_factor);
        x = float((1 - smooth) * x / rope.factor + smooth * x);
      }
    }
  }
  return f;
}

}  // namespace tq
