// Qwen3_5Lm: the Qwen3.5 hybrid decoder (Gated DeltaNet + gated full attention, SwiGLU MLP)
// written against Backend; DeltaNet layers advance a RecurrentCache, attention layers their KV.
#include "model/qwen3_5.h"

#include <cmath>

#include "core/error.h"
#include "model/qwen3_5_weights.h"
#include "model/rope.h"

namespace tq {
namespace {

using qwen3_5::LayerWeights;

class Qwen3_5Lm final : public Model {
 public:
  Qwen3_5Lm(const ModelConfig& cfg, Backend& be, qwen3_5::Weights w) : w_(std::move(w)) {
    config_ = cfg;
    backend_ = &be;
    weight_bytes_ = w_.bytes;
    // RoPE covers only the first rotary_dim() elements of each head (partial rotary).
    inv_freq_ = rope_inv_freq(cfg.rope, cfg.rotary_dim());
  }

  void forward_batch(std::span<const SeqStep> steps) override {
    const ModelConfig& c = config_;
    Backend& be = *backend_;
    gather_step(steps, ids_, pos0_);
    for (const SeqStep& st : steps) check_cache(st.cache);
    const int64_t T = int64_t(ids_.size());
    ensure_workspace(T);
    const int64_t H = c.hidden_size;
    const float eps = float(c.rms_norm_eps);
    float* x = ws_x_.f32();
    float* h = ws_h_.f32();
    be.embedding(ids_, w_.embed, x);
    for (int64_t li = 0; li < c.n_layer; ++li) {
      const LayerWeights& L = w_.layers[size_t(li)];
      be.rms_norm(x, T, L.input_norm, eps, h);
      if (L.linear)
        deltanet(L, li, steps, h);
      else
        gated_attention(L, li, steps, h);
      be.add(x, h, T * H);
      swiglu_mlp(x, T, L.post_norm, L.mlp_gate, L.mlp_up, L.mlp_down, h, ws_gate_.f32(),
                 ws_up_.f32());
    }
    write_logits(steps, x, h, w_.norm, c.tie_word_embeddings ? w_.embed : w_.lm_head,
                 ws_logits_.f32());
  }

 private:
  // Every layer's cache must be of the kind its layer runs on.
  void check_cache(const KvCache* cache) const {
    if (!cache || int64_t(cache->layers.size()) != config_.n_layer)
      fail("forward: cache has the wrong layer count");
    for (int64_t li = 0; li < config_.n_layer; ++li) {
      bool recurrent = cache->layers[size_t(li)]->kind() == CacheKind::Recurrent;
      if (recurrent != w_.layers[size_t(li)].linear)
        fail("forward: layer {} needs a {} cache, got {}", li,
             w_.layers[size_t(li)].linear ? "recurrent" : "key/value",
             cache_kind_name(cache->layers[size_t(li)]->kind()));
    }
  }

  // Gated DeltaNet token mixer: h [T, hidden] (normed input) -> h (its output).
  void deltanet(const LayerWeights& L, int64_t li, std::span<const SeqStep> steps, float* h) {
    const ModelConfig& c = config_;
    const LinearAttentionConfig& lc = c.linear;
    Backend& be = *backend_;
    const int64_t T = int64_t(ids_.size()), cd = lc.conv_dim(), nv = lc.n_v_head;
    float *mixed = ws_mixed_.f32(), *conv = ws_conv_.f32(), *z = ws_z_.f32();
    float *a = ws_a_.f32(), *b = ws_b_.f32(), *g = ws_g_.f32(), *beta = ws_beta_.f32();
    float *core = ws_core_.f32(), *normed = ws_normed_.f32();
    be.linear(h, T, L.dn.in_qkv, mixed);
    be.linear(h, T, L.dn.in_z, z);
    be.linear(h, T, L.dn.in_b, b);
    be.linear(h, T, L.dn.in_a, a);
    be.delta_gates(a, b, T, L.dn.a_log, L.dn.dt_bias, g, beta);
    int64_t row = 0;
    for (const SeqStep& st : steps) {
      const int64_t n = int64_t(st.ids.size());
      auto& rc = static_cast<RecurrentCache&>(*st.cache->layers[size_t(li)]);
      be.causal_conv1d_silu(mixed + row * cd, n, L.dn.conv, rc.conv_state(), conv + row * cd);
      DeltaRuleArgs d;
      d.q = conv + row * cd;
      d.k = d.q + lc.key_dim();
      d.v = d.q + 2 * lc.key_dim();
      d.token_stride = cd;
      d.g = g + row * nv;
      d.beta = beta + row * nv;
      d.state = rc.recurrent_state();
      d.out = core + row * lc.value_dim();
      d.T = n;
      d.n_k_head = lc.n_k_head;
      d.n_v_head = nv;
      d.dk = lc.k_head_dim;
      d.dv = lc.v_head_dim;
      be.gated_delta_rule(d);
      rc.advance(n);
      row += n;
    }
    be.rms_norm_gated(core, z, T * nv, L.dn.norm, float(c.rms_norm_eps), normed);
    be.linear(normed, T, L.dn.out, h);
  }

