// RecurrentCache implementation: two zero-initialised backend buffers and a token count.
#include "kv/recurrent_cache.h"

#include <fmt/format.h>

#include "core/check.h"
#include "core/error.h"
#include "kv/block_bytes.h"

namespace tq {

RecurrentCache::RecurrentCache(Backend& be, const RecurrentShape& s)
    : be_(&be),
      s_(s),
      conv_(&be, s.conv_state_floats() * sizeof(float)),
      state_(&be, s.recurrent_state_floats() * sizeof(float)) {
  if (s.conv_dim <= 0 || s.conv_kernel <= 0 || s.n_v_head <= 0 || s.k_head_dim <= 0 ||
      s.v_head_dim <= 0)
    fail("recurrent cache: bad shape (conv {} x {}, {} heads of {} x {})", s.conv_dim,
         s.conv_kernel, s.n_v_head, s.k_head_dim, s.v_head_dim);
  clear();
}

void RecurrentCache::clear() {
  std::vector<float> zeros(std::max(s_.conv_state_floats(), s_.recurrent_state_floats()), 0.0f);
  if (conv_.bytes()) be_->upload(conv_.data(), zeros.data(), conv_.bytes());
  if (state_.bytes()) be_->upload(state_.data(), zeros.data(), state_.bytes());
  n_ = 0;
}

void RecurrentCache::append_and_attend(Backend&, const float*, const float*, const float*, int64_t,
                                       float, float*) {
  fail("a recurrent cache layer has no attention: the model advances its state directly");
}

std::vector<float> RecurrentCache::read_conv_state() const {
  std::vector<float> out(s_.conv_state_floats());
  if (!out.empty()) be_->download(out.data(), conv_.data(), conv_.bytes());
  return out;
}

std::vector<float> RecurrentCache::read_recurrent_state() const {
  std::vector<float> out(s_.recurrent_state_floats());
  be_->download(out.data(), state_.data(), state_.bytes());
  return out;
}

void RecurrentCache::save_block(Backend&, int64_t t0, std::vector<uint8_t>& out) const {
  TQ_CHECK(t0 >= 0 && t0 <= n_);
  if (conv_.bytes()) be_->download(grow_bytes(out, conv_.bytes()), conv_.data(), conv_.bytes());
  be_->download(grow_bytes(out, state_.bytes()), state_.data(), state_.bytes());
}

bool RecurrentCache::load_block(Backend&, int64_t t0, int64_t n, std::span<const uint8_t> in) {
  if (t0 != n_ || n < 0 || in.size() != conv_.bytes() + state_.bytes()) return false;
  if (conv_.bytes()) be_->upload(conv_.data(), in.data(), conv_.bytes());
  be_->upload(state_.data(), in.data() + conv_.bytes(), state_.bytes());
  n_ = t0 + n;
  return true;
}

std::string RecurrentCache::format_id() const {
  return fmt::format("recurrent f32 conv={}x{} v_heads={} k={} v={}", s_.conv_dim, s_.conv_kernel,
                     s_.n_v_head, s_.k_head_dim, s_.v_head_dim);
}

std::unique_ptr<LayerCache> make_recurrent_cache(Backend& be, const RecurrentShape& s) {
  return std::make_unique<RecurrentCache>(be, s);
}

}  // namespace tq
