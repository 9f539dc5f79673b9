// Device kernels of the CUDA backend callable from host code (tests, benchmarks, caches): split-K
// decode attention on bf16 or TurboQuant K/V, TurboQuant encode. Pointers are device memory.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "backend/cuda/kernel_choice.h"
#include "backend/tq_code_order.h"

namespace tq::quant {
class VectorCodec;
}

namespace tq::cuda {

DeviceInfo device_info(int device = 0);

// One TurboQuant codec as the kernels need it: 4-bit Lloyd-Max centroids and boundaries, the
// Hadamard sign vectors as bit masks (bit i set: coordinate i is negated), the norm mode. The
// device stores sign-magnitude codes (backend/tq_code_order.h): centroids[code] is the centroid
// of index index_of_sign_magnitude(code); the boundaries stay sorted (the encoders count those
// below a value, then store sign_magnitude_code of that index).
struct TqCodecDev {
  int head_dim = 128;
  int bits = 4;
  float centroids[16] = {};  // by stored code
  float boundaries[15] = {};  // ascending
  uint32_t sign_in[8] = {}, sign_out[8] = {};  // D1, D2 of R = D2 H D1 / sqrt(d); d <= 256
  bool corrected = false;
};
// Throws tq::Error when the codec is not one the device kernels support (4-bit, Hadamard,
// fp16 scale, head_dim 64/128/256).
TqCodecDev make_tq_codec_dev(const quant::VectorCodec& codec);
// The decode kernels read K and V through one centroid table: copies it to `out`, or raises
// when the two codecs' centroids differ.
void shared_centroids(const TqCodecDev& k, const TqCodecDev& v, float (&out)[16]);

// Device layout of a TurboQuant cache (structure of arrays, 16-byte aligned rows): for sequence
// b, kv head h, token t, index i = b * seq_stride + h * head_stride + t (in tokens):
//   codes  at codes  + i * head_dim / 2   (VectorCodec's packing of 4-bit codes, sign-magnitude
//                                          order: CudaBackend::tq_code_order)
//   scale  at scales + i                  (fp16 bits, VectorCodec's scale)
// Dense bf16 K/V use the same indexing with head_dim bf16 values per token.
// Capacity rule: head_stride >= max length rounded up to 32 (tiles read whole 32-token slots).
// One sequence of a batched decode (DecodeAttnArgs::seqs): its own K/V (codes, or bf16 rows),
// scales (TurboQuant) and exact tail, each addressed as (h * head_stride + t) tokens from the
// sequence's base pointers, so every sequence may be a separate allocation with its own capacity.
// `row` is the sequence's row of q and out ([row, n_head, head_dim]).
struct DecodeSeqDesc {
  const void* k = nullptr;
  const void* v = nullptr;
  const uint16_t* k_scale = nullptr;  // TurboQuant only
  const uint16_t* v_scale = nullptr;
  const float* k_tail = nullptr;      // exact tail rows (TurboQuant, head_dim 128), or null
  const float* v_tail = nullptr;
  int64_t head_stride = 0, tail_head_stride = 0;
  int32_t len = 0, tail_len = 0, row = 0, pad = 0;
};

// The TurboQuant records of one token per kv head, written after the fact (a deferred append,
// KvAppend::defer_record): k and v [n_head_kv, 128] f32 (normed and RoPE'd, not rotated) to
// record dst.len of dst's store (k, v, k_scale, v_scale, head_stride), the codes of
// tq_encode_rows.
struct RecordJob {
  const float* k = nullptr;
  const float* v = nullptr;
  DecodeSeqDesc dst;
  TqCodecDev kc, vc;
  int n_head_kv = 0;
};

struct DecodeAttnArgs {
  const float* q = nullptr;  // [B, n_head, head_dim] f32
  float* out = nullptr;      // [B, n_head, head_dim] f32
  KvFormat format = KvFormat::BF16;
  const void* k = nullptr;
  const void* v = nullptr;
  const uint16_t* k_scale = nullptr;  // TurboQuant only
  const uint16_t* v_scale = nullptr;
  int64_t seq_stride = 0, head_stride = 0;
  const int32_t* lens = nullptr;  // [B] context length of each sequence (device)
  // Batch 1 without descriptors: the context and exact-tail lengths by value when the host knows
  // them (>= 0; they must equal lens[0] and tail_lens[0]), so that the TurboQuant head_dim-128
  // kernel issues its first loads without a round trip for the lengths. -1: read the arrays.
  int32_t len = -1, tail_len = -1;
  // With `len`: records [0, early_rows) are not written by the kernel launched just before this
  // one, so the TurboQuant head_dim-128 kernel (a PDL launch) may load them while that kernel
  // ends. 0: every load waits for it.
  int32_t early_rows = 0;
  int batch = 1, n_head = 32, n_head_kv = 8, head_dim = 128;
  float scale = 0.0f;            // 0: 1 / sqrt(head_dim)
  const TqCodecDev* k_codec = nullptr;  // host structs, TurboQuant only
  const TqCodecDev* v_codec = nullptr;
  float* workspace = nullptr;    // decode_attention_workspace() bytes of device memory
  // Optional exact tail (TurboQuant, head_dim 128): the most recent tokens of each sequence as
  // rotated f32 rows (R_k k, R_v v), merged into the same softmax. Row (b, h, t) at
  // k_tail + (b * tail_seq_stride + h * tail_head_stride + t) * head_dim, t < tail_lens[b]
  // (device). Null k_tail: no tail.
  const float* k_tail = nullptr;
  const float* v_tail = nullptr;
  int64_t tail_seq_stride = 0, tail_head_stride = 0;
  const int32_t* tail_lens = nullptr;
  // Batched form: with `seqs` (device memory, `batch` descriptors) set, each sequence's pointers,
  // strides, lengths and q/out row come from its descriptor and k .. tail_lens above are unused.
  // seqs_tail: some descriptor has exact tail rows (the TurboQuant head_dim-128 kernel reads
  // each descriptor's; tail_len 0 or null tails contribute nothing). The caller guarantees the tq128 kernel's
  // alignment (16-byte pointers, head strides multiples of 8) for every descriptor.
  const DecodeSeqDesc* seqs = nullptr;
  bool seqs_tail = false;
  // Optional records to write with this launch (batch 1, TurboQuant): the step's token, which
  // this attention reads from the exact tail and not from the records. The short form of the
  // head_dim-128 kernel encodes them in warps its loop leaves idle; otherwise launch_record_encode
  // runs after the attention.
  const RecordJob* record = nullptr;
};
// Bytes of workspace (room for plan.n_split splits plus one).
size_t decode_attention_workspace(const AttnPlan& plan, int batch, int n_head, int head_dim);
// Resident blocks per SM of the TurboQuant head_dim-128 decode kernel (benchmarks, notes).
int tq128_blocks_per_sm();
// Clusters of n_split TurboQuant d=128 decode blocks that fit on the device at once (0: none, or
// n_split past the cluster limit); the decode merges its splits in a cluster when they all fit.
int tq128_max_clusters(int n_split);
// Probe TQ_DECODE_STAMPS=1: a one-line summary of the last TurboQuant d=128 decode launch's
// per-block phase times (decode_tq128.cu; benchmarks only).
std::string tq128_stamp_report();
// Queues the attention on `stream` (a cudaStream_t, nullptr = the legacy default stream).
void decode_attention(const DecodeAttnArgs& a, const AttnPlan& plan, void* stream = nullptr);

// Encodes n_token vectors per kv head into the device TurboQuant layout at tokens
// [t0, t0 + n_token) of one sequence (codes/scales already offset to that sequence). Input
// x(t, h) = x + t * x_token_stride + h * x_head_stride (floats): token-major new K/V for an
// append, head-major dense storage for a conversion slice.
void tq_encode(const float* x, int64_t n_token, int n_head_kv, int64_t x_token_stride,
               int64_t x_head_stride, const TqCodecDev& codec, uint8_t* codes, uint16_t* scales,
               int64_t head_stride, int64_t t0, void* stream = nullptr);
// tq_encode that also writes each input row rotated (R x, f32, quant::Rotation::apply's
// result) at rot + (h * rot_head_stride + rot_t0 + t) * head_dim: a recent-exact window.
void tq_encode_rows(const float* x, int64_t n_token, int n_head_kv, int64_t x_token_stride,
                    int64_t x_head_stride, const TqCodecDev& codec, uint8_t* codes,
                    uint16_t* scales, int64_t head_stride, int64_t t0, float* rot,
                    int64_t rot_head_stride, int64_t rot_t0, void* stream = nullptr);
// Where tq_encode_rows_out writes the rotated rows R x (a recent-exact window): token t's as f32
// at f32 + (h * f32_head_stride + f32_t0 + t) * head_dim when f32 is set and t >= f32_from, and as
// fp16 (round to nearest, as tq_rows_to_16bit) at f16 + (h * f16_head_stride + f16_t0 + t) *
// head_dim when f16 is set. A prefill chunk's rows go to the attention's fp16 tiles, and only those
// the window keeps after the chunk to its f32 rows.
struct TqRowsOut {
  float* f32 = nullptr;
  int64_t f32_head_stride = 0, f32_t0 = 0, f32_from = 0;
  uint16_t* f16 = nullptr;
  int64_t f16_head_stride = 0, f16_t0 = 0;
};
void tq_encode_rows_out(const float* x, int64_t n_token, int n_head_kv, int64_t x_token_stride,
                        int64_t x_head_stride, const TqCodecDev& codec, uint8_t* codes,
                        uint16_t* scales, int64_t head_stride, int64_t t0, const TqRowsOut& out,
                        void* stream = nullptr);
// True when TQ_ENCODE_KERNEL=warp selects the one-warp-per-vector encoder (the bulk encoder's
// baseline; conversions then copy through f32 as before).
bool encode_kernel_is_warp();
// tq_encode_rows from bf16 rows (a dense cache's store: conversion without an f32 copy).
void tq_encode_rows_bf16(const uint16_t* x, int64_t n_token, int n_head_kv,
                         int64_t x_token_stride, int64_t x_head_stride, const TqCodecDev& codec,
                         uint8_t* codes, uint16_t* scales, int64_t head_stride, int64_t t0,
                         float* rot, int64_t rot_head_stride, int64_t rot_t0,
                         void* stream = nullptr);

// Test aid: the bulk encoder's table quantization (tq_encode_rows' fast path) of n finite values
// y to idx, and in *table_ok whether the table passed its check for this codec (device memory).
void tq_quantize_probe(const float* y, int64_t n, const TqCodecDev& codec, uint8_t* idx,
                       int* table_ok, void* stream = nullptr);

// Batched one-token appends, one launch for all sequences (descriptors in device memory, fields
// reused as: k, v the sequence's store; len the slot; row the row of the new k, v
// [*, n_head_kv, head_dim] f32). tq_encode_batch: TurboQuant codes / scales (k_scale, v_scale)
// at record `len`, and with k_tail set the rotated rows at exact row tail_len (head stride
// tail_head_stride); head_dim 128, same codes as tq_encode_rows. launch_kv_append_batch: bf16
// stores, as launch_kv_write.
void tq_encode_batch(const DecodeSeqDesc* seqs, int n_seq, int n_head_kv, const float* k,
                     const float* v, const TqCodecDev& kc, const TqCodecDev& vc,
                     void* stream = nullptr);
void launch_kv_append_batch(const DecodeSeqDesc* seqs, int n_seq, const float* k, const float* v,
                            int n_head_kv, int head_dim, void* stream);
// launch_qk_norm_rope (positions pos0 + t) with every q row then rotated by kc's rotation in the
// same launch (R_k q, tq_rotate's result; a TurboQuant prefill chunk's queries); head_dim 128.
void launch_qk_norm_rope_rotate_q(float* q, float* k, int64_t T, int64_t n_head,
                                  int64_t n_head_kv, int64_t head_dim, const float* q_w,
                                  const float* k_w, float eps, int64_t pos0,
                                  const float* inv_freq, const TqCodecDev& kc,
                                  void* stream = nullptr);
// launch_qk_norm_rope (positions pos0 + t) that also appends the T tokens' keys (normed,
// rotated) and values v [T, n_head_kv, head_dim] in the same launch, to one sequence's store
// described by dst (host struct, fields as in tq_encode_batch: len the first slot / record,
// tail_len the first exact row): a bf16 store (kc, vc null; as launch_kv_write) or a TurboQuant
// one (kc, vc set; head_dim 128; the same codes as tq_encode_rows).
// With defer_record (TurboQuant, dst.k_tail set, T = 1) it writes the exact-window rows only;
// a RecordJob (launch_record_encode, or DecodeAttnArgs::record) writes the records later, from
// the same k (normed, RoPE'd) and v.
void launch_qk_norm_rope_append(float* q, float* k, const float* v, int64_t T, int64_t n_head,
                                int64_t n_head_kv, int64_t head_dim, const float* q_w,
                                const float* k_w, float eps, int64_t pos0, const float* inv_freq,
                                const DecodeSeqDesc& dst, const TqCodecDev* kc,
                                const TqCodecDev* vc, bool defer_record, void* stream);
// Writes job's records. Launched with PDL right after the attention
// that read the token from the exact window: it encodes while that kernel runs (both only read
// what the kernels before them wrote) and waits for it before it ends, so the next kernel's wait
// covers the attention too.
void launch_record_encode(const RecordJob& job, void* stream);

// Conversions and fills used by tests and benchmarks (fills are hash-based: fast, reproducible
// for a seed, and never zeros, which would time unrealistically).
void f32_to_bf16(const float* x, uint16_t* y, int64_t n, void* stream = nullptr);
void fill_random_bytes(void* p, size_t bytes, uint64_t seed, void* stream = nullptr);
// Uniform values in [lo, hi) stored as fp16 (kBf16 = false) or bf16 bits.
void fill_random_16(uint16_t* p, int64_t n, float lo, float hi, bool bf16, uint64_t seed,
                    void* stream = nullptr);
void check_last_launch(const char* what);  // throws tq::Error on a pending CUDA error
// Test aid: fills every SM's shared memory with NaN bytes (a later kernel that reads shared
// memory it never wrote then produces NaN).
void poison_shared_memory(void* stream = nullptr);
// Test aid: a writer still running when the next kernel starts. A programmatic-dependent launch
// that lets the next kernel in the stream begin at once, spins ~spin_ns, then waits for the
// previous kernel and copies n_rows rows of row_bytes from src to dst (row i at i * stride_bytes
// in both). Tests of DecodeAttnArgs::early_rows put it before a decode.
void copy_rows_late(void* dst, const void* src, int64_t row_bytes, int64_t stride_bytes,
                    int n_rows, int64_t spin_ns, void* stream);
// For tests and benchmarks (cuda_device.cpp): a non-blocking stream (a cudaStream_t), its
// release, and a wait for its work.
void* stream_create();
void stream_destroy(void* stream);
void stream_synchronize(void* stream);

// Benchmark timing on the legacy default stream: median milliseconds of `iters` runs of fn
// (each between two events) after `warmup` runs.
double time_median_ms(void (*fn)(void*), void* ctx, int warmup, int iters);
// GPU time per call of fn(ctx, stream): per_graph calls captured in one CUDA graph (no host
// launch gaps, as the SDPA baseline is timed), median over reps replays.
double time_graph_ms(void (*fn)(void*, void*), void* ctx, int per_graph, int reps);
// Device-to-device copy bandwidth in GB/s (bytes read + bytes written over the time).
double measure_copy_gbps(size_t bytes);

}  // namespace tq::cuda
