// PrefixCache: chained keys, the RAM tier's byte bound, pins and LRU, evict_idle, the SSD tier
// (write, restart scan, partial / truncated / incompatible / flipped-byte files never served)
// and the background writer's byte bound under a burst.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <numeric>

#include "kv/prefix_cache.h"

namespace tq {
namespace {

namespace fs = std::filesystem;
constexpr int64_t B = 16;

std::vector<int32_t> tokens(int64_t n, int32_t seed) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) t[size_t(i)] = int32_t((i * 31 + seed * 7) % 1000);
  return t;
}
std::vector<uint8_t> payload(size_t n, uint8_t seed) {
  std::vector<uint8_t> p(n, 0);
  for (size_t i = 0; i < n; ++i) p[i] = uint8_t(i * 13 + seed);
  return p;
}

// Adds every whole block of `prompt` after what `acquire` restored, as a prefill would.
void prefill(PrefixCache& pc, const std::vector<int32_t>& prompt, size_t payload_bytes) {
  PrefixLease l = pc.acquire(prompt, int64_t(prompt.size()));
  for (int64_t t = l.tip_tokens; t + B <= int64_t(prompt.size()); t += B)
    pc.add(l, std::span(prompt).subspan(size_t(t), size_t(B)), payload(payload_bytes, uint8_t(t)));
}

fs::path temp_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("tq_prefix_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  return d;
}

PrefixCacheConfig cfg(uint64_t ram = 1 << 20) {
  PrefixCacheConfig c;
  c.block_tokens = B;
  c.ram_bytes = ram;
  return c;
}
// cfg() with an SSD tier in `dir`.
PrefixCacheConfig ssd_cfg(const fs::path& dir, uint64_t ram = 1 << 20) {
  PrefixCacheConfig c = cfg(ram);
  c.dir = dir.string();
  return c;
}

TEST(ChainHash, KeysNameTheWholePrefix) {
  BlockHash fp1{}, fp2{};
  fp2[0] = 1;
  auto t = tokens(B, 1);
  BlockHash root{};
  EXPECT_EQ(chain_hash(fp1, root, t), chain_hash(fp1, root, t));
  EXPECT_NE(chain_hash(fp1, root, t), chain_hash(fp2, root, t));  // other model or format
  BlockHash parent = chain_hash(fp1, root, tokens(B, 2));
  EXPECT_NE(chain_hash(fp1, root, t), chain_hash(fp1, parent, t));  // same tokens, other prefix
  auto u = t;
  u[5] ^= 1;
  EXPECT_NE(chain_hash(fp1, root, t), chain_hash(fp1, root, u));
  // Different identities give different fingerprints.
  auto a = PrefixCache::create(cfg(), "model A"), b = PrefixCache::create(cfg(), "model B");
  EXPECT_NE(a->fingerprint(), b->fingerprint());
  EXPECT_EQ(a->fingerprint(), PrefixCache::create(cfg(), "model A")->fingerprint());
}

