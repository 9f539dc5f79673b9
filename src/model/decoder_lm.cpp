// DecoderLm: the Qwen3 / Llama decoder-only transformer (pre-norm, GQA attention with optional
// per-head q/k RMSNorm, RoPE, SwiGLU MLP, tied or untied LM head), written against Backend.
#include <cmath>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "io/safetensors.h"
#include "model/model.h"
#include "model/qwen3_5.h"
#include "model/rope.h"

namespace tq {
namespace {

struct LayerWeights {
  Weight input_norm, post_norm;          // [1, hidden]
  Weight q, k, v, o;                     // [q_dim, hidden], [kv_dim, hidden] x2, [hidden, q_dim]
  Weight q_bias, k_bias, v_bias;         // optional, [1, *_dim]
  Weight q_norm, k_norm;                 // [1, head_dim] (Qwen3)
  Weight gate, up, down;                 // [inter, hidden] x2, [hidden, inter]
};

class DecoderLm final : public Model {
 public:
  DecoderLm(const ModelConfig& cfg, Backend& be) {
    config_ = cfg;
    backend_ = &be;
    inv_freq_ = rope_inv_freq(cfg.rope, cfg.head_dim);
  }

  void load(const TensorStore& store, const std::function<void(int64_t, int64_t)>& progress) {
    const ModelConfig& c = config_;
    int64_t total = c.n_layer + 2, done = 0;
    auto get = [&](const std::string& name, int64_t rows, int64_t cols) {
      TensorView t = store.get(name);
      return with_context(store.file_of(name).string() + ": tensor '" + name + "'", [&] {
        const auto& shape = t.info->shape;
        bool vec = rows == 1;
        bool ok = vec ? (shape.size() == 1 && shape[0] == cols)
                      : (shape.size() == 2 && shape[0] == rows && shape[1] == cols);
        if (!ok)
          fail("shape [{}] does not match the config's [{}]", fmt::join(shape, ", "),
               vec ? std::to_string(cols) : fmt::format("{}, {}", rows, cols));
        DType dt = t.info->dtype;
        if (dt != DType::BF16 && dt != DType::F16 && dt != DType::F32)
          fail("dtype {} is not supported (BF16, F16, F32)", dtype_name(dt));
        Weight w = backend_->load_weight(dt, t.data, rows, cols);
        store.release(name);  // copied: the mapped pages need not stay
        weight_bytes_ += w.buf.bytes();
        return w;
      });
    };
    const int64_t H = c.hidden_size, I = c.intermediate_size;
    embed_ = get("model.embed_tokens.weight", c.vocab_size, H);
    if (progress) progress(++done, total);
    layers_.resize(size_t(c.n_layer));
    for (int64_t i = 0; i < c.n_layer; ++i) {
      std::string p = "model.layers." + std::to_string(i) + ".";
      LayerWeights& L = layers_[size_t(i)];
      L.input_norm = get(p + "input_layernorm.weight", 1, H);
      L.post_norm = get(p + "post_attention_layernorm.weight", 1, H);
      L.q = get(p + "self_attn.q_proj.weight", c.q_dim(), H);
      L.k = get(p + "self_attn.k_proj.weight", c.kv_dim(), H);
      L.v = get(p + "self_attn.v_proj.weight", c.kv_dim(), H);
      L.o = get(p + "self_attn.o_proj.weight", H, c.q_dim());
      if (c.attention_bias) {
        L.q_bias = get(p + "self_attn.q_proj.bias", 1, c.q_dim());
        L.k_bias = get(p + "self_attn.k_proj.bias", 1, c.kv_dim());
        L.v_bias = get(p + "self_attn.v_proj.bias", 1, c.kv_dim());
      }
      if (c.qk_norm) {
        L.q_norm = get(p + "self_attn.q_norm.weight", 1, c.head_dim);
        L.k_norm = get(p + "self_attn.k_norm.weight", 1, c.head_dim);
      }
      L.gate = get(p + "mlp.gate_proj.weight", I, H);
      L.up = get(p + "mlp.up_proj.weight", I, H);
      L.down = get(p + "mlp.down_proj.weight", H, I);
      if (progress) progress(++done, total);
    }
    norm_ = get("model.norm.weight", 1, H);
    if (!c.tie_word_embeddings) lm_head_ = get("lm_head.weight", c.vocab_size, H);
    if (progress) progress(++done, total);
  }

