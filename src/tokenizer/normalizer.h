// Normalizer: the string-to-string first stage of encoding (NFC/NFKC, Lowercase, Replace,
// Prepend, Strip, StripAccents, BertNormalizer, Precompiled charsmap, ByteLevel, Sequence).
#pragma once
#include <memory>
#include <string>

#include "tokenizer/json_fields.h"

namespace tq::tok {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  // Normalizes s in place. s is valid UTF-8 and stays so.
  virtual void normalize(std::string& s) const = 0;
};

// Builds a normalizer from its tokenizer.json object; throws tq::Error naming an unknown type.
std::unique_ptr<Normalizer> make_normalizer(const Json& j);

}  // namespace tq::tok
