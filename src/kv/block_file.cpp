// Block keys and block files: chain hashing, encoding, and the checked parser.
#include "kv/block_file.h"

#include <algorithm>
#include <cstring>

#include "io/sha256.h"
#include "kv/block_bytes.h"

namespace tq {

namespace {

constexpr uint8_t kMagic[8] = {'T', 'Q', 'P', 'B', 'L', 'K', 0, 1};
constexpr size_t kChecksumAt = 136, kReservedAt = 168;
constexpr int64_t kMaxTokens = 1 << 20;
constexpr uint64_t kMaxPayload = uint64_t(1) << 36;

BlockHash checksum(std::span<const uint8_t> file) {
  Sha256 h;
  h.update(file.data(), kChecksumAt);
  h.update(file.data() + kReservedAt, file.size() - kReservedAt);
  return h.finish();
}

}  // namespace

std::string block_hash_hex(const BlockHash& h) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (uint8_t b : h) {
    s += digits[b >> 4];
    s += digits[b & 15];
  }
  return s;
}

BlockHash chain_hash(const BlockHash& fingerprint, const BlockHash& parent,
                     std::span<const int32_t> tokens) {
  Sha256 h;
  h.update("tqserve prefix block v1");
  h.update(fingerprint.data(), fingerprint.size());
  h.update(parent.data(), parent.size());
  const uint64_t n = tokens.size();
  h.update(&n, sizeof n);
  h.update(tokens.data(), tokens.size_bytes());
  return h.finish();
}

const char* block_file_status_name(BlockFileStatus s) {
  switch (s) {
    case BlockFileStatus::Ok: return "ok";
    case BlockFileStatus::Truncated: return "truncated";
    case BlockFileStatus::BadMagic: return "bad magic";
    case BlockFileStatus::BadVersion: return "unknown version";
    case BlockFileStatus::Incompatible: return "another model or cache format";
    case BlockFileStatus::Corrupt: return "corrupt";
  }
  return "?";
}

std::vector<uint8_t> encode_block_file(const BlockHash& fingerprint, const CachedBlock& b) {
  std::vector<uint8_t> out;
  out.reserve(kBlockFileHeader + b.tokens.size() * 4 + b.payload.size());
  put_bytes(out, kMagic, sizeof kMagic);
  put_value<uint32_t>(out, kBlockFileVersion);
  put_value<uint32_t>(out, uint32_t(kBlockFileHeader));
  put_bytes(out, fingerprint.data(), 32);
  put_bytes(out, b.hash.data(), 32);
  put_bytes(out, b.parent.data(), 32);
  put_value<int64_t>(out, b.t0);
  put_value<int64_t>(out, int64_t(b.tokens.size()));
  put_value<uint64_t>(out, b.payload.size());
  out.resize(kBlockFileHeader, 0);  // checksum and reserved bytes, filled below
  put_bytes(out, b.tokens.data(), b.tokens.size() * 4);
  put_bytes(out, b.payload.data(), b.payload.size());
  BlockHash sum = checksum(out);
  std::memcpy(out.data() + kChecksumAt, sum.data(), sum.size());
  return out;
}

BlockFileStatus parse_block_header(std::span<const uint8_t> head, uint64_t file_size,
                                   const BlockHash& expected, BlockFileHeader& out) {
  if (head.size() < kBlockFileHeader || file_size < kBlockFileHeader)
    return BlockFileStatus::Truncated;
  if (std::memcmp(head.data(), kMagic, sizeof kMagic) != 0) return BlockFileStatus::BadMagic;
  ByteSource src(head.subspan(8, kBlockFileHeader - 8));
  uint32_t version = 0, header = 0;
  src.read(version);
  src.read(header);
  if (version != kBlockFileVersion || header != kBlockFileHeader) return BlockFileStatus::BadVersion;
  BlockFileHeader h;
  src.read(h.fingerprint);
  src.read(h.hash);
  src.read(h.parent);
  src.read(h.t0);
  src.read(h.n_tokens);
  src.read(h.payload_bytes);
  if (!src.ok()) return BlockFileStatus::Truncated;
  const uint8_t* reserved = head.data() + kReservedAt;
  if (std::any_of(reserved, reserved + 32, [](uint8_t b) { return b != 0; }))
    return BlockFileStatus::Corrupt;
  if (h.n_tokens < 1 || h.n_tokens > kMaxTokens || h.t0 < 0 || h.t0 > (int64_t(1) << 40) ||
      h.t0 % h.n_tokens != 0 || h.payload_bytes > kMaxPayload)
    return BlockFileStatus::Corrupt;
  if (h.fingerprint != expected) return BlockFileStatus::Incompatible;
  if (file_size < h.file_bytes()) return BlockFileStatus::Truncated;
  if (file_size > h.file_bytes()) return BlockFileStatus::Corrupt;
  out = h;
  return BlockFileStatus::Ok;
}

BlockFileStatus parse_block_file(std::span<const uint8_t> bytes, const BlockHash& expected,
                                 CachedBlock& out) {
  BlockFileHeader h;
  BlockFileStatus st = parse_block_header(bytes, bytes.size(), expected, h);
  if (st != BlockFileStatus::Ok) return st;
  BlockHash stored;
  std::memcpy(stored.data(), bytes.data() + kChecksumAt, stored.size());
  if (checksum(bytes) != stored) return BlockFileStatus::Corrupt;
  CachedBlock b;
  b.hash = h.hash;
  b.parent = h.parent;
  b.t0 = h.t0;
  b.tokens.resize(size_t(h.n_tokens));
  std::memcpy(b.tokens.data(), bytes.data() + kBlockFileHeader, size_t(h.n_tokens) * 4);
  const uint8_t* payload = bytes.data() + kBlockFileHeader + size_t(h.n_tokens) * 4;
  b.payload.assign(payload, payload + h.payload_bytes);
  // The name must be earned: a block whose key does not follow from its contents is refused.
  if (chain_hash(expected, b.parent, b.tokens) != b.hash) return BlockFileStatus::Corrupt;
  out = std::move(b);
  return BlockFileStatus::Ok;
}

}  // namespace tq
