// CUDA benchmarks: split-K decode attention on dense bf16 and TuroQuant 4-bit K/V (Qwen3-8B
// heads: 32 q / 8 kv, d=128; batch 1 and 8; contexts 4K-128K), TurboQuant encode, and the
// cuBLASLt linear layers, each printed as achieved GB/s or TFLOP/s next to the measured ceiling.
// Usage: bench_cuda_attention [--csv FILE] [--quick] [--decode-only] [--batch N] [--ctx N,N..].
// Probes (env):
// TQ_BENCH_SPLITS=N forces the TurboQuant split count (TQ_BENCH_SPLITS_BF16 the dense one); TQ_DECODE_STAMPS=1 prints per-phase times
// of the TurboQuant kernel (docs/gpu.md lists the kernel switches). PyTorch SDPA is measured by
// bench/bench_cuda_sdpa.py in the same device call and merged there.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/tq_cuda.h"
#include "quant/vector_codec.h"

using namespace tq;

namespace {

struct Row {
  std::string kernel;
  int batch = 0;
  int64_t ctx = 0;
  double us = 0, gbps = 0, tflops = 0;
  double us_events = 0;  // decode rows: per-call event timing (us is graph-timed)
};

struct DecodeCtx {
  cuda::DecodeAttnArgs args;
  cuda::AttnPlan plan;
  std::vector<const void*> k, v;
  std::vector<const uint16_t*> ks, vs;
  int set = 0;
};

void run_decode_on(void* p, void* stream) {
  auto* c = static_cast<DecodeCtx*>(p);
  const size_t n = c->k.size();
  c->set = int((c->set + 1) % n);
  c->args.k = c->k[size_t(c->set)];
  c->args.v = c->v[size_t(c->set)];
  if (!c->ks.empty()) {
    c->args.k_scale = c->ks[size_t(c->set)];
    c->args.v_scale = c->vs[size_t(c->set)];
  }
  cuda::decode_attention(c->args, c->plan, stream);
}
void run_decode(void* p) { run_decode_on(p, nullptr); }

Row bench_decode(Backend& be, cuda::KvFormat fmt, int B, int64_t L, const cuda::TqCodecDev& kc,
                 const cuda::TqCodecDev& vc, int tail = 0) {
  const int n_head = 32, n_kv = 8, d = 128;
  const int64_t cap = (L + 31) / 32 * 32;
  const bool tq = fmt == cuda::KvFormat::TurboQuant;
  const size_t per_token = tq ? d / 2 : d * 2;
  const size_t kv_bytes = size_t(B) * n_kv * cap * per_token;
  const size_t sc_elems = size_t(B) * n_kv * cap;
  const size_t set_bytes = 2 * kv_bytes + (tq ? 4 * sc_elems : 0);
  // Rotate among input sets so that their total is far past the 60 MB L2.
  const int n_sets = int(std::clamp<size_t>((512u << 20) / set_bytes, 1, 64));
  std::vector<DeviceBuffer> bufs;
  DecodeCtx c;
  for (int s = 0; s < n_sets; ++s) {
    bufs.emplace_back(&be, kv_bytes);
    bufs.emplace_back(&be, kv_bytes);
    if (tq) {
      cuda::fill_random_bytes(bufs[bufs.size() - 2].data(), kv_bytes, 11 + s);
      cuda::fill_random_bytes(bufs.back().data(), kv_bytes, 97 + s);
    } else {
      cuda::fill_random_16(static_cast<uint16_t*>(bufs[bufs.size() - 2].data()),
                           int64_t(kv_bytes / 2), -2.0f, 2.0f, true, 11 + s);
      cuda::fill_random_16(static_cast<uint16_t*>(bufs.back().data()), int64_t(kv_bytes / 2),
                           -2.0f, 2.0f, true, 97 + s);
    }
    c.k.push_back(bufs[bufs.size() - 2].data());
    c.v.push_back(bufs.back().data());
    if (tq) {
      bufs.emplace_back(&be, sc_elems * 2);
      bufs.emplace_back(&be, sc_elems * 2);
      auto* ks = static_cast<uint16_t*>(bufs[bufs.size() - 2].data());
      auto* vs = static_cast<uint16_t*>(bufs.back().data());
      cuda::fill_random_16(ks, int64_t(sc_elems), 4.0f, 12.0f, false, 5 + s);
      cuda::fill_random_16(vs, int64_t(sc_elems), 4.0f, 12.0f, false, 7 + s);
      c.ks.push_back(ks);
      c.vs.push_back(vs);
    }
  }
  DeviceBuffer q(&be, size_t(B) * n_head * d * 4), out(&be, size_t(B) * n_head * d * 4);
  std::vector<float> qh(size_t(B) * n_head * d);
  for (size_t i = 0; i < qh.size(); ++i) qh[i] = std::sin(float(i) * 0.37f);
  be.upload(q.data(), qh.data(), qh.size() * 4);
  std::vector<int32_t> lens(static_cast<size_t>(B), static_cast<int32_t>(L));
  DeviceBuffer lens_d(&be, size_t(B) * 4);
  be.upload(lens_d.data(), lens.data(), size_t(B) * 4);
  cuda::AttnShape s;
  s.batch = B, s.n_head = n_head, s.n_head_kv = n_kv, s.head_dim = d, s.max_len = L,
  s.format = fmt;
  s.tail_rows = tail;
  c.plan = cuda::choose_attention(cuda::device_info(), s);
  // Exploring the split count: TQ_BENCH_SPLITS (TurboQuant), TQ_BENCH_SPLITS_BF16 (dense).
  if (const char* e = std::getenv(tq ? "TQ_BENCH_SPLITS" : "TQ_BENCH_SPLITS_BF16"); e && *e)
    c.plan.n_split = std::max(1, std::atoi(e));
  // Exact tail (TurboQuant's recent-exact window): `tail` rotated f32 rows per (seq, kv head).
  const size_t tail_elems = size_t(B) * n_kv * size_t(std::max(tail, 1)) * d;
  DeviceBuffer kt(&be, tail_elems * 4), vt(&be, tail_elems * 4), tl(&be, size_t(B) * 4);
  if (tail > 0) {
    std::vector<float> th(tail_elems);
    for (size_t i = 0; i < th.size(); ++i) th[i] = std::cos(float(i) * 0.11f);
    be.upload(kt.data(), th.data(), th.size() * 4);
    be.upload(vt.data(), th.data(), th.size() * 4);
    std::vector<int32_t> tls(static_cast<size_t>(B), tail);
    be.upload(tl.data(), tls.data(), size_t(B) * 4);
  }
  DeviceBuffer ws(&be, cuda::decode_attention_workspace(c.plan, B, n_head, d));
  cuda::DecodeAttnArgs& a = c.args;
  a.q = q.f32(), a.out = out.f32(), a.format = fmt;
  a.seq_stride = n_kv * cap, a.head_stride = cap;
  a.lens = static_cast<const int32_t*>(lens_d.data());
  if (B == 1 && !std::getenv("TQ_BENCH_LENS_ARRAY")) {  // as the engine (the newest row fresh)
    a.len = int32_t(L), a.tail_len = tail;
    a.early_rows = tail > 0 ? int32_t(L) : int32_t(L) - 1;
  }
  a.batch = B, a.n_head = n_head, a.n_head_kv = n_kv, a.head_dim = d;
  a.k_codec = &kc, a.v_codec = &vc, a.workspace = ws.f32();
  if (tail > 0) {
    a.k_tail = kt.f32(), a.v_tail = vt.f32();
    a.tail_seq_stride = int64_t(n_kv) * tail, a.tail_head_stride = tail;
    a.tail_lens = static_cast<const int32_t*>(tl.data());
  }
  cuda_synchronize();
  const double ms_ev = cuda::time_median_ms(run_decode, &c, 5, 50);
  // Like the SDPA baseline: 20 calls (rotating input sets) in one CUDA graph, GPU time only.
  const double ms = cuda::time_graph_ms(run_decode_on, &c, 20, 15);
  if (tq && std::getenv("TQ_DECODE_STAMPS"))
    std::printf("B=%d L=%lld tail %d: %s\n", B, static_cast<long long>(L), tail,
                cuda::tq128_stamp_report().c_str());
  // Bytes the kernel must read: K and V of every visible token (codes + scales for TQ).
  const double bytes = double(B) * n_kv * L * (tq ? 2.0 * (d / 2 + 2) : 2.0 * d * 2) +
                       double(B) * n_kv * tail * 2.0 * d * 4;
  Row r;
  r.kernel = tail > 0 ? "tq4_decode_tail128" : tq ? "tq4_decode" : "bf16_decode";
  r.batch = B;
  r.ctx = L;
  r.us = ms * 1e3;
  r.us_events = ms_ev * 1e3;
  r.gbps = bytes / (ms * 1e-3) / 1e9;
  return r;
}

struct LinearCtx {
  Backend* be;
  const Weight* w;
  const float* x;
  float* out;
  int64_t T;
};

}  // namespace