  void forward_batch(std::span<const SeqStep> steps) override {
    const ModelConfig& c = config_;
    Backend& be = *backend_;
    gather_step(steps, ids_, pos0_);
    const int64_t T = int64_t(ids_.size());
    if (T == 0) fail("forward: no tokens");
    ensure_workspace(T);
    const float eps = float(c.rms_norm_eps);
    const float scale = 1.0f / std::sqrt(float(c.head_dim));
    float* x = ws_x_.f32();
    float* h = ws_h_.f32();
    float *q = ws_q_.f32(), *k = ws_k_.f32(), *v = ws_v_.f32(), *attn = ws_attn_.f32();
    be.embedding(ids_, embed_, x);
    // TQ_BATCH_DECODE=0 (a benchmark's same-run baseline): every sequence attends on its own.
    static const bool batch_decode = [] {
      const char* e = std::getenv("TQ_BATCH_DECODE");
      return !e || std::string(e) != "0";
    }();
    // TQ_BATCH_APPEND=0 (a same-run baseline): per-sequence q/k RoPE and KV appends inside
    // decode_view instead of one qk_norm_rope_rows and one kv_append_batch per layer.
    static const bool batch_append = [] {
      const char* e = std::getenv("TQ_BATCH_APPEND");
      return !e || std::string(e) != "0";
    }();
    n_decode_ = 0;
    for (const SeqStep& st : steps) n_decode_ += batch_decode && st.ids.size() == 1;
    const bool rows_op = batch_append && n_decode_ >= 1;
    if (rows_op) {
      pos_rows_.clear();
      for (size_t si = 0; si < steps.size(); ++si)
        for (size_t t = 0; t < steps[si].ids.size(); ++t)
          pos_rows_.push_back(pos0_[si] + int64_t(t));
    }
    for (int64_t li = 0; li < c.n_layer; ++li) {
      const LayerWeights& L = layers_[size_t(li)];
      const Weight* qkv[] = {&L.q, &L.k, &L.v};
      float* qkv_out[] = {q, k, v};
      const Weight* qkv_bias[] = {&L.q_bias, &L.k_bias, &L.v_bias};
      be.norm_linear(x, T, L.input_norm, eps, h, qkv, qkv_out,
                     c.attention_bias ? std::span<const Weight* const>(qkv_bias)
                                      : std::span<const Weight* const>());
      // Attention. With rows_op: the one-token rows' caches first describe where their token
      // goes (decode_reserve); one qk_norm_rope_append call rotates q/k of every row and stores
      // those tokens (one launch at batch 1); their attention is one decode_attention_batch call.
      // Otherwise, with two or more one-token steps, those whose caches can describe themselves
      // (decode_view) share that call. The others (prefill chunks, rotating / recurrent /
      // host-compressed layers) attend one by one.
      batch_.clear();
      batch_caches_.clear();
      appends_.clear();
      reserved_.assign(steps.size(), 0);
      if (rows_op) {
        for (size_t si = 0, row = 0; si < steps.size(); row += steps[si].ids.size(), ++si) {
          DecodeSeq view;
          KvAppend app;
          LayerCache& lc = *steps[si].cache->layers[size_t(li)];
          if (steps[si].ids.size() != 1 || !lc.decode_reserve(be, app, view)) continue;
          app.row = view.row = int64_t(row);
          app.defer_record = true;  // attended below from the window; finished after that
          appends_.push_back(app);
          batch_.push_back(view);
          batch_caches_.push_back(&lc);
          reserved_[si] = 1;
        }
        be.qk_norm_rope_append(q, k, v, T, c.n_head, c.n_head_kv, c.head_dim,
                               c.qk_norm ? &L.q_norm : nullptr, c.qk_norm ? &L.k_norm : nullptr,
                               eps, pos_rows_, inv_freq_, appends_);
      }
      int64_t row = 0;
      for (size_t si = 0; si < steps.size(); ++si) {
        const SeqStep& st = steps[si];
        const int64_t n = int64_t(st.ids.size()), pos0 = pos0_[si];
        if (reserved_[si]) {  // stored above; attends in decode_attention_batch below
          row += n;
          continue;
        }
        float *qs = q + row * c.q_dim(), *ks = k + row * c.kv_dim(), *vs = v + row * c.kv_dim();
        LayerCache& lc = *st.cache->layers[size_t(li)];
        // A compressed layer's prefill chunk takes q rotated: the RoPE pass does it.
        const quant::VectorCodec* rq = rows_op ? nullptr : lc.query_rotation(n);
        const Weight* qn = c.qk_norm ? &L.q_norm : nullptr;
        const Weight* kn = c.qk_norm ? &L.k_norm : nullptr;
        if (rq)
          be.qk_norm_rope_rotate_q(qs, ks, n, c.n_head, c.n_head_kv, c.head_dim, qn, kn, eps, pos0,
                                   inv_freq_, *rq);
        else if (!rows_op)
          be.qk_norm_rope(qs, ks, n, c.n_head, c.n_head_kv, c.head_dim, qn, kn, eps, pos0,
                          inv_freq_);
        DecodeSeq view;
        if (n == 1 && n_decode_ >= 2 && lc.decode_view(be, ks, vs, view)) {
          view.row = row;
          batch_.push_back(view);
          batch_caches_.push_back(&lc);
        } else if (rq) {
          lc.append_and_attend_rotated(be, qs, ks, vs, n, scale, attn + row * c.q_dim());
        } else {
          lc.append_and_attend(be, qs, ks, vs, n, scale, attn + row * c.q_dim());
        }
        row += n;
      }
      if (!batch_.empty()) {
        be.decode_attention_batch(batch_, q, attn, c.n_head, scale);
        for (LayerCache* lc : batch_caches_) lc->finish_decode(be);
      }
      be.finish_appends();  // before the next layer's q/k/v overwrite this one's k and v
      be.linear_add(attn, T, L.o, x, h);
      swiglu_mlp(x, T, L.post_norm, L.gate, L.up, L.down, h, ws_gate_.f32(), ws_up_.f32());
    }
    write_logits(steps, x, h, norm_, c.tie_word_embeddings ? embed_ : lm_head_, ws_logits_.f32());
  }

