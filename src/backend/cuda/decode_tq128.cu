// Launch of the TurboQuant 4-bit decode attention for head_dim 128 (the kernel: tq128_kernel.cuh):
// which form (long, or v13's short one for batch-1 short contexts), its kernel attributes, the
// cluster or last-block merge, the parameters, and (v14) the step's deferred record, encoded in the
// short form's launch or by its own kernel after the long form.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <mutex>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/tq128_kernel.cuh"
#include "backend/cuda/tq128_merge.cuh"
#include "backend/cuda/tq_cuda.h"

namespace tq::cuda {
namespace {

using namespace tq128;  // TqParams, constants (tq128_merge.cuh), tq128_kernel (tq128_kernel.cuh)

// Per-process counters for the fused merge (grown on demand, self-resetting). One launch at a
// time may use them: concurrent decode launches on different streams are not supported.
int* merge_counters(size_t n) {
  static std::mutex mu;
  static int* buf = nullptr;
  static size_t cap = 0;
  std::lock_guard<std::mutex> lock(mu);
  if (n > cap) {
    CUDA_CHECK(cudaDeviceSynchronize());
    if (buf) CUDA_CHECK(cudaFree(buf));
    const size_t want = std::max<size_t>(n, 4096);
    CUDA_CHECK(cudaMalloc(&buf, want * sizeof(int)));
    CUDA_CHECK(cudaMemset(buf, 0, want * sizeof(int)));
    CUDA_CHECK(cudaDeviceSynchronize());
    cap = want;
  }
  return buf;
}

// The launch is programmatic-dependent (PDL) unless TQ_DECODE_PDL=0 or batched.
// v13: the short form (kStagesShort slots) where it applies, unless TQ_DECODE_SHORT=0 (read at
// every launch: the tests switch it).
using TqKernel = void (*)(TqParams);
struct TqForm {
  TqKernel kernel;
  bool short_form;
  size_t smem;
  int scratch;  // shared-memory bytes free after the loop (the fused merge's scratch)
};
// The kernel's attributes, set once per form: the long form asks for the largest shared-memory
// split (kBlocksPerSm blocks per SM), the short one for the GEMVs' (kSmallSmemCarveout).
TqForm configured(const TqForm& f, int carveout) {
  CUDA_CHECK(cudaFuncSetAttribute(f.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(f.smem)));
  CUDA_CHECK(cudaFuncSetAttribute(f.kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  CUDA_CHECK(cudaFuncSetAttribute(f.kernel, cudaFuncAttributePreferredSharedMemoryCarveout, carveout));
  return f;
}
TqForm tq128_form(bool short_form) {
  static const TqForm long_form = configured(
      {tq128_kernel<kStagesLong>, false, smem_bytes(kStagesLong), scratch_bytes(kStagesLong)},
      int(cudaSharedmemCarveoutMaxShared));
  static const TqForm short_one =
      configured({tq128_kernel<kStagesShort>, true, smem_bytes(kStagesShort), scratch_bytes(kStagesShort)},
                 kSmallSmemCarveout);
  return short_form ? short_one : long_form;
}

// v11's cluster merge needs all n_split blocks of a (sequence, kv head, subgroup) in one
// cluster (at most kMaxCluster, the non-portable limit) and the whole grid resident at once:
// clusters are placed within a GPC, so fewer of them may fit than blocks per SM suggest.
constexpr int kMaxCluster = 16;
int max_active_clusters(const TqForm& f, int n_split) {
  static std::mutex mu;
  static int cache[2][kMaxCluster + 1] = {};
  std::lock_guard<std::mutex> lock(mu);
  int& n_cached = cache[f.short_form ? 1 : 0][n_split];
  if (n_cached == 0) {
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(n_split, 1, 1);
    cfg.blockDim = dim3(kThreads);
    cfg.dynamicSmemBytes = f.smem;
    cudaLaunchAttribute attr{};
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = n_split, attr.val.clusterDim.y = attr.val.clusterDim.z = 1;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    int n = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveClusters(&n, f.kernel, &cfg));
    n_cached = n > 0 ? n : -1;
  }
  return n_cached;
}
bool use_cluster(const TqForm& f, int n_split, int64_t n_clusters) {
  const char* off = std::getenv("TQ_DECODE_CLUSTER");  // per launch: the tests switch it
  if ((off && std::atoi(off) == 0) || n_split > kMaxCluster) return false;
  return n_split == 1 || max_active_clusters(f, n_split) >= n_clusters;
}

}  // namespace

int tq128_max_clusters(int n_split) {
  if (n_split < 1 || n_split > kMaxCluster) return 0;
  return std::max(0, max_active_clusters(tq128_form(false), n_split));
}

int tq128_blocks_per_sm() {
  const TqForm f = tq128_form(false);
  int n = 0;
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, f.kernel, kThreads, f.smem));
  return n;
}

bool tq128_supported(const DecodeAttnArgs& a) {
  auto al16 = [](const void* ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15u) == 0; };
  // (The queries are read as float4s.)
  if (a.format != KvFormat::TurboQuant || a.head_dim != 128 || !al16(a.q)) return false;
  if (a.seqs) return true;  // (the descriptors' own storage is caller-checked)
  return a.seq_stride % 8 == 0 && a.head_stride % 8 == 0 && al16(a.k) && al16(a.v) &&
         al16(a.k_scale) && al16(a.v_scale) && (!a.k_tail || (al16(a.k_tail) && al16(a.v_tail)));
}

