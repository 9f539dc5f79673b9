// choose_attention: the rules that map (device, shapes, formats) to an attention kernel.
#include "backend/cuda/kernel_choice.h"

#include <algorithm>
#include <cstdlib>

namespace tq::cuda {

const char* attn_kernel_name(AttnKernel k) {
  switch (k) {
    case AttnKernel::Generic: return "generic";
    case AttnKernel::DecodeSplitK: return "decode_splitk";
    case AttnKernel::PrefillFlash: return "prefill_flash";
    case AttnKernel::Unsupported: return "unsupported";
  }
  return "?";
}

AttnPlan choose_attention(const DeviceInfo& dev, const AttnShape& s) {
  AttnPlan p;
  if (s.n_head_kv <= 0 || s.n_head <= 0 || s.n_head % s.n_head_kv != 0 || s.batch <= 0) return p;
  const bool d_ok = s.head_dim == 64 || s.head_dim == 128 || s.head_dim == 256;
  const bool mma_ok = dev.sm_major >= 8;  // mma.sync m16n8k16 with f16/bf16 operands
  const int64_t group = s.n_head / s.n_head_kv;
  switch (s.format) {
    case KvFormat::F32:
      p.kernel = AttnKernel::Generic;
      return p;
    case KvFormat::BF16:
      // The generic kernel reads bf16 too: it takes what the tensor-core kernels cannot.
      if (!d_ok) return p;
      p.kernel = !mma_ok                                   ? AttnKernel::Generic
                 : s.n_query > 1                           ? AttnKernel::PrefillFlash
                 : s.n_query == 1 && s.all_keys_visible    ? AttnKernel::DecodeSplitK
                                                           : AttnKernel::Generic;
      if (p.kernel != AttnKernel::DecodeSplitK) return p;
      break;
    case KvFormat::TurboQuant:
      // The fused kernel decodes 4-bit codes with a byte -> half2 table and undoes a Hadamard.
      if (!d_ok || !mma_ok || s.n_query != 1 || s.key_bits != 4 || s.value_bits != 4 ||
          !s.hadamard || !s.fp16_scale)
        return p;
      break;
  }
  p.kernel = AttnKernel::DecodeSplitK;
  p.n_sub = int((group + 7) / 8);
  const int64_t base = s.batch * s.n_head_kv * p.n_sub;
  // One wave of the kernel's blocks (kDecodeBlocksPerSm; TurboQuant d = 128, decode_tq128.cu:
  // kTq128BlocksPerSm), rounded down so that the wave is not followed by a short one. TurboQuant
  // d = 128: the exact tail's rows are shared out among the split blocks (each loads up to
  // kTq128TailRowsPerSplit of them at its start), so a short context with a tail still takes up
  // to tail_rows / kTq128TailRowsPerSplit splits.
  const bool tq128 = s.format == KvFormat::TurboQuant && s.head_dim == 128;
  const int64_t want =
      std::max<int64_t>(1, int64_t(tq128 ? kTq128BlocksPerSm : kDecodeBlocksPerSm) * dev.n_sm / base);
  int64_t most = std::max<int64_t>(1, (s.max_len + kMinSplitTokens - 1) / kMinSplitTokens);
  if (tq128) {
    auto splits_for_tail = [&](int64_t rows_per_split) {
      const int64_t m = std::max(most, (s.tail_rows + rows_per_split - 1) / rows_per_split);
      return std::clamp<int64_t>(want, 1, std::min<int64_t>(m, kMaxSplits));
    };
    static const int short_rows = [] {
      const char* e = std::getenv("TQ_DECODE_TAIL_ROWS");
      return e && *e ? std::clamp(std::atoi(e), 1, kTq128ShortTailRows) : kTq128ShortTailRowsPerSplit;
    }();
    const int64_t n = splits_for_tail(short_rows);
    const bool short_form = s.batch == 1 && s.tail_rows > 0 && tq128_short_fits(s.max_len, s.tail_rows, n);
    p.n_split = int(short_form ? n : splits_for_tail(kTq128TailRowsPerSplit));
    return p;
  }
  if (s.format == KvFormat::BF16)
    most = std::max(most, std::min<int64_t>(kShortSplits, (s.max_len + kMinSplitTokensBf16 - 1) /
                                                              kMinSplitTokensBf16));
  p.n_split = int(std::clamp<int64_t>(want, 1, std::min<int64_t>(most, kMaxSplits)));
  return p;
}

}  // namespace tq::cuda
