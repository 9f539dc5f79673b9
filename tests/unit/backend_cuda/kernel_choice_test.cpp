// Kernel choice (a pure function, runs on any machine): which attention kernel a shape gets.
#include "backend/cuda/kernel_choice.h"

#include <gtest/gtest.h>

namespace tq::cuda {
namespace {

DeviceInfo h200() {
  DeviceInfo d;
  d.sm_major = 9;
  d.sm_minor = 0;
  d.n_sm = 132;
  return d;
}

AttnShape decode(KvFormat f, int64_t batch, int64_t len) {
  AttnShape s;
  s.batch = batch;
  s.n_query = 1;
  s.n_head = 32;
  s.n_head_kv = 8;
  s.head_dim = 128;
  s.max_len = len;
  s.format = f;
  return s;
}

TEST(KernelChoice, F32GoesToTheGenericKernel) {
  AttnShape s = decode(KvFormat::F32, 1, 4096);
  s.n_query = 300;
  EXPECT_EQ(choose_attention(h200(), s).kernel, AttnKernel::Generic);
}

TEST(KernelChoice, DecodeOnBf16AndTurboQuantUsesSplitK) {
  for (KvFormat f : {KvFormat::BF16, KvFormat::TurboQuant}) {
    AttnPlan p = choose_attention(h200(), decode(f, 1, 131072));
    EXPECT_EQ(p.kernel, AttnKernel::DecodeSplitK);
    EXPECT_EQ(p.n_sub, 1);
    // 8 kv heads, one wave: bf16 kDecodeBlocksPerSm (2) blocks per SM -> 33 splits of ~4K
    // tokens; TurboQuant d=128 kTq128BlocksPerSm -> floor(132 k / 8).
    EXPECT_EQ(p.n_split, f == KvFormat::BF16 ? 132 * kDecodeBlocksPerSm / 8 : 132 * kTq128BlocksPerSm / 8);
  }
}

TEST(KernelChoice, SplitsShrinkWithBatchAndShortContexts) {
  AttnPlan big = choose_attention(h200(), decode(KvFormat::TurboQuant, 8, 32768));
  EXPECT_EQ(big.n_split, 132 * kTq128BlocksPerSm / 64);  // 64 (seq, head) pairs
  // An exact tail takes no block of its own (the split blocks take its 32-row chunks).
  AttnShape tail = decode(KvFormat::TurboQuant, 8, 32768);
  tail.tail_rows = 128;
  EXPECT_EQ(choose_attention(h200(), tail).n_split, 132 * kTq128BlocksPerSm / 64);
  tail.batch = 1;
  EXPECT_EQ(choose_attention(h200(), tail).n_split, 132 * kTq128BlocksPerSm / 8);
  AttnPlan tiny = choose_attention(h200(), decode(KvFormat::TurboQuant, 1, 300));
  EXPECT_EQ(tiny.n_split, 2);  // at least kMinSplitTokens per split
  // A short context with a tail at batch 1, in the kernel's short form (records in one 192-token
  // stage a split, at most 24 tail rows a split): a split per 16 rows.
  AttnShape short_tail = decode(KvFormat::TurboQuant, 1, 300);
  short_tail.tail_rows = 129;
  EXPECT_EQ(choose_attention(h200(), short_tail).n_split, 9);
  short_tail.tail_rows = 40;
  EXPECT_EQ(choose_attention(h200(), short_tail).n_split, 3);
  // Past the short form (9 splits of 1,800 records would need two stages each): a split per
  // kTq128TailRowsPerSplit rows, up to the wave, but at least one per 256 records.
  short_tail.max_len = 1800;
  short_tail.tail_rows = 129;
  EXPECT_EQ(choose_attention(h200(), short_tail).n_split, 132 * kTq128BlocksPerSm / 8);
  short_tail.tail_rows = 40;
  EXPECT_EQ(choose_attention(h200(), short_tail).n_split, 8);
  short_tail.max_len = 300;
  short_tail.batch = 4;  // wave: 4 splits per (sequence, kv head); batch > 1 has no short form
  EXPECT_EQ(choose_attention(h200(), short_tail).n_split, 4);
  AttnPlan huge_batch = choose_attention(h200(), decode(KvFormat::BF16, 256, 8192));
  EXPECT_EQ(huge_batch.n_split, 1);
}

TEST(KernelChoice, LargeGroupsUseSubgroupsOfEightHeads) {
  AttnShape s = decode(KvFormat::BF16, 1, 8192);
  s.n_head = 64;
  s.n_head_kv = 4;
  EXPECT_EQ(choose_attention(h200(), s).n_sub, 2);
}

TEST(KernelChoice, UnsupportedShapesAndFormatsAreSaid) {
  AttnShape s = decode(KvFormat::TurboQuant, 1, 4096);
  s.key_bits = 3;
  EXPECT_EQ(choose_attention(h200(), s).kernel, AttnKernel::Unsupported);
  s = decode(KvFormat::TurboQuant, 1, 4096);
  s.hadamard = false;
  EXPECT_EQ(choose_attention(h200(), s).kernel, AttnKernel::Unsupported);
  s = decode(KvFormat::BF16, 1, 4096);
  s.head_dim = 96;
  EXPECT_EQ(choose_attention(h200(), s).kernel, AttnKernel::Unsupported);
  s = decode(KvFormat::TurboQuant, 1, 4096);
  s.n_query = 16;  // TurboQuant prefill goes through the cache's own path
  EXPECT_EQ(choose_attention(h200(), s).kernel, AttnKernel::Unsupported);
  EXPECT_STREQ(attn_kernel_name(AttnKernel::DecodeSplitK), "decode_splitk");
}

TEST(KernelChoice, Bf16PrefillUsesTheFlashKernel) {
  for (int64_t T : {2, 16, 4096}) {
    AttnShape s = decode(KvFormat::BF16, 1, 32768);
    s.n_query = T;
    EXPECT_EQ(choose_attention(h200(), s).kernel, AttnKernel::PrefillFlash) << T;
  }
  AttnShape s = decode(KvFormat::BF16, 1, 4096);
  s.n_query = 16;
  s.head_dim = 96;
  EXPECT_EQ(choose_attention(h200(), s).kernel, AttnKernel::Unsupported);
  EXPECT_STREQ(attn_kernel_name(AttnKernel::PrefillFlash), "prefill_flash");
}

TEST(KernelChoice, Bf16ShapesTheFastKernelsCannotTakeGoGeneric) {
  AttnShape s = decode(KvFormat::BF16, 1, 4096);
  s.all_keys_visible = false;  // a sliding window hides the oldest keys from the query
  EXPECT_EQ(choose_attention(h200(), s).kernel, AttnKernel::Generic);
  DeviceInfo old = h200();
  old.sm_major = 7;  // no bf16 mma.sync
  EXPECT_EQ(choose_attention(old, decode(KvFormat::BF16, 1, 4096)).kernel, AttnKernel::Generic);
  s = decode(KvFormat::BF16, 1, 4096);
  s.n_query = 64;
  EXPECT_EQ(choose_attention(old, s).kernel, AttnKernel::Generic);
}

}  // namespace
}  // namespace tq::cuda