// The fuzz corpus's files were written by an independent encoder (Python's hashlib and struct,
// tests/fuzz/corpus/kv_block_file): the C++ parser must agree with it on every verdict.
TEST(BlockFile, AgreesWithAnIndependentEncoder) {
  BlockHash fp;
  for (int i = 0; i < 32; ++i) fp[size_t(i)] = uint8_t(i);
  auto verdict = [&](const std::string& name, CachedBlock* out = nullptr) {
    std::ifstream f(fs::path(TQ_SOURCE_DIR) / "tests/fuzz/corpus/kv_block_file" / name,
                    std::ios::binary);
    std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    CachedBlock b;
    auto st = parse_block_file(bytes, fp, b);
    if (out) *out = b;
    if (st == BlockFileStatus::Ok) EXPECT_EQ(encode_block_file(fp, b), bytes) << name;
    return st;
  };
  CachedBlock b;
  ASSERT_EQ(verdict("valid_root.bin", &b), BlockFileStatus::Ok);
  EXPECT_EQ(b.tokens, (std::vector<int32_t>{1, 2, 3, 4}));
  EXPECT_EQ(b.payload.size(), 64u);
  ASSERT_EQ(verdict("valid_second.bin", &b), BlockFileStatus::Ok);
  EXPECT_EQ(b.t0, 4);
  EXPECT_EQ(verdict("truncated.bin"), BlockFileStatus::Truncated);
  EXPECT_EQ(verdict("header_only.bin"), BlockFileStatus::Truncated);
  EXPECT_EQ(verdict("flipped_payload.bin"), BlockFileStatus::Corrupt);
  EXPECT_EQ(verdict("version2.bin"), BlockFileStatus::BadVersion);
  EXPECT_EQ(verdict("reserved_set.bin"), BlockFileStatus::Corrupt);
  EXPECT_EQ(verdict("trailing.bin"), BlockFileStatus::Corrupt);
  EXPECT_EQ(verdict("huge_count.bin"), BlockFileStatus::Corrupt);
  EXPECT_EQ(verdict("empty.bin"), BlockFileStatus::Truncated);
  BlockHash other = fp;
  other[0] ^= 1;
  std::ifstream f(fs::path(TQ_SOURCE_DIR) / "tests/fuzz/corpus/kv_block_file/valid_root.bin",
                  std::ios::binary);
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_EQ(parse_block_file(bytes, other, b), BlockFileStatus::Incompatible);
}

TEST(PrefixCache, RestoresTheLongestCachedPrefixInWholeBlocks) {
  auto pc = PrefixCache::create(cfg(), "m");
  auto prompt = tokens(5 * B + 3, 1);
  prefill(*pc, prompt, 100);
  EXPECT_EQ(pc->stats().ram_blocks, 5);
  // Same prompt: everything but what max_tokens forbids (the engine passes n_prompt - 1).
  {
    PrefixLease l = pc->acquire(prompt, int64_t(prompt.size()) - 1);
    EXPECT_EQ(l.restored_tokens(), 5 * B);
  }
  {
    PrefixLease l = pc->acquire(std::span(prompt).first(5 * B), 5 * B - 1);
    EXPECT_EQ(l.restored_tokens(), 4 * B);
    EXPECT_EQ(l.restored[3]->payload, payload(100, uint8_t(3 * B)));
  }
  // A prompt diverging inside block 2 restores blocks 0 and 1 only.
  auto other = prompt;
  other[size_t(2 * B + 4)] += 1;
  {
    PrefixLease l = pc->acquire(other, int64_t(other.size()) - 1);
    EXPECT_EQ(l.restored_tokens(), 2 * B);
    EXPECT_EQ(l.tip_tokens, 2 * B);
  }
  // A different first block: a miss, even though later blocks' tokens are equal.
  auto shifted = prompt;
  shifted[0] += 1;
  EXPECT_EQ(pc->acquire(shifted, 100).restored_tokens(), 0);
  PrefixStats s = pc->stats();
  EXPECT_EQ(s.hits, 3);
  EXPECT_EQ(s.misses, 2);  // the first prefill's lookup, and the shifted one
  EXPECT_EQ(s.restored_tokens, 11 * B);
}

TEST(PrefixCache, RamBoundHoldsAndIdleBlocksGoLeastRecentlyUsedFirst) {
  const size_t pb = 1000;
  const uint64_t block_bytes = pb + B * 4 + 128;
  auto pc = PrefixCache::create(cfg(4 * block_bytes), "m");
  auto p1 = tokens(2 * B, 1), p2 = tokens(2 * B, 2), p3 = tokens(2 * B, 3);
  prefill(*pc, p1, pb);
  prefill(*pc, p2, pb);
  EXPECT_EQ(pc->stats().ram_bytes, 4 * block_bytes);
  pc->acquire(p1, 2 * B);  // p1 becomes the most recently used
  prefill(*pc, p3, pb);    // evicts p2's blocks, not p1's
  PrefixStats s = pc->stats();
  EXPECT_LE(s.ram_bytes, 4 * block_bytes);
  EXPECT_EQ(s.ram_evicted_blocks, 2);
  EXPECT_EQ(pc->acquire(p1, 2 * B).restored_tokens(), 2 * B);
  EXPECT_EQ(pc->acquire(p2, 2 * B).restored_tokens(), 0);
  // Many more prompts: the bound holds throughout.
  for (int i = 10; i < 40; ++i) {
    prefill(*pc, tokens(3 * B, i), pb);
    ASSERT_LE(pc->stats().ram_bytes, 4 * block_bytes);
  }
}

