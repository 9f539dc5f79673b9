// Loading of the Qwen3.5 hybrid's tensors: shape and dtype checks naming the file and tensor,
// (1 + w) folding of the zero-centred norms, and q_proj split into its query and gate halves.
#include "model/qwen3_5_weights.h"

#include <cstring>
#include <string>

#include "core/error.h"

namespace tq::qwen3_5 {
namespace {

class Loader {
 public:
  Loader(const TensorStore& store, Backend& be, size_t* bytes)
      : store_(store), be_(be), bytes_(bytes) {}

  // [rows, cols] matrix.
  Weight matrix(const std::string& name, int64_t rows, int64_t cols) {
    TensorView t = checked(name, {rows, cols});
    return released(name, upload(t.info->dtype, t.data, rows, cols));
  }
  // [n] vector, loaded as a [1, n] weight.
  Weight vector(const std::string& name, int64_t n) {
    TensorView t = checked(name, {n});
    return released(name, upload(t.info->dtype, t.data, 1, n));
  }
  // A Qwen3.5 RMSNorm weight [n], applied as (1 + w): folded once here, in fp32 as transformers
  // computes 1.0 + weight.float().
  Weight centred_norm(const std::string& name, int64_t n) {
    TensorView t = checked(name, {n});
    std::vector<float> w(static_cast<size_t>(n));
    to_f32(t.info->dtype, t.data, w.data(), w.size());
    for (float& x : w) x = 1.0f + x;
    return released(name, upload(DType::F32, w.data(), 1, n));
  }
  // Depthwise conv1d taps stored [channels, 1, kernel].
  Weight conv(const std::string& name, int64_t channels, int64_t kernel) {
    TensorView t = checked(name, {channels, 1, kernel});
    return released(name, upload(t.info->dtype, t.data, channels, kernel));
  }
  // q_proj of gated attention: [n_head * 2 * head_dim, hidden], each head's query rows followed
  // by its gate rows (transformers views the output as [.., n_head, 2 * head_dim] and chunks it).
  void query_and_gate(const std::string& name, int64_t n_head, int64_t head_dim, int64_t hidden,
                      Weight* q, Weight* gate) {
    TensorView t = checked(name, {n_head * 2 * head_dim, hidden});
    const size_t row = size_t(hidden) * dtype_size(t.info->dtype);
    const size_t half = size_t(head_dim) * row;
    std::vector<uint8_t> qb(size_t(n_head) * half), gb(qb.size());
    for (int64_t h = 0; h < n_head; ++h) {
      const uint8_t* src = t.data + size_t(h) * 2 * half;
      std::memcpy(qb.data() + size_t(h) * half, src, half);
      std::memcpy(gb.data() + size_t(h) * half, src + half, half);
    }
    *q = upload(t.info->dtype, qb.data(), n_head * head_dim, hidden);
    *gate = upload(t.info->dtype, gb.data(), n_head * head_dim, hidden);
    store_.release(name);
  }

 private:
  // A tensor's weight is on the backend: its mapped pages need not stay.
  Weight released(const std::string& name, Weight w) {
    store_.release(name);
    return w;
  }
  TensorView checked(const std::string& name, const std::vector<int64_t>& shape) {
    TensorView t = store_.get(name);
    with_context(store_.file_of(name).string() + ": tensor '" + name + "'", [&] {
      if (t.info->shape != shape)
        fail("shape [{}] does not match the config's [{}]", fmt::join(t.info->shape, ", "),
             fmt::join(shape, ", "));
      DType dt = t.info->dtype;
      if (dt != DType::BF16 && dt != DType::F16 && dt != DType::F32)
        fail("dtype {} is not supported (BF16, F16, F32)", dtype_name(dt));
      return 0;
    });
    return t;
  }
  Weight upload(DType dt, const void* data, int64_t rows, int64_t cols) {
    Weight w = be_.load_weight(dt, data, rows, cols);
    *bytes_ += w.buf.bytes();
    return w;
  }

