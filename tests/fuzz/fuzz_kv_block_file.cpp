// Fuzz target for prefix-cache block files (kv/block_file): arbitrary bytes must be refused with
// a status, never crash; whatever parses must re-encode to exactly the same bytes.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "kv/block_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tq;
  // The fingerprint the reader expects: the one the bytes claim (so the fuzzer gets past that
  // check), and a fixed one that almost never matches.
  BlockHash claimed{}, fixed{};
  if (size >= 48) std::memcpy(claimed.data(), data + 16, 32);
  for (const BlockHash& fp : {claimed, fixed}) {
    BlockFileHeader h;
    BlockFileStatus hs = parse_block_header({data, size}, size, fp, h);
    CachedBlock b;
    BlockFileStatus st = parse_block_file({data, size}, fp, b);
    if (st == BlockFileStatus::Ok) {
      if (hs != BlockFileStatus::Ok) std::abort();  // a valid file has a valid header
      std::vector<uint8_t> again = encode_block_file(fp, b);
      if (again.size() != size || std::memcmp(again.data(), data, size) != 0) std::abort();
      if (chain_hash(fp, b.parent, b.tokens) != b.hash) std::abort();
    }
    (void)block_file_status_name(st);
  }
  return 0;
}