TEST(PrefixCache, PinnedBlocksAreNeverEvicted) {
  const size_t pb = 1000;
  const uint64_t block_bytes = pb + B * 4 + 128;
  auto pc = PrefixCache::create(cfg(3 * block_bytes), "m");
  auto p1 = tokens(2 * B, 1);
  prefill(*pc, p1, pb);
  PrefixLease held = pc->acquire(p1, 2 * B);
  ASSERT_EQ(held.restored_tokens(), 2 * B);
  EXPECT_EQ(pc->stats().ram_pinned_bytes, 2 * block_bytes);
  // The guard asks for everything: only idle blocks go (none are idle).
  EXPECT_EQ(pc->evict_idle(1 << 30), 0u);
  // New blocks find one free slot; the rest are not kept, and the pinned ones stay.
  prefill(*pc, tokens(3 * B, 2), pb);
  EXPECT_LE(pc->stats().ram_bytes, 3 * block_bytes);
  EXPECT_EQ(pc->acquire(p1, 2 * B).restored_tokens(), 2 * B);
  held.release();
  EXPECT_EQ(pc->stats().ram_pinned_bytes, 0u);
  uint64_t freed = pc->evict_idle(1);
  EXPECT_EQ(freed, block_bytes);  // one block is enough for one byte
  EXPECT_EQ(pc->stats().idle_evicted_bytes, block_bytes);
  EXPECT_GT(pc->evict_idle(1 << 30), 0u);
  EXPECT_EQ(pc->stats().ram_bytes, 0u);
}

TEST(PrefixSsd, BlocksSurviveARestartAndVerify) {
  fs::path dir = temp_dir("restart");
  auto c = ssd_cfg(dir);
  auto prompt = tokens(3 * B + 1, 5);
  {
    auto pc = PrefixCache::create(c, "m");
    prefill(*pc, prompt, 5000);
    pc->flush_writes();
    EXPECT_EQ(pc->stats().ssd_blocks, 3);
    EXPECT_EQ(pc->stats().writer.written, 3);
  }
  auto pc = PrefixCache::create(c, "m");
  EXPECT_EQ(pc->ssd()->scan_report().kept, 3);
  PrefixLease l = pc->acquire(prompt, int64_t(prompt.size()) - 1);
  ASSERT_EQ(l.restored_tokens(), 3 * B);
  EXPECT_EQ(pc->stats().ssd_hit_blocks, 3);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(l.restored[size_t(i)]->payload, payload(5000, uint8_t(i * B)));
    EXPECT_EQ(l.restored[size_t(i)]->t0, i * B);
  }
  fs::remove_all(dir);
}

TEST(PrefixSsd, DamagedFilesAreRemovedAndNeverServed) {
  fs::path dir = temp_dir("damaged");
  auto c = ssd_cfg(dir);
  auto prompt = tokens(4 * B, 6);
  std::vector<fs::path> files;
  BlockHash keys[4];
  {
    auto pc = PrefixCache::create(c, "m");
    prefill(*pc, prompt, 3000);
    pc->flush_writes();
    BlockHash parent{};
    for (int i = 0; i < 4; ++i) {
      keys[i] = chain_hash(pc->fingerprint(), parent,
                           std::span(prompt).subspan(size_t(i * B), size_t(B)));
      parent = keys[i];
      files.push_back(pc->ssd()->path_of(keys[i]));
      ASSERT_TRUE(fs::exists(files.back()));
    }
  }
  // Block 3: truncated (a partial write that was renamed by a broken filesystem).
  fs::resize_file(files[3], fs::file_size(files[3]) - 10);
  // A leftover temp file of an interrupted write, and somebody else's file.
  std::ofstream(dir / (block_hash_hex(keys[0]) + ".tqb.tmp")) << "partial";
  std::ofstream(dir / "README") << "not a block";
  // Block 1: one flipped byte in the payload (found when read, not at the scan).
  {
    std::fstream f(files[1], std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-100, std::ios::end);
    char ch;
    f.seekg(-100, std::ios::end);
    f.get(ch);
    f.seekp(-100, std::ios::end);
    f.put(char(ch ^ 0x20));
  }
  auto pc = PrefixCache::create(c, "m");
  EXPECT_EQ(pc->ssd()->scan_report().removed, 2);  // the truncated file and the temp file
  EXPECT_FALSE(fs::exists(files[3]));
  EXPECT_TRUE(fs::exists(dir / "README"));
  PrefixLease l = pc->acquire(prompt, 4 * B);
  EXPECT_EQ(l.restored_tokens(), B);  // block 0 only: block 1 is rejected
  EXPECT_FALSE(fs::exists(files[1]));
  EXPECT_EQ(pc->stats().ssd_rejected, 3);
  // Recomputed and written again, it is served again.
  l.release();
  prefill(*pc, prompt, 3000);
  pc->flush_writes();
  EXPECT_TRUE(fs::exists(files[1]));
  auto pc2 = PrefixCache::create(c, "m");
  EXPECT_EQ(pc2->acquire(prompt, 4 * B).restored_tokens(), 4 * B);
  fs::remove_all(dir);
}

