// Fuzz target: encode arbitrary bytes (invalid UTF-8 included) with a real tokenizer, then
// decode and stream-decode the ids. Invalid UTF-8 is defined to be replaced by U+FFFD per
// maximal subpart (Rust's from_utf8_lossy), so encoding never fails; the decoded text must be
// valid UTF-8 and the streamed chunks must concatenate to the full decode.
// The tokenizer comes from $TQ_FUZZ_TOKENIZER, else models/micro-qwen3/tokenizer.json relative
// to the working directory; without either the target does nothing.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace {

const tq::Tokenizer* load_tokenizer() {
  const char* env = std::getenv("TQ_FUZZ_TOKENIZER");
  const std::filesystem::path path = env ? env : "models/micro-qwen3/tokenizer.json";
  if (!std::filesystem::exists(path)) return nullptr;
  return new tq::Tokenizer(tq::Tokenizer::from_file(path));  // lives for the whole run
}

bool valid_utf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto b = static_cast<unsigned char>(s[i]);
    const size_t n = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    i += n;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const tq::Tokenizer* tok = load_tokenizer();
  if (!tok || size > (1u << 16)) return 0;
  const std::string text(reinterpret_cast<const char*>(data), size);
  const bool special = size > 0 && (data[0] & 1);
  const std::vector<int32_t> ids = tok->encode(text, special);
  const std::string decoded = tok->decode(ids);
  if (!valid_utf8(decoded)) {
    std::fprintf(stderr, "decode produced invalid UTF-8\n");
    std::abort();
  }
  tq::StreamDetokenizer stream(*tok);
  std::string streamed;
  for (int32_t id : ids) streamed += stream.push(id);
  streamed += stream.finish();
  if (streamed != decoded) {
    std::fprintf(stderr, "streamed text differs from decode\n");
    std::abort();
  }
  return 0;
}
