// Backend::decode_attention_batch on the CUDA backend (one launch per kind over per-sequence
// descriptors) against the per-sequence path (append_and_attend, itself checked against the CPU
// elsewhere) on identical caches: dense bf16 and TurboQuant with and without an exact window,
// lengths 1 .. 5000, batches of 1, 3 and 32, rows out of order, outputs NaN-poisoned; the batched
// append (decode_reserve + kv_append_batch) and the per-row-position q/k RoPE likewise.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "backend/cuda/tq_cuda.h"
#include "gpu_test_util.h"
#include "kv/layer_cache.h"
#include "quant/tq_format.h"

namespace tq::test {
namespace {

const LayerShape kShape{8, 2, 128};  // GQA groups of 4
constexpr int kLayer = 1;

enum class Kind { Dense, Tq0, Tq128 };

std::unique_ptr<LayerCache> make(Backend& be, Kind kind, const quant::TqFormat& f) {
  if (kind == Kind::Dense) return make_dense_cache(be, kShape);
  return make_compressed_cache(be, kShape, f, kLayer, kind == Kind::Tq128 ? 128 : 0);
}

// Two identical caches per sequence (reference and batched), prefilled with len - 1 tokens.
struct Seq {
  Kind kind;
  int64_t len;
  std::unique_ptr<LayerCache> ref, bat;
};

void prefill(Backend& be, Seq& s, const DeviceBuffer& q_big, float scale) {
  const int64_t n = s.len - 1;
  if (n <= 0) return;
  const size_t kv = size_t(n * kShape.n_head_kv * kShape.head_dim);
  DeviceBuffer k = to_dev(be, randn(kv, 2.0f)), v = to_dev(be, randn(kv));
  if (s.kind == Kind::Dense) {
    DeviceBuffer out(&be, size_t(n * kShape.n_head * kShape.head_dim) * 4);
    s.ref->append_and_attend(be, q_big.f32(), k.f32(), v.f32(), n, scale, out.f32());
    s.bat->append_and_attend(be, q_big.f32(), k.f32(), v.f32(), n, scale, out.f32());
  } else {
    s.ref->append_tokens(be, k.f32(), v.f32(), n);
    s.bat->append_tokens(be, k.f32(), v.f32(), n);
  }
}

// The worst relative error over the B rows of qd floats: got against want (device buffers).
double worst_row_err(Backend& be, const DeviceBuffer& want, const DeviceBuffer& got, int64_t B,
                     int64_t qd) {
  const std::vector<float> w = from_dev(be, want, size_t(B * qd));
  const std::vector<float> g = from_dev(be, got, size_t(B * qd));
  double worst = 0;
  for (int64_t r = 0; r < B; ++r) {
    std::vector<float> gr(g.begin() + r * qd, g.begin() + (r + 1) * qd);
    std::vector<double> wr(w.begin() + r * qd, w.begin() + (r + 1) * qd);
    worst = std::max(worst, rel_err(gr, wr));
  }
  return worst;
}

// B sequences cycling through `kinds` and the context lengths, both caches of each prefilled.
std::vector<Seq> make_seqs(Backend& be, const std::vector<Kind>& kinds, int64_t B,
                           const quant::TqFormat& f, float scale) {
  const int64_t lens[] = {1, 7, 300, 5000, 129, 2048};
  DeviceBuffer q_big = to_dev(be, randn(size_t(5000 * kShape.n_head * kShape.head_dim)));
  std::vector<Seq> seqs;
  for (int64_t i = 0; i < B; ++i) {
    Seq s{kinds[size_t(i) % kinds.size()], lens[(i / kinds.size()) % 6], nullptr, nullptr};
    s.ref = make(be, s.kind, f);
    s.bat = make(be, s.kind, f);
    prefill(be, s, q_big, scale);
    seqs.push_back(std::move(s));
  }
  return seqs;
}

quant::TqFormat random_format() {
  quant::TqFormat f;
  f.head_dim = 128;
  f.key_seed = rng()();
  f.value_seed = rng()();
  f.per_layer_seeds = true;
  return f;
}

// One decode step of every sequence both ways; returns the worst relative error.
double step(Backend& be, std::vector<Seq>& seqs, float scale, bool* all_batched) {
  const int64_t B = int64_t(seqs.size()), qd = kShape.n_head * kShape.head_dim;
  const int64_t kd = kShape.n_head_kv * kShape.head_dim;
  DeviceBuffer q = to_dev(be, randn(size_t(B * qd)));
  DeviceBuffer k = to_dev(be, randn(size_t(B * kd), 2.0f)), v = to_dev(be, randn(size_t(B * kd)));
  DeviceBuffer want = poisoned(be, size_t(B * qd)), got = poisoned(be, size_t(B * qd));
  std::vector<DecodeSeq> views;
  std::vector<LayerCache*> batched;
  for (int64_t i = 0; i < B; ++i) {
    const int64_t row = B - 1 - i;  // rows out of order
    float* kr = k.f32() + row * kd;
    float* vr = v.f32() + row * kd;
    seqs[size_t(i)].ref->append_and_attend(be, q.f32() + row * qd, kr, vr, 1, scale,
                                           want.f32() + row * qd);
    DecodeSeq view;
    if (!seqs[size_t(i)].bat->decode_view(be, kr, vr, view)) {
      *all_batched = false;
      continue;
    }
    view.row = row;
    views.push_back(view);
    batched.push_back(seqs[size_t(i)].bat.get());
  }
  cuda::poison_shared_memory();
  be.decode_attention_batch(views, q.f32(), got.f32(), kShape.n_head, scale);
  for (LayerCache* c : batched) c->finish_decode(be);
  const double worst = worst_row_err(be, want, got, B, qd);
  for (const Seq& s : seqs) EXPECT_EQ(s.ref->n_tokens(), s.bat->n_tokens());
  return worst;
}

void run(const std::vector<Kind>& kinds, int64_t B) {
  auto be = make_cuda_backend();
  const quant::TqFormat f = random_format();
  const float scale = 1.0f / std::sqrt(float(kShape.head_dim));
  std::vector<Seq> seqs = make_seqs(*be, kinds, B, f, scale);
  for (int st = 0; st < 3; ++st) {
    bool all = true;
    const double e = step(*be, seqs, scale, &all);
    EXPECT_TRUE(all) << "a device cache declined decode_view";
    std::printf("[decode-batch] kinds %zu B %2lld step %d: rel err vs per-sequence %.2e\n",
                kinds.size(), (long long)B, st, e);
    // Same kernels, different split boundaries (fp16 probabilities in the TurboQuant kernel).
    EXPECT_LT(e, 3e-3) << "B " << B << " step " << st;
  }
}

TEST(CudaDecodeBatch, DenseMatchesPerSequence) {
  TQ_REQUIRE_GPU();
  for (int64_t B : {1, 3, 32}) run({Kind::Dense}, B);
}

TEST(CudaDecodeBatch, TurboQuantMatchesPerSequence) {
  TQ_REQUIRE_GPU();
  for (int64_t B : {1, 3, 32}) {
    run({Kind::Tq0}, B);
    run({Kind::Tq128}, B);
  }
}

TEST(CudaDecodeBatch, MixedKindsInOneCall) {
  TQ_REQUIRE_GPU();
  run({Kind::Dense, Kind::Tq128, Kind::Tq0}, 32);
}

// The batched append path (decode_reserve, one Backend::kv_append_batch, decode_attention_batch,
// finish_decode) against append_and_attend per sequence: the stored state (dense rows, TurboQuant
// codes / scales and exact window, as save_block bytes of the new token) byte-identical, the
// attention within the decode-batch tolerance.
double append_step(Backend& be, std::vector<Seq>& seqs, float scale) {
  const int64_t B = int64_t(seqs.size()), qd = kShape.n_head * kShape.head_dim;
  const int64_t kd = kShape.n_head_kv * kShape.head_dim;
  DeviceBuffer q = to_dev(be, randn(size_t(B * qd)));
  DeviceBuffer k = to_dev(be, randn(size_t(B * kd), 2.0f)), v = to_dev(be, randn(size_t(B * kd)));
  DeviceBuffer want = poisoned(be, size_t(B * qd)), got = poisoned(be, size_t(B * qd));
  std::vector<DecodeSeq> views;
  std::vector<KvAppend> appends;
  for (int64_t i = 0; i < B; ++i) {
    const int64_t row = (i * 7 + 3) % B;  // rows out of order (B = 3, 32: a permutation)
    seqs[size_t(i)].ref->append_and_attend(be, q.f32() + row * qd, k.f32() + row * kd,
                                           v.f32() + row * kd, 1, scale, want.f32() + row * qd);
    DecodeSeq view;
    KvAppend app;
    EXPECT_TRUE(seqs[size_t(i)].bat->decode_reserve(be, app, view));
    app.row = view.row = row;
    appends.push_back(app);
    views.push_back(view);
  }
  be.kv_append_batch(appends, k.f32(), v.f32());
  cuda::poison_shared_memory();
  be.decode_attention_batch(views, q.f32(), got.f32(), kShape.n_head, scale);
  for (Seq& s : seqs) s.bat->finish_decode(be);
  for (const Seq& s : seqs) {
    EXPECT_EQ(s.ref->n_tokens(), s.bat->n_tokens());
    std::vector<uint8_t> a, b;
    s.ref->save_block(be, s.ref->n_tokens() - 1, a);
    s.bat->save_block(be, s.bat->n_tokens() - 1, b);
    EXPECT_TRUE(a == b) << "stored state differs, kind " << int(s.kind) << " len " << s.len;
  }
  return worst_row_err(be, want, got, B, qd);
}

void run_append(const std::vector<Kind>& kinds, int64_t B) {
  auto be = make_cuda_backend();
  const quant::TqFormat f = random_format();
  const float scale = 1.0f / std::sqrt(float(kShape.head_dim));
  std::vector<Seq> seqs = make_seqs(*be, kinds, B, f, scale);
  for (int st = 0; st < 3; ++st) {
    const double e = append_step(*be, seqs, scale);
    std::printf("[append-batch] kinds %zu B %2lld step %d: rel err vs per-sequence %.2e\n",
                kinds.size(), (long long)B, st, e);
    EXPECT_LT(e, 3e-3) << "B " << B << " step " << st;
  }
}

TEST(CudaDecodeBatch, BatchedAppendMatchesPerSequence) {
  TQ_REQUIRE_GPU();
  for (int64_t B : {3, 32}) {
    run_append({Kind::Dense}, B);
    run_append({Kind::Tq0}, B);
    run_append({Kind::Tq128}, B);
    run_append({Kind::Dense, Kind::Tq128, Kind::Tq0}, B);
  }
}

// qk_norm_rope_rows (one launch, per-row positions) against one qk_norm_rope call per row:
// bit-identical q and k, with and without the per-head norms.
TEST(CudaDecodeBatch, RopeRowsMatchPerRowCalls) {
  TQ_REQUIRE_GPU();
  auto be = make_cuda_backend();
  const int64_t H = 8, HK = 2, D = 128, T = 37;
  std::vector<float> inv(size_t(D / 2));
  for (int64_t i = 0; i < D / 2; ++i) inv[size_t(i)] = std::pow(1e6f, -2.0f * float(i) / float(D));
  const std::vector<float> qn = randn(size_t(D)), kn = randn(size_t(D));
  Weight wq = be->load_weight(DType::F32, qn.data(), 1, D);
  Weight wk = be->load_weight(DType::F32, kn.data(), 1, D);
  std::vector<int64_t> pos(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) pos[size_t(t)] = (t * 977 + 5) % 9000;
  pos[3] = 0;
  pos[4] = 1;  // a consecutive run
  for (bool norm : {false, true}) {  // the second pass reuses the uploaded positions
    const std::vector<float> q0 = randn(size_t(T * H * D)), k0 = randn(size_t(T * HK * D));
    DeviceBuffer qa = to_dev(*be, q0), ka = to_dev(*be, k0), qb = to_dev(*be, q0),
                 kb = to_dev(*be, k0);
    for (int64_t t = 0; t < T; ++t)
      be->qk_norm_rope(qa.f32() + t * H * D, ka.f32() + t * HK * D, 1, H, HK, D,
                       norm ? &wq : nullptr, norm ? &wk : nullptr, 1e-6f, pos[size_t(t)], inv);
    be->qk_norm_rope_rows(qb.f32(), kb.f32(), T, H, HK, D, norm ? &wq : nullptr,
                          norm ? &wk : nullptr, 1e-6f, pos, inv);
    const std::vector<float> a = from_dev(*be, qa, size_t(T * H * D)),
                             b = from_dev(*be, qb, size_t(T * H * D));
    const std::vector<float> c = from_dev(*be, ka, size_t(T * HK * D)),
                             d = from_dev(*be, kb, size_t(T * HK * D));
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 4)) << "q, norm " << norm;
    EXPECT_EQ(0, std::memcmp(c.data(), d.data(), c.size() * 4)) << "k, norm " << norm;
    EXPECT_NE(0, std::memcmp(a.data(), q0.data(), a.size() * 4));  // it did rotate
  }
}