  const TensorStore& store_;
  Backend& be_;
  size_t* bytes_;
};

void load_deltanet(Loader& ld, const ModelConfig& c, const std::string& p, DeltaNetWeights& w) {
  const LinearAttentionConfig& l = c.linear;
  const int64_t H = c.hidden_size;
  w.in_qkv = ld.matrix(p + "in_proj_qkv.weight", l.conv_dim(), H);
  w.in_z = ld.matrix(p + "in_proj_z.weight", l.value_dim(), H);
  w.in_b = ld.matrix(p + "in_proj_b.weight", l.n_v_head, H);
  w.in_a = ld.matrix(p + "in_proj_a.weight", l.n_v_head, H);
  w.conv = ld.conv(p + "conv1d.weight", l.conv_dim(), l.conv_kernel);
  w.a_log = ld.vector(p + "A_log", l.n_v_head);
  w.dt_bias = ld.vector(p + "dt_bias", l.n_v_head);
  w.norm = ld.vector(p + "norm.weight", l.v_head_dim);
  w.out = ld.matrix(p + "out_proj.weight", H, l.value_dim());
}

void load_attention(Loader& ld, const ModelConfig& c, const std::string& p, AttentionWeights& w) {
  const int64_t H = c.hidden_size;
  if (c.attn_output_gate)
    ld.query_and_gate(p + "q_proj.weight", c.n_head, c.head_dim, H, &w.q, &w.gate);
  else
    w.q = ld.matrix(p + "q_proj.weight", c.q_dim(), H);
  w.k = ld.matrix(p + "k_proj.weight", c.kv_dim(), H);
  w.v = ld.matrix(p + "v_proj.weight", c.kv_dim(), H);
  w.o = ld.matrix(p + "o_proj.weight", H, c.q_dim());
  w.q_norm = ld.centred_norm(p + "q_norm.weight", c.head_dim);
  w.k_norm = ld.centred_norm(p + "k_norm.weight", c.head_dim);
}

}  // namespace

Weights load_weights(const ModelConfig& c, const TensorStore& store, Backend& be,
                     const std::function<void(int64_t, int64_t)>& progress) {
  if (c.attention_bias) fail("Qwen3.5: \"attention_bias\": true is not supported");
  Weights W;
  Loader ld(store, be, &W.bytes);
  const int64_t H = c.hidden_size, I = c.intermediate_size;
  const int64_t total = c.n_layer + 2;
  int64_t done = 0;
  W.embed = ld.matrix("model.embed_tokens.weight", c.vocab_size, H);
  if (progress) progress(++done, total);
  W.layers.resize(size_t(c.n_layer));
  for (int64_t i = 0; i < c.n_layer; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    LayerWeights& L = W.layers[size_t(i)];
    L.linear = c.layer_types[size_t(i)] == LayerKind::LinearAttention;
    if (!L.linear && c.layer_types[size_t(i)] != LayerKind::FullAttention)
      fail("Qwen3.5: layer {} is {}, expected linear_attention or full_attention", i,
           layer_kind_name(c.layer_types[size_t(i)]));
    L.input_norm = ld.centred_norm(p + "input_layernorm.weight", H);
    L.post_norm = ld.centred_norm(p + "post_attention_layernorm.weight", H);
    if (L.linear)
      load_deltanet(ld, c, p + "linear_attn.", L.dn);
    else
      load_attention(ld, c, p + "self_attn.", L.attn);
    L.mlp_gate = ld.matrix(p + "mlp.gate_proj.weight", I, H);
    L.mlp_up = ld.matrix(p + "mlp.up_proj.weight", I, H);
    L.mlp_down = ld.matrix(p + "mlp.down_proj.weight", H, I);
    if (progress) progress(++done, total);
  }
  W.norm = ld.centred_norm("model.norm.weight", H);
  if (!c.tie_word_embeddings) W.lm_head = ld.matrix("lm_head.weight", c.vocab_size, H);
  if (progress) progress(++done, total);
  return W;
}

}  // namespace tq::qwen3_5
