// Prefix-cache blocks: their chained keys, the immutable CachedBlock, and the self-describing
// block file of the SSD tier (encode, and a parser of untrusted bytes that never throws).
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace tq {

using BlockHash = std::array<uint8_t, 32>;  // SHA-256
std::string block_hash_hex(const BlockHash& h);

// The key of a block: SHA-256 over a domain tag, the cache fingerprint (model identity and
// cache format), the parent block's key (all zero for the first block) and the block's token
// ids (i32 little-endian). A key therefore names the whole prefix up to the block's end.
BlockHash chain_hash(const BlockHash& fingerprint, const BlockHash& parent,
                     std::span<const int32_t> tokens);

// One cached block: immutable once shared between the tiers and the sequences restoring it.
struct CachedBlock {
  BlockHash hash{};
  BlockHash parent{};
  int64_t t0 = 0;                // tokens before the block (its position in the prefix)
  std::vector<int32_t> tokens;   // the block's own tokens
  std::vector<uint8_t> payload;  // kv/block_codec.h
  // Bytes this block costs anywhere it is held (payload, tokens and bookkeeping).
  uint64_t bytes() const { return payload.size() + tokens.size() * 4 + 128; }
};
using BlockPtr = std::shared_ptr<const CachedBlock>;

// Block file, version 1 (little-endian):
//    0  8  magic "TQPBLK\0\1"        8  4  version (1)           12  4  header bytes (200)
//   16 32  fingerprint              48 32  block key              80 32  parent key
//  112  8  t0                      120  8  token count n         128  8  payload bytes p
//  136 32  SHA-256 of bytes [0, 136) and [168, end)              168 32  reserved, zero
//  200 4n  token ids, then p payload bytes; the file is exactly 200 + 4n + p bytes.
constexpr uint32_t kBlockFileVersion = 1;
constexpr size_t kBlockFileHeader = 200;
std::vector<uint8_t> encode_block_file(const BlockHash& fingerprint, const CachedBlock& b);

enum class BlockFileStatus : uint8_t { Ok, Truncated, BadMagic, BadVersion, Incompatible, Corrupt };
const char* block_file_status_name(BlockFileStatus s);

// What a header says, checked without reading the body (the startup scan).
struct BlockFileHeader {
  BlockHash fingerprint{}, hash{}, parent{};
  int64_t t0 = 0, n_tokens = 0;
  uint64_t payload_bytes = 0;
  uint64_t file_bytes() const { return kBlockFileHeader + uint64_t(n_tokens) * 4 + payload_bytes; }
};
// Parses and checks a header: magic, version, sizes within limits, reserved bytes, and the
// fingerprint against `expected`. `file_size` is the file's length (a short file is Truncated).
BlockFileStatus parse_block_header(std::span<const uint8_t> head, uint64_t file_size,
                                   const BlockHash& expected, BlockFileHeader& out);
// Parses a whole file: the header checks, the exact size, the checksum, and the block key
// recomputed from fingerprint, parent and tokens. Only Ok fills `out`.
BlockFileStatus parse_block_file(std::span<const uint8_t> bytes, const BlockHash& expected,
                                 CachedBlock& out);

}  // namespace tq
