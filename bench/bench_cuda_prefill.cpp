// CUDA benchmark: causal prefill attention (prefill_attention.h) at T = L = 4K and 32K, Qwen3-8B
// heads (32 q / 8 kv, d=128), batch 1, on dense bf16 and TurboQuant 4-bit K/V, printed as TFLOP/s.
// FLOPs (the FlashAttention convention, also applied to the SDPA baseline): causal
// 4 * T * L / 2 * d * n_head (QK^T and PV, two flops per multiply-add, half the pairs visible).
// Usage: bench_cuda_prefill [--csv FILE] [--tag SUFFIX] [--bf16-only] [--quick] [--records].
// PyTorch SDPA is measured by bench/bench_cuda_sdpa_prefill.py in the same device call and
// merged there.
// TurboQuant rows: tq4 = H1's mma.sync kernel (TQ_PREFILL_WGMMA_TQ=0 is set here), tq4-wgmma =
// the Hopper kernel (prefill_wgmma.h) called directly with its ALU decode, tq4-wgmma-table = the
// same kernel with H8's shared-memory table decode (same-run baseline), when the device has it.
// --records: also the engine's records pass after a conversion (a 4K chunk, non-causal, against
// 28K keys: dense bf16 and each Hopper TurboQuant decode) and the engine's whole chunk (the same
// queries causal over their own 4K rows too: bf16 over 32K keys, TurboQuant as the one launch of
// 28K records + 4K fp16 exact rows rotated back; -chunk-ring: the same launch through the ring
// kernel, prefill_wgmma_ring.cu; -chunk512: the same for a 512-token chunk), printed only (not in
// the CSV).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/prefill_attention.h"
#include "backend/cuda/prefill_wgmma.h"
#include "backend/cuda/tq_cuda.h"
#include "quant/vector_codec.h"

using namespace tq;