  // Gated full attention: q/k RMSNorm, partial RoPE, attention on the layer's KV cache, the
  // output scaled by sigmoid(gate) before o_proj. h [T, hidden] -> h.
  void gated_attention(const LayerWeights& L, int64_t li, std::span<const SeqStep> steps,
                       float* h) {
    const ModelConfig& c = config_;
    Backend& be = *backend_;
    const int64_t T = int64_t(ids_.size());
    const float eps = float(c.rms_norm_eps);
    const float scale = 1.0f / std::sqrt(float(c.head_dim));
    float *q = ws_q_.f32(), *k = ws_k_.f32(), *v = ws_v_.f32(), *attn = ws_attn_.f32();
    be.linear(h, T, L.attn.q, q);
    if (c.attn_output_gate) be.linear(h, T, L.attn.gate, ws_qgate_.f32());
    be.linear(h, T, L.attn.k, k);
    be.linear(h, T, L.attn.v, v);
    be.rms_norm(q, T * c.n_head, L.attn.q_norm, eps, q);
    be.rms_norm(k, T * c.n_head_kv, L.attn.k_norm, eps, k);
    int64_t row = 0;
    for (size_t si = 0; si < steps.size(); ++si) {
      const SeqStep& st = steps[si];
      const int64_t n = int64_t(st.ids.size()), pos0 = pos0_[si];
      float *qs = q + row * c.q_dim(), *ks = k + row * c.kv_dim(), *vs = v + row * c.kv_dim();
      be.rope_partial(qs, n, c.n_head, c.head_dim, c.rotary_dim(), pos0, inv_freq_);
      be.rope_partial(ks, n, c.n_head_kv, c.head_dim, c.rotary_dim(), pos0, inv_freq_);
      st.cache->layers[size_t(li)]->append_and_attend(be, qs, ks, vs, n, scale,
                                                      attn + row * c.q_dim());
      row += n;
    }
    if (c.attn_output_gate) be.sigmoid_mul(attn, ws_qgate_.f32(), T * c.q_dim());
    be.linear(attn, T, L.attn.o, h);
  }

  void ensure_workspace(int64_t T) {
    if (T <= ws_tokens_) return;
    const ModelConfig& c = config_;
    const LinearAttentionConfig& l = c.linear;
    Backend* be = backend_;
    auto buf = [&](int64_t per_token) {
      return DeviceBuffer(be, size_t(T * std::max<int64_t>(per_token, 1)) * sizeof(float));
    };
    ws_x_ = buf(c.hidden_size);
    ws_h_ = buf(c.hidden_size);
    ws_q_ = buf(c.q_dim());
    ws_qgate_ = buf(c.attn_output_gate ? c.q_dim() : 0);
    ws_k_ = buf(c.kv_dim());
    ws_v_ = buf(c.kv_dim());
    ws_attn_ = buf(c.q_dim());
    ws_mixed_ = buf(l.conv_dim());
    ws_conv_ = buf(l.conv_dim());
    ws_z_ = buf(l.value_dim());
    ws_core_ = buf(l.value_dim());
    ws_normed_ = buf(l.value_dim());
    ws_a_ = buf(l.n_v_head);
    ws_b_ = buf(l.n_v_head);
    ws_g_ = buf(l.n_v_head);
    ws_beta_ = buf(l.n_v_head);
    ws_gate_ = buf(c.intermediate_size);
    ws_up_ = buf(c.intermediate_size);
    ws_logits_ = DeviceBuffer(be, size_t(kLogitRows * c.vocab_size) * sizeof(float));
    ws_tokens_ = T;
  }

  qwen3_5::Weights w_;
  std::vector<float> inv_freq_;  // [rotary_dim / 2]
  std::vector<int32_t> ids_;     // the step's tokens, all sequences concatenated
  std::vector<int64_t> pos0_;    // per sequence: position of its first token in this step
  int64_t ws_tokens_ = 0;
  // f32 workspaces, [T, per-token width] each.
  DeviceBuffer ws_x_, ws_h_, ws_q_, ws_qgate_, ws_k_, ws_v_, ws_attn_;
  DeviceBuffer ws_mixed_, ws_conv_, ws_z_, ws_core_, ws_normed_, ws_a_, ws_b_, ws_g_, ws_beta_;
  DeviceBuffer ws_gate_, ws_up_, ws_logits_;
};

}  // namespace

RecurrentShape recurrent_shape(const ModelConfig& cfg) {
  const LinearAttentionConfig& l = cfg.linear;
  return {l.conv_dim(), l.conv_kernel, l.n_v_head, l.k_head_dim, l.v_head_dim};
}

std::unique_ptr<Model> load_qwen3_5(const ModelConfig& cfg, const TensorStore& store, Backend& be,
                                    const std::function<void(int64_t, int64_t)>& on_progress) {
  return std::make_unique<Qwen3_5Lm>(cfg, be, qwen3_5::load_weights(cfg, store, be, on_progress));
}

}  // namespace tq