int main(int argc, char** argv) {
  std::string csv;
  bool quick = false, decode_only = false;
  int only_batch = 0;  // --batch N: decode rows of that batch only (profiling)
  std::vector<int64_t> only_ctx;  // --ctx N[,N..]: decode rows of those contexts only
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--csv") && i + 1 < argc) csv = argv[++i];
    if (!std::strcmp(argv[i], "--quick")) quick = true;
    if (!std::strcmp(argv[i], "--decode-only")) decode_only = true;
    if (!std::strcmp(argv[i], "--batch") && i + 1 < argc) only_batch = std::atoi(argv[++i]);
    if (!std::strcmp(argv[i], "--ctx") && i + 1 < argc) {
      const std::string list = argv[++i];
      for (size_t at = 0; at <= list.size();) {
        const size_t comma = std::min(list.find(',', at), list.size());
        const int64_t n = std::atoll(list.substr(at, comma - at).c_str());
        if (n > 0) only_ctx.push_back(n);
        at = comma + 1;
      }
    }
  }
  if (!cuda_available()) {
    std::printf("no CUDA GPU: %s\n", cuda_device_summary().c_str());
    return 0;
  }
  std::printf("device: %s\n", cuda_device_summary().c_str());
  auto be = make_cuda_backend();
  const double copy_gbps = cuda::measure_copy_gbps(size_t(2) << 30);
  std::printf("ceiling: device-to-device copy %.0f GB/s (read + write)\n", copy_gbps);
  std::printf("tq128 decode kernel: %d resident blocks per SM; clusters resident at once:",
              cuda::tq128_blocks_per_sm());
  for (int n : {2, 4, 8, 16}) std::printf(" %d of %d,", cuda::tq128_max_clusters(n), n);
  std::printf(" (TQ_DECODE_CLUSTER=0: global merge)\n");

  quant::TqFormat f;
  quant::VectorCodec kcodec(f.key_config()), vcodec(f.value_config());
  const cuda::TqCodecDev kc = cuda::make_tq_codec_dev(kcodec), vc = cuda::make_tq_codec_dev(vcodec);
  std::vector<Row> rows;
  std::vector<int64_t> ctxs = !only_ctx.empty() ? only_ctx
                              : quick          ? std::vector<int64_t>{32768}
                                               : std::vector<int64_t>{4096, 32768, 131072};
  const std::vector<int> batches = only_batch ? std::vector<int>{only_batch} : std::vector<int>{1, 8};
  for (int B : batches)
    for (int64_t L : ctxs)
      for (auto fmt : {cuda::KvFormat::BF16, cuda::KvFormat::TurboQuant})
        rows.push_back(bench_decode(*be, fmt, B, L, kc, vc));
  for (int B : batches)  // with the recent-exact window (128 rotated f32 rows) as its own split
    for (int64_t L : ctxs)
      rows.push_back(bench_decode(*be, cuda::KvFormat::TurboQuant, B, L, kc, vc, 128));

  // TurboQuant encode (conversion of a dense f32 layer slice): read f32, write codes + scales.
  if (!decode_only) {
    const int64_t T = 32768, n_kv = 8, d = 128;
    DeviceBuffer x(be.get(), size_t(T * n_kv * d) * 4), codes(be.get(), size_t(T * n_kv * d / 2)),
        sc(be.get(), size_t(T * n_kv) * 2);
    cuda::fill_random_16(static_cast<uint16_t*>(x.data()), T * n_kv * d * 2, -1.0f, 1.0f, false, 3);
    struct E {
      const float* x;
      uint8_t* c;
      uint16_t* s;
      const cuda::TqCodecDev* kc;
    } e{x.f32(), static_cast<uint8_t*>(codes.data()), static_cast<uint16_t*>(sc.data()), &kc};
    const double ms = cuda::time_median_ms(
        [](void* p) {
          auto* e = static_cast<E*>(p);
          cuda::tq_encode(e->x, 32768, 8, 8 * 128, 128, *e->kc, e->c, e->s, 32768, 0);
        },
        &e, 3, 20);
    Row r;
    r.kernel = "tq4_encode";
    r.batch = 1;
    r.ctx = T;
    r.us = ms * 1e3;
    r.gbps = double(T * n_kv) * (d * 4 + d / 2 + 2) / (ms * 1e-3) / 1e9;
    rows.push_back(r);
  }
  // cuBLASLt linear layers through Backend::linear (x f32 -> bf16, GEMM, f32 out).
  for (auto [T, N, K] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
           {4096, 4096, 4096}, {4096, 12288, 4096}, {1, 12288, 4096}, {32, 12288, 4096}}) {
    if (decode_only) break;
    std::vector<uint16_t> wh(size_t(N * K));
    for (size_t i = 0; i < wh.size(); ++i) wh[i] = uint16_t(0x3c00 ^ (i * 2654435761u >> 20 & 0x3ff));
    Weight w = be->load_weight(DType::BF16, wh.data(), N, K);
    DeviceBuffer x(be.get(), size_t(T * K) * 4), out(be.get(), size_t(T * N) * 4);
    cuda::fill_random_16(static_cast<uint16_t*>(x.data()), T * K * 2, -1.0f, 1.0f, false, 9);
    LinearCtx lc{be.get(), &w, x.f32(), out.f32(), T};
    be->linear(lc.x, T, w, lc.out);  // plan + warm-up on the backend's stream
    cuda_synchronize();
    // The backend queues on its own stream: time with a host clock around a synchronize.
    const double ms = cuda::time_median_ms(
        [](void* p) {
          auto* c = static_cast<LinearCtx*>(p);
          c->be->linear(c->x, c->T, *c->w, c->out);
          cuda_synchronize();
        },
        &lc, 3, 20);
    Row r;
    r.kernel = "linear_" + std::to_string(N) + "x" + std::to_string(K);
    r.batch = int(T);
    r.ctx = 0;
    r.us = ms * 1e3;
    r.tflops = 2.0 * T * N * K / (ms * 1e-3) / 1e12;
    r.gbps = double(N * K * 2 + T * K * 4 + T * N * 4) / (ms * 1e-3) / 1e9;
    rows.push_back(r);
  }

  std::printf("\n%-22s %5s %7s %10s %10s %9s %8s %9s\n", "kernel", "B/T", "ctx", "time_us",
              "events_us", "GB/s", "%copyBW", "TFLOP/s");
  FILE* out = csv.empty() ? nullptr : std::fopen(csv.c_str(), "w");
  if (out) std::fprintf(out, "kernel,batch,ctx,us,gbps,tflops\n");
  for (const Row& r : rows) {
    std::printf("%-22s %5d %7lld %10.1f %10.1f %9.0f %7.0f%% %9.1f\n", r.kernel.c_str(), r.batch,
                (long long)r.ctx, r.us, r.us_events, r.gbps, 100.0 * r.gbps / copy_gbps, r.tflops);
    if (out)
      std::fprintf(out, "%s,%d,%lld,%.2f,%.1f,%.2f\n", r.kernel.c_str(), r.batch,
                   (long long)r.ctx, r.us, r.gbps, r.tflops);
  }
  if (out) {
    std::fprintf(out, "copy_ceiling,0,0,0,%.1f,0\n", copy_gbps);
    std::fclose(out);
  }
  return 0;
}