namespace {

struct Row {
  std::string kernel;
  int64_t T = 0, L = 0;
  double ms = 0, tflops = 0;
};

void run_prefill(void* p, void* stream) {
  cuda::prefill_attention(*static_cast<const cuda::PrefillAttnArgs*>(p), stream);
}
void run_wgmma_alu(void* p, void* stream) {
  cuda::prefill_attention_wgmma(*static_cast<const cuda::PrefillAttnArgs*>(p), stream,
                                cuda::TqDecode::kAlu);
}
void run_wgmma_table(void* p, void* stream) {
  cuda::prefill_attention_wgmma(*static_cast<const cuda::PrefillAttnArgs*>(p), stream,
                                cuda::TqDecode::kTable);
}

// One launch on the legacy stream (time_median_ms's events bracket each call).
struct PlainCall {
  void (*fn)(void*, void*);
  void* args;
};
void run_plain(void* c) {
  const auto* p = static_cast<const PlainCall*>(c);
  p->fn(p->args, nullptr);
}

Row bench_prefill(Backend& be, cuda::KvFormat fmt, int64_t T, const cuda::TqCodecDev& kc,
                  const cuda::TqCodecDev& vc, const std::string& tag,
                  cuda::TqDecode wgmma = cuda::TqDecode::kDefault, int64_t L = 0,
                  bool causal = true, int64_t tail = 0, bool ring = false) {
  const int n_head = 32, n_kv = 8, d = 128;
  if (L == 0) L = T;
  const bool tq = fmt == cuda::KvFormat::TurboQuant;
  if (!tq) L += tail;  // bf16: the tail rows are ordinary keys
  const int64_t keys = tq ? L + tail : L;  // records and exact rows
  const int64_t cap = (L + 63) / 64 * 64;
  const size_t kv_bytes = size_t(n_kv) * size_t(cap) * (tq ? d / 2 : d * 2);
  DeviceBuffer k(&be, kv_bytes), v(&be, kv_bytes);
  DeviceBuffer ks(&be, size_t(n_kv) * size_t(cap) * 2), vs(&be, size_t(n_kv) * size_t(cap) * 2);
  if (tq) {
    cuda::fill_random_bytes(k.data(), kv_bytes, 11);
    cuda::fill_random_bytes(v.data(), kv_bytes, 97);
    cuda::fill_random_16(static_cast<uint16_t*>(ks.data()), n_kv * cap, 4.0f, 12.0f, false, 5);
    cuda::fill_random_16(static_cast<uint16_t*>(vs.data()), n_kv * cap, 4.0f, 12.0f, false, 7);
  } else {
    cuda::fill_random_16(static_cast<uint16_t*>(k.data()), int64_t(kv_bytes / 2), -2.0f, 2.0f,
                         true, 11);
    cuda::fill_random_16(static_cast<uint16_t*>(v.data()), int64_t(kv_bytes / 2), -2.0f, 2.0f,
                         true, 97);
  }
  // q f32 from pairs of bf16 values in [-1, 1): the high half makes a finite float near them.
  const size_t q_elems = size_t(T) * n_head * d;
  DeviceBuffer q(&be, q_elems * 4), out(&be, q_elems * 4), lse(&be, size_t(T) * n_head * 4);
  cuda::fill_random_16(static_cast<uint16_t*>(q.data()), int64_t(2 * q_elems), -1.0f, 1.0f, true, 3);
  cuda::PrefillAttnArgs a;
  a.q = q.f32(), a.out = out.f32(), a.lse = lse.f32(), a.format = fmt;
  a.k = k.data(), a.v = v.data();
  if (tq) {
    a.k_scale = static_cast<const uint16_t*>(ks.data());
    a.v_scale = static_cast<const uint16_t*>(vs.data());
    a.k_codec = &kc, a.v_codec = &vc;
  }
  a.head_stride = cap, a.T = T, a.L = L, a.n_head = n_head, a.n_head_kv = n_kv, a.head_dim = d;
  a.causal = causal;
  // The engine's chunk after a conversion: the chunk's own T rows (plus tail - T held ones) as
  // fp16 exact rows after the L records, causal over both, rotated back (one launch, kTqAluTail);
  // bf16 (tail rows folded into L by the caller): the chunk at the end of the keys.
  DeviceBuffer tk(&be, tq && tail > 0 ? size_t(n_kv) * size_t(tail) * d * 2 : 16);
  DeviceBuffer tv(&be, tq && tail > 0 ? size_t(n_kv) * size_t(tail) * d * 2 : 16);
  if (tail > 0) {
    a.q_pos0 = keys - T;
    if (tq) {
      cuda::fill_random_16(static_cast<uint16_t*>(tk.data()), n_kv * tail * d, -2.0f, 2.0f, false, 13);
      cuda::fill_random_16(static_cast<uint16_t*>(tv.data()), n_kv * tail * d, -2.0f, 2.0f, false, 17);
      a.rotate_back = true;
      a.tail_k = static_cast<const uint16_t*>(tk.data());
      a.tail_v = static_cast<const uint16_t*>(tv.data());
      a.tail_stride = tail, a.tail_len = tail;
    }
  }
  // ring: the one launch with the ring kernel's workspace (each record tile decoded once per kv head).
  const size_t ring_bytes = ring ? cuda::prefill_wgmma_ring_bytes(a) : 0;
  DeviceBuffer ring_ws(&be, std::max<size_t>(ring_bytes, 16));
  if (ring_bytes > 0) a.ring_ws = ring_ws.data(), a.ring_ws_bytes = ring_bytes;
  // kDefault: prefill_attention()'s own choice; kAlu / kTable: the Hopper kernel directly.
  void (*fn)(void*, void*) = wgmma == cuda::TqDecode::kAlu     ? run_wgmma_alu
                             : wgmma == cuda::TqDecode::kTable ? run_wgmma_table
                                                               : run_prefill;
  cuda_synchronize();
  fn(&a, nullptr);
  cuda::check_last_launch("prefill_attention");
  cuda_synchronize();  // (the timing runs on another stream: launches sharing a ring must not overlap)
  const int per_graph = T >= 16384 ? 2 : 10;
  cuda::prefill_wgmma_probe_report();  // (probe builds: drop the warm-up launch's sums)
  const double ms = cuda::time_graph_ms(fn, &a, per_graph, 7);
  if (const std::string pr = cuda::prefill_wgmma_probe_report(); !pr.empty()) std::printf("  (%s)\n", pr.c_str());
  if (tail > 0) {  // the chunk rows also timed one launch at a time, outside a graph
    PlainCall pc{fn, &a};
    std::printf("  (%s%s chunk, one launch at a time on the legacy stream: %.3f ms)\n", tq ? "tq4" : "bf16",
                ring_bytes > 0 ? " ring" : "", cuda::time_median_ms(run_plain, &pc, 3, 15));
  }
  // Sanity: out as it stands against out after `rerun` (another path to the same bits).
  const auto same_bits = [&](const char* what, const auto& rerun) {
    std::vector<uint8_t> x(q_elems * 4), y(q_elems * 4);
    cuda_synchronize();
    be.download(x.data(), out.data(), x.size());
    rerun();
    cuda_synchronize();
    be.download(y.data(), out.data(), y.size());
    std::printf("  (%s %s)\n", what, std::memcmp(x.data(), y.data(), x.size()) == 0 ? "bit-identical" : "DIFFERS");
  };
  if (wgmma == cuda::TqDecode::kAlu && T <= 4096 && tail == 0)
    same_bits("ALU decode output vs the table decode's:", [&] { run_wgmma_table(&a, nullptr); });
  if (ring_bytes > 0)
    same_bits("ring output vs the blocks' own decode's:", [&] {
      a.ring_ws = nullptr, a.ring_ws_bytes = 0;
      fn(&a, nullptr);
    });
  Row r;
  const char* tq_name = wgmma == cuda::TqDecode::kAlu     ? "tq4-wgmma"
                        : wgmma == cuda::TqDecode::kTable ? "tq4-wgmma-table"
                                                          : "tq4";
  r.kernel = std::string(tq ? tq_name : "bf16") + tag;
  r.T = T, r.L = L, r.ms = ms;
  // (With tail rows: the records are all visible, the chunk's own rows half.)
  const double pairs = tail > 0 ? double(T) * (double(keys) - double(T) / 2)
                                : double(T) * double(L) / (causal ? 2.0 : 1.0);
  r.tflops = 4.0 * pairs * d * n_head / (ms * 1e-3) / 1e12;
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  std::string csv, tag;
  bool bf16_only = false, quick = false, records = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--csv") && i + 1 < argc) csv = argv[++i];
    if (!std::strcmp(argv[i], "--tag") && i + 1 < argc) tag = argv[++i];
    if (!std::strcmp(argv[i], "--bf16-only")) bf16_only = true;
    if (!std::strcmp(argv[i], "--quick")) quick = true;
    if (!std::strcmp(argv[i], "--records")) records = true;
  }
  if (!cuda_available()) {
    std::printf("no usable CUDA GPU (%s)\n", cuda_device_summary().c_str());
    return 1;
  }
  setenv("TQ_PREFILL_WGMMA_TQ", "0", 1);  // "tq4": H1's kernel; "tq4-wgmma" calls the new one
  auto be = make_cuda_backend();
  const bool wg = cuda::prefill_wgmma_available();
  quant::TqFormat f;
  quant::VectorCodec kcodec(f.key_config()), vcodec(f.value_config());
  const cuda::TqCodecDev kc = cuda::make_tq_codec_dev(kcodec), vc = cuda::make_tq_codec_dev(vcodec);
  std::printf("%s\ncausal prefill attention, 32 q / 8 kv heads, d=128, batch 1; "
              "flops = 4 * T * L / 2 * d * n_head\n",
              cuda_device_summary().c_str());
  std::printf("%-14s %7s %7s %10s %9s\n", "kernel", "T", "L", "ms", "TFLOP/s");
  std::vector<Row> rows;
  std::vector<int64_t> sizes = {4096, 32768};
  if (quick) sizes = {4096};
  auto one = [&](cuda::KvFormat fmt, int64_t T, cuda::TqDecode direct) {
    Row r = bench_prefill(*be, fmt, T, kc, vc, tag, direct);
    std::printf("%-14s %7lld %7lld %10.3f %9.1f\n", r.kernel.c_str(), (long long)r.T,
                (long long)r.L, r.ms, r.tflops);
    std::fflush(stdout);
    rows.push_back(r);
  };
  for (int64_t T : sizes) {
    one(cuda::KvFormat::BF16, T, cuda::TqDecode::kDefault);
    if (bf16_only) continue;
    one(cuda::KvFormat::TurboQuant, T, cuda::TqDecode::kDefault);
    if (wg) one(cuda::KvFormat::TurboQuant, T, cuda::TqDecode::kTable);
    if (wg) one(cuda::KvFormat::TurboQuant, T, cuda::TqDecode::kAlu);
  }
  if (records) {  // printed only: the SDPA table keys rows by T
    std::printf("records pass: T=4096 queries, non-causal, L=28672 keys; flops = 4 * T * L * d * n_head\n"
                "chunk: the same queries after the 28672 keys, causal over their own 4096 rows (TurboQuant:\n"
                "  records + fp16 exact rows, rotated back, one launch; bf16: L = 32768)\n");
    std::vector<Row> rec;
    rec.push_back(bench_prefill(*be, cuda::KvFormat::BF16, 4096, kc, vc, "-rec", cuda::TqDecode::kDefault, 28672, false));
    if (wg)
      for (cuda::TqDecode dv : {cuda::TqDecode::kTable, cuda::TqDecode::kAlu})
        rec.push_back(bench_prefill(*be, cuda::KvFormat::TurboQuant, 4096, kc, vc, "-rec", dv, 28672, false));
    // The engine's chunk: 4K queries after 28K records (TurboQuant) + their own 4K exact rows,
    // against bf16 over 32K keys with the chunk last; then a 512-token chunk (the validation
    // runner's) after 28K records the same way.
    for (const int64_t T : {int64_t(4096), int64_t(512)}) {
      const std::string tag = T == 4096 ? "-chunk" : "-chunk512";
      rec.push_back(bench_prefill(*be, cuda::KvFormat::BF16, T, kc, vc, tag, cuda::TqDecode::kDefault, 28672, true, T));
      if (!wg) continue;
      rec.push_back(bench_prefill(*be, cuda::KvFormat::TurboQuant, T, kc, vc, tag, cuda::TqDecode::kAlu, 28672, true, T));
      if (cuda::prefill_wgmma_ring_enabled())  // the same chunk through the ring kernel
        rec.push_back(bench_prefill(*be, cuda::KvFormat::TurboQuant, T, kc, vc, tag + "-ring",
                                    cuda::TqDecode::kAlu, 28672, true, T, true));
    }
    double base = 0;
    for (const Row& r : rec) {
      if (r.kernel.rfind("bf16", 0) == 0) base = r.ms;  // each group's bf16 row first
      std::printf("%-18s %7lld %7lld %10.3f %9.1f  (%.3fx bf16)\n", r.kernel.c_str(), (long long)r.T,
                  (long long)r.L, r.ms, r.tflops, base / r.ms);
    }
  }
  if (!csv.empty()) {
    FILE* out = std::fopen(csv.c_str(), "w");
    if (!out) return 1;
    std::fprintf(out, "kernel,T,L,ms,tflops\n");
    for (const Row& r : rows)
      std::fprintf(out, "%s,%lld,%lld,%.4f,%.2f\n", r.kernel.c_str(), (long long)r.T,
                   (long long)r.L, r.ms, r.tflops);
    std::fclose(out);
  }
  return 0;
}
