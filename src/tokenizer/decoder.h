// Decoder: turns the token strings of a sequence back into text (ByteLevel, Metaspace,
// WordPiece, ByteFallback, Fuse, Strip, Replace, BPEDecoder, Sequence).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "tokenizer/json_fields.h"

namespace tq::tok {

class Decoder {
 public:
  virtual ~Decoder() = default;
  // Rewrites the token list in place; the decoded text is the concatenation of the result.
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
  // True when the chain merges runs of <0xXX> tokens (a streaming decoder must not cut them).
  virtual bool groups_bytes() const { return false; }
};

std::unique_ptr<Decoder> make_decoder(const Json& j);

}  // namespace tq::tok
