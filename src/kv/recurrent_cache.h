// RecurrentCache: a Gated DeltaNet layer's fixed-size state (the causal conv's last K-1 inputs
// and the delta-rule state per value head). It grows with no token, cannot be sliced by token,
// and stays in its native f32 form when the attention layers are converted to TurboQuant.
#pragma once
#include <vector>

#include "kv/layer_cache.h"

namespace tq {

struct RecurrentShape {
  int64_t conv_dim = 0;     // channels through the conv (q, k and v of every head)
  int64_t conv_kernel = 0;  // taps; the state keeps conv_kernel - 1 inputs
  int64_t n_v_head = 0;
  int64_t k_head_dim = 0;
  int64_t v_head_dim = 0;

  size_t conv_state_floats() const { return size_t((conv_kernel - 1) * conv_dim); }
  size_t recurrent_state_floats() const { return size_t(n_v_head * k_head_dim * v_head_dim); }
  // Bytes of one layer's state (f32), the same at every sequence length.
  size_t bytes() const { return (conv_state_floats() + recurrent_state_floats()) * sizeof(float); }
};

class RecurrentCache final : public LayerCache {
 public:
  RecurrentCache(Backend& be, const RecurrentShape& s);
  CacheKind kind() const override { return CacheKind::Recurrent; }
  int64_t n_tokens() const override { return n_; }
  size_t bytes() const override { return conv_.bytes() + state_.bytes(); }
  // Nothing per token: the state is fixed-size (bytes() counts it).
  size_t bytes_per_token() const override { return 0; }
  // Zeroes both states, as a fresh sequence starts.
  void clear() override;
  // A recurrent layer has no keys to attend over: the model runs it through its own ops.
  void append_and_attend(Backend& be, const float* q, const float* k, const float* v, int64_t T,
                         float scale, float* out) override;

  // Block bytes: the conv state then the recurrent state at the boundary (f32, as laid out below).
  void save_block(Backend& be, int64_t t0, std::vector<uint8_t>& out) const override;
  bool load_block(Backend& be, int64_t t0, int64_t n, std::span<const uint8_t> in) override;
  std::string format_id() const override;

  const RecurrentShape& shape() const { return s_; }
  float* conv_state() { return conv_.f32(); }       // [conv_kernel - 1, conv_dim], oldest first
  float* recurrent_state() { return state_.f32(); }  // [n_v_head, k_head_dim, v_head_dim]
  // Records that the model ran T more tokens through the state.
  void advance(int64_t T) { n_ += T; }
  // Host copies of the states (tests, validation).
  std::vector<float> read_conv_state() const;
  std::vector<float> read_recurrent_state() const;

 private:
  Backend* be_;
  RecurrentShape s_;
  DeviceBuffer conv_, state_;
  int64_t n_ = 0;
};

}  // namespace tq
