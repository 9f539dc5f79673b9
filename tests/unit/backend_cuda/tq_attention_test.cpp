// TurboQuant and dense bf16 decode kernels against the CPU references: split-K decode attention
// on packed codes vs quant::CompressedAttention, dense bf16 decode vs double precision. Fresh random data, outputs poisoned, unused cache slots
// filled with garbage (masking must hide them).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "backend/cuda/tq_cuda.h"
#include "gpu_test_util.h"
#include "quant/compressed_attention.h"
#include "quant/vector_codec.h"

namespace tq::test {
namespace {

using cuda::AttnPlan;
using cuda::KvFormat;

quant::TqFormat format_for(int d) {
  quant::TqFormat f;
  f.head_dim = d;
  f.key_seed = rng()();
  f.value_seed = rng()();
  return f;
}

struct DecodeCase {
  int d, n_head, n_kv;
  std::vector<int32_t> lens;
  std::vector<int32_t> tail = {};  // exact-tail rows per sequence (empty: no tail)
  int n_split = 0;                 // > 0: instead of choose_attention's
};

// v12's early loads (batch 1, DecodeAttnArgs::early_rows): the newest record (row L - 1 of every
// kv head) holds NaN bytes until copy_rows_late kernels, still running when the decode starts (PDL),
// store the real one. With early_rows = L - 1 the result must be the reference. With early_rows = L
// (wrongly claiming the row is written) the decode may read the NaN bytes: printed, to show that
// the writers really overlap the decode.
void late_newest_record(Backend& be, const DecodeCase& c, cuda::DecodeAttnArgs a,
                        const AttnPlan& plan, const std::vector<double>& ref,
                        const std::vector<uint8_t>& kcodes, const std::vector<uint8_t>& vcodes,
                        const std::vector<uint16_t>& kscale, const std::vector<uint16_t>& vscale,
                        int64_t cap) {
  const int64_t L = c.lens[0], cb = c.d / 2;
  auto stale_codes = [&](std::vector<uint8_t> x) {
    for (int h = 0; h < c.n_kv; ++h) std::memset(&x[size_t((h * cap + L - 1) * cb)], 0xff, size_t(cb));
    return x;
  };
  auto stale_scales = [&](std::vector<uint16_t> x) {
    for (int h = 0; h < c.n_kv; ++h) x[size_t(h * cap + L - 1)] = 0xffff;  // f16 NaN
    return x;
  };
  const std::vector<uint8_t> ks_codes = stale_codes(kcodes), vs_codes = stale_codes(vcodes);
  const std::vector<uint16_t> ks_scale = stale_scales(kscale), vs_scale = stale_scales(vscale);
  // The real records: the caller's device arrays, which `a` reads.
  const auto* kfresh = static_cast<const uint8_t*>(a.k);
  const auto* vfresh = static_cast<const uint8_t*>(a.v);
  const auto* ksfresh = reinterpret_cast<const uint8_t*>(a.k_scale);
  const auto* vsfresh = reinterpret_cast<const uint8_t*>(a.v_scale);
  DeviceBuffer kd(&be, kcodes.size()), vd(&be, vcodes.size()), ksd(&be, kscale.size() * 2),
      vsd(&be, vscale.size() * 2);
  a.k = kd.data(), a.v = vd.data();
  a.k_scale = static_cast<const uint16_t*>(ksd.data());
  a.v_scale = static_cast<const uint16_t*>(vsd.data());
  a.len = int32_t(L);
  a.tail_len = a.k_tail ? c.tail[0] : -1;
  void* st = cuda::stream_create();
  for (int claim : {0, 1}) {  // 0: early_rows = L - 1 (asserted); 1: early_rows = L (printed)
    a.early_rows = int32_t(L - 1 + claim);
    double worst = 0.0;
    for (int rep = 0; rep < 2; ++rep) {
      be.upload(kd.data(), ks_codes.data(), ks_codes.size());
      be.upload(vd.data(), vs_codes.data(), vs_codes.size());
      be.upload(ksd.data(), ks_scale.data(), ks_scale.size() * 2);
      be.upload(vsd.data(), vs_scale.data(), vs_scale.size() * 2);
      cuda_synchronize();
      DeviceBuffer out = poisoned(be, ref.size());
      a.out = out.f32();
      const int64_t row = (L - 1) * cb, srow = (L - 1) * 2;
      const int64_t spin = 20000;  // ns: far longer than the decode's early loads take
      cuda::copy_rows_late(static_cast<uint8_t*>(kd.data()) + row,
                           kfresh + row, cb, cap * cb, c.n_kv, spin, st);
      cuda::copy_rows_late(static_cast<uint8_t*>(vd.data()) + row,
                           vfresh + row, cb, cap * cb, c.n_kv, spin, st);
      cuda::copy_rows_late(static_cast<uint8_t*>(ksd.data()) + srow,
                           ksfresh + srow, 2, cap * 2, c.n_kv, spin, st);
      cuda::copy_rows_late(static_cast<uint8_t*>(vsd.data()) + srow,
                           vsfresh + srow, 2, cap * 2, c.n_kv, spin, st);
      cuda::decode_attention(a, plan, st);
      cuda::stream_synchronize(st);
      const double err = rel_err(from_dev(be, out, ref.size()), ref);
      worst = std::max(worst, err);  // inf for a NaN output
    }
    std::printf("tq decode d=128 B=1 L=%d splits %d tail %d, newest record written late, early_rows "
                "L%s: rel err %.2e\n", int(L), plan.n_split, int(a.k_tail != nullptr),
                claim ? " (wrong claim)" : " - 1", worst);
    if (!claim) {
      EXPECT_LT(worst, 5e-3) << "an early load read the record the previous kernel writes";
    }
  }
  cuda::stream_destroy(st);
}

// Device layout [B][n_kv][cap] from CPU records; garbage in the slots past each length.
void tq_decode_case(Backend& be, const DecodeCase& c) {
  const int B = int(c.lens.size()), d = c.d;
  int32_t max_len = *std::max_element(c.lens.begin(), c.lens.end());
  const int64_t cap = (max_len + 31) / 32 * 32 + 32;
  quant::TqFormat f = format_for(d);
  quant::VectorCodec kc(f.key_config()), vc(f.value_config());
  cuda::TqCodecDev kdev = cuda::make_tq_codec_dev(kc), vdev = cuda::make_tq_codec_dev(vc);
  const size_t rec = kc.bytes_per_vector(), cb = size_t(d / 2);
  std::vector<uint8_t> kcodes(size_t(B * c.n_kv * cap) * cb), vcodes(kcodes.size());
  std::vector<uint16_t> kscale(size_t(B * c.n_kv * cap)), vscale(kscale.size());
  for (auto& x : kcodes) x = uint8_t(rng()());
  for (auto& x : vcodes) x = uint8_t(rng()());
  for (auto& x : kscale) x = uint16_t(rng()());  // includes inf/NaN bit patterns
  for (auto& x : vscale) x = uint16_t(rng()());
  std::vector<std::vector<uint8_t>> khost(static_cast<size_t>(B)), vhost(static_cast<size_t>(B));
  for (int b = 0; b < B; ++b) {
    const int64_t L = c.lens[size_t(b)];
    khost[size_t(b)].resize(size_t(c.n_kv * L) * rec);
    vhost[size_t(b)].resize(size_t(c.n_kv * L) * rec);
    auto kx = randn(size_t(L * d), 2.0f), vx = randn(size_t(L * d), 1.5f);
    for (int h = 0; h < c.n_kv; ++h) {
      // A fresh draw per head: reuse kx/vx shifted so heads differ.
      for (int64_t t = 0; t < L; ++t) {
        std::vector<float> kv(static_cast<size_t>(d)), vv(static_cast<size_t>(d));
        for (int i = 0; i < d; ++i) {
          kv[size_t(i)] = kx[size_t(((t + h * 7) % L) * d + i)] * (1.0f + 0.1f * h);
          vv[size_t(i)] = vx[size_t(((t + h * 13) % L) * d + (i + h) % d)];
        }
        uint8_t* kr = khost[size_t(b)].data() + size_t(h * L + t) * rec;
        uint8_t* vr = vhost[size_t(b)].data() + size_t(h * L + t) * rec;
        kc.encode(kv.data(), kr);
        vc.encode(vv.data(), vr);
        const size_t slot = size_t((int64_t(b) * c.n_kv + h) * cap + t);
        std::memcpy(&kcodes[slot * cb], kr, cb);
        std::memcpy(&vcodes[slot * cb], vr, cb);
        kscale[slot] = uint16_t(kr[cb] | kr[cb + 1] << 8);
        vscale[slot] = uint16_t(vr[cb] | vr[cb + 1] << 8);
      }
    }
  }
  auto q = randn(size_t(B * c.n_head * d));
  // Exact tail: rotated f32 rows [B][n_kv][tcap][d] (random: any rows are valid rotated rows).
  const bool has_tail = !c.tail.empty();
  const int64_t tcap = has_tail ? *std::max_element(c.tail.begin(), c.tail.end()) + 3 : 0;
  auto kt = randn(std::max<size_t>(1, size_t(B * c.n_kv * tcap * d)), 1.0f), vt = randn(kt.size(), 0.7f);
  // CPU reference: one query per sequence at the last position.
  std::vector<double> ref(q.size());
  quant::CompressedAttention attn(kc, vc);
  for (int b = 0; b < B; ++b) {
    const int64_t L = c.lens[size_t(b)];
    quant::KvBlock blk[2];
    blk[0].k = khost[size_t(b)].data();
    blk[0].v = vhost[size_t(b)].data();
    blk[0].n_token = L;
    const int64_t TL = has_tail ? c.tail[size_t(b)] : 0;
    blk[1].k_rot = kt.data() + size_t(b * c.n_kv * tcap * d);
    blk[1].v_rot = vt.data() + size_t(b * c.n_kv * tcap * d);
    blk[1].n_token = TL;
    blk[1].pos0 = L;
    blk[1].k_head_stride = blk[1].v_head_stride = tcap * d;
    quant::AttentionParams p;
    p.n_q_head = c.n_head;
    p.n_kv_head = c.n_kv;
    int64_t qpos = L + TL - 1;
    std::vector<float> o(size_t(c.n_head * d));
    attn.run(q.data() + size_t(b * c.n_head * d), &qpos, 1, blk, TL > 0 ? 2 : 1, p, o.data(),
             nullptr);
    for (size_t i = 0; i < o.size(); ++i) ref[size_t(b * c.n_head * d) + i] = o[i];
  }
  DeviceBuffer qd = to_dev(be, q);
  // The codec's index-order codes in the device's order (the slots past each length stay random).
  from_index_order(kcodes.data(), kcodes.size(), be.tq_code_order());
  from_index_order(vcodes.data(), vcodes.size(), be.tq_code_order());
  DeviceBuffer kcd = to_dev(be, kcodes), vcd = to_dev(be, vcodes);
  DeviceBuffer ksd = to_dev(be, kscale), vsd = to_dev(be, vscale), lens = to_dev(be, c.lens);
  cuda::AttnShape s;
  s.batch = B, s.n_head = c.n_head, s.n_head_kv = c.n_kv, s.head_dim = d, s.max_len = max_len;
  s.format = KvFormat::TurboQuant;
  s.tail_rows = has_tail ? *std::max_element(c.tail.begin(), c.tail.end()) : 0;
  AttnPlan plan = cuda::choose_attention(cuda::device_info(), s);
  ASSERT_EQ(plan.kernel, cuda::AttnKernel::DecodeSplitK);
  if (c.n_split > 0) plan.n_split = c.n_split;
  DeviceBuffer ws(&be, cuda::decode_attention_workspace(plan, B, c.n_head, d));
  cuda::DecodeAttnArgs a;
  a.q = qd.f32(), a.format = KvFormat::TurboQuant;
  a.k = kcd.data(), a.v = vcd.data();
  a.k_scale = static_cast<const uint16_t*>(ksd.data());
  a.v_scale = static_cast<const uint16_t*>(vsd.data());
  a.seq_stride = c.n_kv * cap, a.head_stride = cap;
  a.lens = static_cast<const int32_t*>(lens.data());
  a.batch = B, a.n_head = c.n_head, a.n_head_kv = c.n_kv, a.head_dim = d;
  a.k_codec = &kdev, a.v_codec = &vdev, a.workspace = ws.f32();
  DeviceBuffer ktd = to_dev(be, kt), vtd = to_dev(be, vt), tlens = to_dev(be, has_tail ? c.tail : std::vector<int32_t>(size_t(B), 0));
  if (has_tail) {
    a.k_tail = ktd.f32(), a.v_tail = vtd.f32();
    a.tail_seq_stride = c.n_kv * tcap, a.tail_head_stride = tcap;
    a.tail_lens = static_cast<const int32_t*>(tlens.data());
  }
  // d = 128: the splits merge in a cluster (v11) by default, through global memory with
  // TQ_DECODE_CLUSTER=0; at batch 1 also with the lengths passed by value, (v12) with every
  // record loadable before the PDL wait, and (v13) so again with the short form (one stage slot,
  // which short contexts take by default) turned off. All must match.
  for (int variant = 0; variant < (B == 1 ? 5 : 2); ++variant) {
    const char* cluster = variant == 1 ? "0" : "1";
    setenv("TQ_DECODE_CLUSTER", cluster, 1);
    setenv("TQ_DECODE_SHORT", variant == 4 ? "0" : "1", 1);
    a.len = variant >= 2 ? c.lens[0] : -1;
    a.tail_len = variant >= 2 && has_tail ? c.tail[0] : -1;
    a.early_rows = variant >= 3 ? c.lens[0] : 0;
    DeviceBuffer out = poisoned(be, q.size());
    a.out = out.f32();
    cuda::poison_shared_memory();  // stale shared memory must never reach the output
    cuda::decode_attention(a, plan);
    cuda::poison_shared_memory();
    cuda::decode_attention(a, plan);  // twice: the fused merge's counters reset themselves
    auto oh = from_dev(be, out, q.size());
    const double err = rel_err(oh, ref);
    std::printf("tq decode d=%d heads %d/%d B=%d splits %d tail %d cluster %s lens %s: rel err %.2e\n",
                d, c.n_head, c.n_kv, B, plan.n_split, int(has_tail), cluster,
                variant == 4   ? "by value, early, long form"
                : variant == 3 ? "by value, early"
                : variant == 2 ? "by value"
                               : "array",
                err);
    EXPECT_LT(err, 5e-3) << "TQ_DECODE_CLUSTER=" << cluster << " variant " << variant;
  }
  unsetenv("TQ_DECODE_CLUSTER");
  unsetenv("TQ_DECODE_SHORT");
  if (B == 1 && d == 128 && c.lens[0] >= 2) late_newest_record(be, c, a, plan, ref, kcodes, vcodes, kscale, vscale, cap);
}

TEST(CudaTurboQuant, DecodeAttentionMatchesCpuReference) {
  TQ_REQUIRE_GPU();
  auto be = make_cuda_backend();
  tq_decode_case(*be, {128, 32, 8, {1, 777, 5000}});
  tq_decode_case(*be, {128, 4, 2, {64, 31, 2049}});    // tiny-qwen3's grouping
  tq_decode_case(*be, {64, 32, 2, {1000, 129}});       // 16 heads per kv head: two subgroups
  tq_decode_case(*be, {256, 8, 8, {333}});             // no grouping
  tq_decode_case(*be, {128, 32, 8, {100000}});         // long: many stages per split
  tq_decode_case(*be, {128, 64, 4, {3000, 7}});        // 16 heads per kv head at d=128
  tq_decode_case(*be, {128, 32, 8, {5000}});  // batch 1: the last split's 2nd stage holds row L - 1
  tq_decode_case(*be, {128, 32, 8, {2000}});  // batch 1, short form: one stage a split
  // The bench's 32K (16 splits of 11 stages, the last one 128 rows: one warp group has a stage
  // more than the other) and a last stage that ends inside a warp's rows (184), alone and batched.
  tq_decode_case(*be, {128, 32, 8, {32768}});
  tq_decode_case(*be, {128, 32, 8, {33664}});
  tq_decode_case(*be, {128, 32, 8, {33664, 2100}});
}

TEST(CudaTurboQuant, DecodeAttentionWithExactTailMatchesCpuReference) {
  TQ_REQUIRE_GPU();
  auto be = make_cuda_backend();
  tq_decode_case(*be, {128, 32, 8, {1, 777, 5000}, {128, 0, 5}});
  tq_decode_case(*be, {128, 4, 2, {64, 2049}, {128, 128}});
  tq_decode_case(*be, {128, 32, 8, {40000}, {128}});  // batch 1: lengths by value too
  tq_decode_case(*be, {128, 32, 8, {3}, {77}});
  // Batch 1, short form: the engine's short context (a 128-row window plus the step's row: 9
  // tail rows a split), and tiny-qwen3's grouping.
  tq_decode_case(*be, {128, 32, 8, {384}, {129}});
  tq_decode_case(*be, {128, 4, 2, {100}, {20}});
  // The short form's largest tail share: 24 rows a split (6 splits of a 129-row tail, 22 rows;
  // 3 of 72 rows, 24; the policy takes 16 a split, TQ_DECODE_TAIL_ROWS up to 24).
  tq_decode_case(*be, {128, 32, 8, {1100}, {129}, 6});
  tq_decode_case(*be, {128, 32, 8, {500}, {72}, 3});
  // 5 sequences x 8 kv heads with a tail, short contexts: more blocks than one wave.
  tq_decode_case(*be, {128, 32, 8, {700, 300, 1000, 64, 513}, {5, 0, 128, 17, 1}});
  // 16 sequences: one split per (sequence, kv head), so each block takes every chunk of its
  // tail after its codes (300 rows: 10 chunks through the two buffers).
  tq_decode_case(*be, {128, 32, 8, {5000, 40, 9000, 1, 2, 3, 300, 5, 6, 7, 8, 9, 10, 11, 12, 13},
                       {300, 128, 0, 33, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 299}});
}

void bf16_decode_case(Backend& be, const DecodeCase& c) {
  const int B = int(c.lens.size()), d = c.d;
  int32_t max_len = *std::max_element(c.lens.begin(), c.lens.end());
  const int64_t cap = (max_len + 31) / 32 * 32;
  auto k = randn(size_t(B * c.n_kv * cap * d)), v = randn(k.size());
  std::vector<uint16_t> kb(k.size()), vb(v.size());
  for (size_t i = 0; i < k.size(); ++i) kb[i] = f32_to_bf16(k[i]), vb[i] = f32_to_bf16(v[i]);
  auto q = randn(size_t(B * c.n_head * d));
  const int G = c.n_head / c.n_kv;
  const double scale = 1.0 / std::sqrt(double(d));
  std::vector<double> ref(q.size(), 0.0);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < c.n_head; ++h) {
      const int64_t L = c.lens[size_t(b)];
      const size_t kv0 = size_t((int64_t(b) * c.n_kv + h / G) * cap * d);
      std::vector<double> s(static_cast<size_t>(L));
      double mx = -INFINITY, sum = 0;
      for (int64_t j = 0; j < L; ++j) {
        double dot = 0;
        for (int i = 0; i < d; ++i)
          dot += double(q[size_t((b * c.n_head + h) * d + i)]) * bf16_to_f32(kb[kv0 + size_t(j * d + i)]);
        s[size_t(j)] = dot * scale;
        mx = std::max(mx, s[size_t(j)]);
      }
      for (auto& x : s) sum += (x = std::exp(x - mx));
      for (int64_t j = 0; j < L; ++j)
        for (int i = 0; i < d; ++i)
          ref[size_t((b * c.n_head + h) * d + i)] += s[size_t(j)] / sum * bf16_to_f32(vb[kv0 + size_t(j * d + i)]);
    }
  DeviceBuffer qd = to_dev(be, q), od = poisoned(be, q.size());
  DeviceBuffer kd = to_dev(be, kb), vd = to_dev(be, vb), lens = to_dev(be, c.lens);
  cuda::AttnShape s;
  s.batch = B, s.n_head = c.n_head, s.n_head_kv = c.n_kv, s.head_dim = d, s.max_len = max_len;
  s.format = KvFormat::BF16;
  AttnPlan plan = cuda::choose_attention(cuda::device_info(), s);
  DeviceBuffer ws(&be, cuda::decode_attention_workspace(plan, B, c.n_head, d));
  cuda::DecodeAttnArgs a;
  a.q = qd.f32(), a.out = od.f32(), a.format = KvFormat::BF16, a.k = kd.data(), a.v = vd.data();
  a.seq_stride = c.n_kv * cap, a.head_stride = cap;
  a.lens = static_cast<const int32_t*>(lens.data());
  a.batch = B, a.n_head = c.n_head, a.n_head_kv = c.n_kv, a.head_dim = d, a.workspace = ws.f32();
  cuda::decode_attention(a, plan);
  auto oh = from_dev(be, od, q.size());
  const double err = rel_err(oh, ref);
  std::printf("bf16 decode d=%d heads %d/%d B=%d splits %d: rel err %.2e\n", d, c.n_head, c.n_kv,
              B, plan.n_split, err);
  EXPECT_LT(err, 1e-2);
}

TEST(CudaDenseDecode, Bf16SplitKMatchesDoubleReference) {
  TQ_REQUIRE_GPU();
  auto be = make_cuda_backend();
  bf16_decode_case(*be, {128, 32, 8, {1, 300, 4100}});
  bf16_decode_case(*be, {64, 12, 4, {77, 2000}});
  bf16_decode_case(*be, {256, 16, 1, {513}});
}

}  // namespace
}  // namespace tq::test
