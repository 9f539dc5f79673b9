// Fuzz target: Tokenizer::from_json on arbitrary bytes; when a tokenizer loads, encode and
// decode a fixed multilingual text and stream it back. Loading may fail only with tq::Error;
// any other exception, crash or hang is a bug.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > (1u << 20)) return 0;  // the parser is linear; huge inputs only slow the fuzzer
  const std::string json(reinterpret_cast<const char*>(data), size);
  try {
    const tq::Tokenizer tok = tq::Tokenizer::from_json(json);
    static const std::string kText =
        "Hello, world! It's 2024: 12345 <s> </s> [CLS] <|endoftext|>\n\t  caf\xC3\xA9 "
        "\xE6\x97\xA5\xE6\x9C\xAC \xF0\x9F\x98\x80 \xE2\x96\x81x ##y";
    for (bool special : {false, true}) {
      const std::vector<int32_t> ids = tok.encode(kText, special);
      (void)tok.decode(ids, false);
      (void)tok.decode(ids, true);
      tq::StreamDetokenizer stream(tok, special);
      for (int32_t id : ids) (void)stream.push(id);
      (void)stream.finish();
    }
    (void)tok.token_to_id("a");
    (void)tok.id_to_token(0);
    (void)tok.is_special(0);
  } catch (const tq::Error&) {
    // Rejected input: the expected outcome for most mutations.
  }
  return 0;
}