TEST(PrefixSsd, AnotherModelsFilesAreIncompatible) {
  fs::path dir = temp_dir("incompatible");
  auto c = ssd_cfg(dir);
  auto prompt = tokens(2 * B, 7);
  {
    auto pc = PrefixCache::create(c, "model A");
    prefill(*pc, prompt, 200);
    pc->flush_writes();
  }
  auto pc = PrefixCache::create(c, "model B");
  EXPECT_EQ(pc->ssd()->scan_report().removed, 2);
  EXPECT_EQ(pc->acquire(prompt, 2 * B).restored_tokens(), 0);
  fs::remove_all(dir);
}

TEST(PrefixSsd, DiskBoundHolds) {
  fs::path dir = temp_dir("bound");
  auto c = ssd_cfg(dir);
  const uint64_t file_bytes = kBlockFileHeader + B * 4 + 2000;
  c.disk_bytes = 5 * file_bytes;
  auto pc = PrefixCache::create(c, "m");
  for (int i = 0; i < 8; ++i) {
    prefill(*pc, tokens(2 * B, 100 + i), 2000);
    pc->flush_writes();
    ASSERT_LE(pc->stats().ssd_bytes, c.disk_bytes);
  }
  uint64_t on_disk = 0;
  for (const auto& e : fs::directory_iterator(dir)) on_disk += e.file_size();
  EXPECT_LE(on_disk, c.disk_bytes);
  EXPECT_EQ(pc->stats().ssd_blocks, 5);
  fs::remove_all(dir);
}

TEST(PrefixSsd, WriterQueueBoundHoldsUnderABurst) {
  fs::path dir = temp_dir("burst");
  auto c = ssd_cfg(dir, 64 << 20);
  const size_t pb = 100000;
  const uint64_t block_bytes = pb + B * 4 + 128;
  c.writer_queue_bytes = 5 * block_bytes / 2;  // room for two blocks
  auto pc = PrefixCache::create(c, "m");
  pc->writer()->pause();
  for (int i = 0; i < 10; ++i) {
    prefill(*pc, tokens(B, 200 + i), pb);
    ASSERT_LE(pc->stats().writer.queued_bytes, c.writer_queue_bytes);
  }
  SsdWriterStats w = pc->stats().writer;
  EXPECT_EQ(w.queued_blocks, 2);
  EXPECT_EQ(w.dropped, 8);
  EXPECT_LE(w.peak_queued_bytes, c.writer_queue_bytes);
  pc->writer()->resume();
  pc->flush_writes();
  w = pc->stats().writer;
  EXPECT_EQ(w.written, 2);
  EXPECT_EQ(w.queued_bytes, 0u);
  EXPECT_EQ(pc->stats().ssd_blocks, 2);
  // Dropped writes cost nothing but the disk copy: the RAM tier still serves them.
  EXPECT_EQ(pc->acquire(tokens(B, 209), B).restored_tokens(), B);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tq