void decode_attention_tq128(const DecodeAttnArgs& a, const AttnPlan& plan, void* stream) {
  TqParams p{};
  const int G = a.n_head / a.n_head_kv;
  p.q = a.q;
  p.out = a.out;
  p.n_split = plan.n_split;
  p.n_total = plan.n_split;  // the exact tail's chunks go to the split blocks (v10)
  p.part_acc = a.workspace;
  p.part_ml = a.workspace + size_t(a.batch) * a.n_head * p.n_total * D;
  p.counters = merge_counters(size_t(a.batch) * a.n_head_kv * plan.n_sub);
  p.k = static_cast<const uint8_t*>(a.k);
  p.v = static_cast<const uint8_t*>(a.v);
  p.ks = a.k_scale;
  p.vs = a.v_scale;
  p.seq_stride = a.seq_stride;
  p.head_stride = a.head_stride;
  p.lens = a.lens;
  p.kt = a.k_tail;
  p.vt = a.v_tail;
  p.t_seq_stride = a.tail_seq_stride;
  p.t_head_stride = a.tail_head_stride;
  p.tlens = a.tail_lens;
  const bool by_value = a.batch == 1 && !a.seqs;
  p.len1 = by_value && a.len >= 0 ? a.len : -1;
  p.tlen1 = by_value && a.tail_len >= 0 ? a.tail_len : -1;
  p.early = p.len1 >= 0 ? std::clamp(a.early_rows, 0, p.len1) : 0;
  p.seqs = a.seqs;
  p.n_head = a.n_head;
  p.n_head_kv = a.n_head_kv;
  p.G = G;
  p.n_sub = plan.n_sub;
  p.qscale = (a.scale != 0.0f ? a.scale : 1.0f / std::sqrt(float(D))) * kLog2e;
  static const int max_early = env_int("TQ_DECODE_EARLY_STAGES", kEarlyStages);
  p.max_early = max_early;
  static const int mode = env_int("TQ_DECODE_MODE", 0);
  p.mode = mode;
  static const bool no_swizzle = env_int("TQ_DECODE_NO_SWIZZLE", 0) != 0;
  p.swizzle = no_swizzle ? 0 : 1;
  static const bool want_stamps = env_int("TQ_DECODE_STAMPS", 0) != 0;
  p.stamps = want_stamps ? stamp_buffer(size_t(p.n_total) * a.n_head_kv * plan.n_sub * a.batch)
                         : nullptr;
  shared_centroids(*a.k_codec, *a.v_codec, p.cent);
  for (int i = 0; i < 8; ++i) {
    p.ksign_in[i] = a.k_codec->sign_in[i];
    p.ksign_out[i] = a.k_codec->sign_out[i];
    p.vsign_in[i] = a.v_codec->sign_in[i];
    p.vsign_out[i] = a.v_codec->sign_out[i];
  }
  // v13: the short form at batch 1 (lengths by value) when every split's records fit its
  // kStagesShort stages and its exact-tail rows the kPreRowsShort loaded at the start.
  const bool short_fits = p.len1 >= 0 && (!p.kt || p.tlen1 >= 0) &&
                          tq128_short_fits(p.len1, p.kt ? p.tlen1 : 0, p.n_split);
  const TqForm form = tq128_form(short_fits && env_int("TQ_DECODE_SHORT", 1) != 0);
  // A record job rides in the short form's launch (TQ_RECORD_FUSED=0: its own kernel after).
  const bool rec_fused = a.record && form.short_form && env_int("TQ_RECORD_FUSED", 1) != 0;
  if (a.record && (a.batch != 1 || a.seqs || a.record->n_head_kv != a.n_head_kv))
    raise("decode_attention: a record job needs batch 1 without descriptors and the same heads");
  if (rec_fused) p.has_rec = 1, p.rec = *a.record;
  if (size_t(8) * (2 * p.n_total + D) * 4 > size_t(form.scratch))
    raise("decode_attention: too many splits for the fused merge");
  // v12: a PDL launch unless TQ_DECODE_PDL=0, but not in the batched form (descriptors): there
  // the engine's B=8 8K TQ4 decode measured 1,021-1,022 against 1,050-1,058 tok/s without it
  // (session 7, same run); its blocks have no early work to do.
  static const bool pdl_on = env_int("TQ_DECODE_PDL", 1) != 0;
  const bool pdl = pdl_on && !a.seqs;
  const int64_t n_clusters = int64_t(a.batch) * a.n_head_kv * plan.n_sub;
  p.cluster = use_cluster(form, p.n_total, n_clusters) ? 1 : 0;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(p.n_total, a.n_head_kv * plan.n_sub, a.batch);
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = form.smem;
  cfg.stream = as_stream(stream);
  cudaLaunchAttribute attr[2];
  int n_attr = 0;
  if (pdl) {
    attr[n_attr].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n_attr++].val.programmaticStreamSerializationAllowed = 1;
  }
  if (p.cluster && p.n_total > 1) {
    attr[n_attr].id = cudaLaunchAttributeClusterDimension;
    attr[n_attr].val.clusterDim.x = unsigned(p.n_total);
    attr[n_attr].val.clusterDim.y = attr[n_attr].val.clusterDim.z = 1;
    ++n_attr;
  }
  cfg.attrs = attr;
  cfg.numAttrs = n_attr;
  CUDA_CHECK(cudaLaunchKernelEx(&cfg, form.kernel, p));
  check_last_launch("tq128_kernel");
  if (a.record && !rec_fused) launch_record_encode(*a.record, stream);
}

}  // namespace tq::cuda