// Batch 1 as the model runs it: decode_reserve, one qk_norm_rope_append (RoPE and the append in
// one launch: bf16 rows, or TurboQuant codes with the exact window), decode_attention_batch of
// the one sequence, finish_decode; against qk_norm_rope + append_and_attend on a twin cache:
// q and k bit-identical, the new token's stored state byte-identical, the attention equal. Also
// with the TurboQuant record deferred (KvAppend::defer_record) to finish_appends() after the
// attention, as the model asks for it.
TEST(CudaDecodeBatch, FusedRopeAppendMatchesSeparateCalls) {
  TQ_REQUIRE_GPU();
  auto be = make_cuda_backend();
  const quant::TqFormat f = random_format();
  const float scale = 1.0f / std::sqrt(float(kShape.head_dim));
  const int64_t H = kShape.n_head, HK = kShape.n_head_kv, D = kShape.head_dim;
  std::vector<float> inv(size_t(D / 2));
  for (int64_t i = 0; i < D / 2; ++i) inv[size_t(i)] = std::pow(1e6f, -2.0f * float(i) / float(D));
  const std::vector<float> qn = randn(size_t(D)), kn = randn(size_t(D));
  Weight wq = be->load_weight(DType::F32, qn.data(), 1, D);
  Weight wk = be->load_weight(DType::F32, kn.data(), 1, D);
  // Deferred records: written in the attention's launch (the short form, batch 1 short contexts)
  // or by their own kernel after it (longer ones, and TQ_RECORD_FUSED=0).
  struct Case {
    Kind kind;
    bool defer, fused;
  };
  const Case cases[] = {{Kind::Dense, false, true}, {Kind::Tq0, false, true}, {Kind::Tq128, false, true},
                        {Kind::Tq0, true, true},    {Kind::Tq128, true, true}, {Kind::Tq128, true, false}};
  for (const auto& [kind, defer, fused] : cases) {
    setenv("TQ_RECORD_FUSED", fused ? "1" : "0", 1);
    std::vector<Seq> seqs = make_seqs(*be, {kind}, 6, f, scale);  // lengths 1 .. 5000
    for (Seq& s : seqs)
      for (int st = 0; st < 2; ++st) {
        SCOPED_TRACE(testing::Message() << "kind " << int(kind) << " len " << s.len << " step " << st
                                        << " deferred record " << defer << " fused " << fused);
        const std::vector<float> q0 = randn(size_t(H * D)), k0 = randn(size_t(HK * D), 2.0f),
                                 v0 = randn(size_t(HK * D));
        DeviceBuffer qa = to_dev(*be, q0), ka = to_dev(*be, k0), va = to_dev(*be, v0);
        DeviceBuffer qb = to_dev(*be, q0), kb = to_dev(*be, k0), vb = to_dev(*be, v0);
        DeviceBuffer want = poisoned(*be, size_t(H * D)), got = poisoned(*be, size_t(H * D));
        const int64_t pos = s.ref->n_tokens();
        be->qk_norm_rope(qa.f32(), ka.f32(), 1, H, HK, D, &wq, &wk, 1e-6f, pos, inv);
        s.ref->append_and_attend(*be, qa.f32(), ka.f32(), va.f32(), 1, scale, want.f32());
        DecodeSeq view;
        KvAppend app;
        ASSERT_TRUE(s.bat->decode_reserve(*be, app, view));
        app.defer_record = defer;
        const std::vector<int64_t> positions{pos};
        be->qk_norm_rope_append(qb.f32(), kb.f32(), vb.f32(), 1, H, HK, D, &wq, &wk, 1e-6f,
                                positions, inv, {&app, 1});
        cuda::poison_shared_memory();
        be->decode_attention_batch({&view, 1}, qb.f32(), got.f32(), H, scale);
        s.bat->finish_decode(*be);
        be->finish_appends();
        EXPECT_EQ(from_dev(*be, qa, size_t(H * D)), from_dev(*be, qb, size_t(H * D)));
        EXPECT_EQ(from_dev(*be, ka, size_t(HK * D)), from_dev(*be, kb, size_t(HK * D)));
        ASSERT_EQ(s.ref->n_tokens(), s.bat->n_tokens());
        std::vector<uint8_t> a, b;
        s.ref->save_block(*be, s.ref->n_tokens() - 1, a);
        s.bat->save_block(*be, s.bat->n_tokens() - 1, b);
        EXPECT_TRUE(a == b) << "stored state differs";
        EXPECT_LT(worst_row_err(*be, want, got, 1, H * D), 1e-6);
      }
  }
  unsetenv("TQ_RECORD_FUSED");
}

}  // namespace
}  // namespace tq::test
