// The logits_stats kernel: one block per logits row reads the row once, each thread keeping an
// online log-sum-exp (float max, double sum rescaled when the max moves) and its first maximum;
// the block then combines them. Teacher-forced scoring takes this instead of the full row.
#include <cmath>
#include <string>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/logits_top.h"

namespace tq::cuda {
namespace {

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr unsigned kFull = 0xffffffffu;

// A partial reduction: max m of the entries that are not NaN (-inf when none), sum s of
// exp(x - m) over them, the first index of the max (-1 while only NaN was seen), and whether a
// NaN was seen (a finite row's lse is then NaN, as the host's).
struct Part {
  float m;
  double s;
  int64_t arg;
  bool nan;
};

__device__ __forceinline__ void add(Part& p, float x, int64_t i) {
  if (x != x) {
    p.nan = true;
  } else if (p.arg < 0 || x > p.m) {
    if (x > -INFINITY) p.s = (p.m > -INFINITY ? p.s * exp(double(p.m) - double(x)) : 0.0) + 1.0;
    p.m = x;
    p.arg = i;
  } else if (x > -INFINITY) {
    p.s += exp(double(x) - double(p.m));
  }
}

// b into a. Each part's arg is the lowest index of its max, so ties take the lower one.
__device__ __forceinline__ void merge(Part& a, const Part& b) {
  a.nan = a.nan || b.nan;
  if (b.arg < 0) return;
  if (a.arg < 0) {
    a = {b.m, b.s, b.arg, a.nan};
  } else if (b.m > a.m) {
    a.s = (a.m > -INFINITY ? a.s * exp(double(a.m) - double(b.m)) : 0.0) + b.s;
    a.m = b.m;
    a.arg = b.arg;
  } else if (b.m == a.m) {
    a.s += b.s;
    a.arg = min(a.arg, b.arg);
  } else if (b.m > -INFINITY) {
    a.s += b.s * exp(double(b.m) - double(a.m));
  }
}

__device__ Part shfl(const Part& p, int o) {
  Part q;
  q.m = __shfl_xor_sync(kFull, p.m, o);
  q.s = __shfl_xor_sync(kFull, p.s, o);
  q.arg = __shfl_xor_sync(kFull, p.arg, o);
  q.nan = __shfl_xor_sync(kFull, int(p.nan), o) != 0;
  return q;
}

__global__ void __launch_bounds__(kThreads) logits_stats_kernel(const float* logits, int64_t vocab,
                                                                const StatsRowDesc* descs,
                                                                RowStats* out) {
  __shared__ Part part[kWarps];
  const StatsRowDesc d = descs[blockIdx.x];
  const float* row = logits + d.row * vocab;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  Part p{-INFINITY, 0.0, -1, false};
  for (int64_t i = tid; i < vocab; i += kThreads) add(p, __ldcs(row + i), i);
  for (int o = 16; o > 0; o >>= 1) merge(p, shfl(p, o));
  if (lane == 0) part[warp] = p;
  __syncthreads();
  if (tid != 0) return;
  for (int w = 1; w < kWarps; ++w) merge(p, part[w]);
  RowStats& o = out[blockIdx.x];
  if (!isfinite(p.m)) o.lse = p.m;
  else if (p.nan) o.lse = __longlong_as_double(0x7ff8000000000000ll);
  else o.lse = double(p.m) + log(p.s);
  o.target_logit = d.target >= 0 ? row[d.target] : __int_as_float(0x7fc00000);
  o.argmax = int32_t(p.arg < 0 ? 0 : p.arg);
}

}  // namespace

void LogitsTopWorkspace::run_stats(const float* logits, int64_t vocab, std::span<const StatsRowDesc> rows,
                                   RowStats* out, void* stream) {
  if (rows.empty()) return;
  if (vocab <= 0) raise("logits_stats: empty rows");
  for (const StatsRowDesc& r : rows)
    if (r.target < -1 || r.target >= vocab)
      raise("logits_stats: target " + std::to_string(r.target) + " is outside the vocabulary");
  const size_t out_bytes = rows.size() * sizeof(RowStats), desc_at = round8(out_bytes);
  const Piece in[] = {{rows.data(), rows.size_bytes()}};
  char* dv = stage(desc_at, in, stream);
  logits_stats_kernel<<<unsigned(rows.size()), kThreads, 0, as_stream(stream)>>>(
      logits, vocab, reinterpret_cast<const StatsRowDesc*>(dv + desc_at), reinterpret_cast<RowStats*>(dv));
  fetch(out, out_bytes, stream);
}

}  // namespace tq::cuda