 private:

  void ensure_workspace(int64_t T) {
    if (T <= ws_tokens_) return;
    const ModelConfig& c = config_;
    Backend* be = backend_;
    auto buf = [&](int64_t per_token) { return DeviceBuffer(be, size_t(T * per_token) * 4); };
    ws_x_ = buf(c.hidden_size);
    ws_h_ = buf(c.hidden_size);
    ws_q_ = buf(c.q_dim());
    ws_k_ = buf(c.kv_dim());
    ws_v_ = buf(c.kv_dim());
    ws_attn_ = buf(c.q_dim());
    ws_gate_ = buf(c.intermediate_size);
    ws_up_ = buf(c.intermediate_size);
    ws_logits_ = DeviceBuffer(be, size_t(kLogitRows * c.vocab_size) * 4);
    ws_tokens_ = T;
  }

  std::vector<float> inv_freq_;
  std::vector<int32_t> ids_;    // the step's tokens, all sequences concatenated
  std::vector<int64_t> pos0_;   // per sequence: position of its first token in this step
  int64_t n_decode_ = 0;               // one-token steps in this call
  std::vector<DecodeSeq> batch_;       // this layer's batched decode sequences
  std::vector<LayerCache*> batch_caches_;
  std::vector<KvAppend> appends_;      // this layer's batched appends (decode_reserve)
  std::vector<char> reserved_;         // per sequence: its token was stored by qk_norm_rope_append
  std::vector<int64_t> pos_rows_;      // per row of the step: its position (qk_norm_rope_rows)
  Weight embed_, norm_, lm_head_;
  std::vector<LayerWeights> layers_;
  int64_t ws_tokens_ = 0;
  DeviceBuffer ws_x_, ws_h_, ws_q_, ws_k_, ws_v_, ws_attn_, ws_gate_, ws_up_, ws_logits_;
};

}  // namespace

void Model::swiglu_mlp(float* x, int64_t T, const Weight& norm, const Weight& gate,
                       const Weight& up, const Weight& down, float* h, float* gate_ws,
                       float* up_ws) const {
  backend_->norm_swiglu_down_add(x, T, norm, float(config_.rms_norm_eps), gate, up, down, h,
                                 gate_ws, up_ws);
}

void Model::gather_step(std::span<const SeqStep> steps, std::vector<int32_t>& ids,
                        std::vector<int64_t>& pos0) const {
  ids.clear();
  pos0.clear();
  for (const SeqStep& st : steps) {
    if (st.ids.empty()) fail("forward: a sequence with no tokens");
    if (!st.cache || int64_t(st.cache->layers.size()) != config_.n_layer)
      fail("forward: cache has the wrong layer count");
    for (int32_t id : st.ids)
      if (id < 0 || id >= config_.vocab_size)
        fail("token id {} is outside [0, {})", id, config_.vocab_size);
    ids.insert(ids.end(), st.ids.begin(), st.ids.end());
    pos0.push_back(st.cache->n_tokens());
  }
}

KvCache Model::new_cache() const {
  KvCache cache;
  LayerShape s{config_.n_head, config_.n_head_kv, config_.head_dim};
  for (LayerKind k : config_.layer_types)
    cache.layers.push_back(k == LayerKind::LinearAttention
                               ? make_recurrent_cache(*backend_, recurrent_shape(config_))
                           : k == LayerKind::SlidingAttention
                               ? make_rotating_cache(*backend_, s, config_.sliding_window)
                               : make_dense_cache(*backend_, s));
  return cache;
}

std::unique_ptr<Model> Model::load(const std::filesystem::path& dir, Backend& backend,
                                   const std::function<void(int64_t, int64_t)>& on_progress) {
  ModelConfig cfg = ModelConfig::from_model_dir(dir);
  TensorStore store(dir);
  if (cfg.architecture == "Qwen3_5ForCausalLM")
    return load_qwen3_5(cfg, store, backend, on_progress);
  auto m = std::make_unique<DecoderLm>(cfg, backend);
  m->load(store, on_progress);
  return m;
}

}  // namespace tq
