// PreTokenizer: splits normalized text into the pieces the model tokenizes independently
// (ByteLevel, Split, Digits, Punctuation, Whitespace, WhitespaceSplit, BertPreTokenizer,
// Metaspace, CharDelimiterSplit, Sequence), plus the split-behaviour machinery they share.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/json_fields.h"

namespace tq::tok {

// One piece of the input on its way through the pipeline.
struct Piece {
  std::string text;
  int32_t id = -1;        // >= 0 once an added token claimed the piece: later stages skip it
  bool at_start = false;  // starts at byte 0 of the original input (Metaspace "first" scheme)
};

enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };
SplitBehavior parse_split_behavior(const std::string& name);

using Ranges = std::vector<std::pair<size_t, size_t>>;
// Byte ranges [start, end) of the parts of `s` that remain after splitting on `matches`
// (sorted, non-overlapping) with `behavior`; `invert` swaps matched and unmatched parts.
Ranges split_ranges(std::string_view s, const Ranges& matches, SplitBehavior behavior,
                    bool invert = false);
// Each character satisfying pred, as a one-character match.
Ranges char_matches(std::string_view s, const std::function<bool(char32_t)>& pred);
// Replaces every unclaimed piece by fn(piece) minus empty results, keeping claimed pieces.
void split_pieces(std::vector<Piece>& pieces,
                  const std::function<void(const Piece&, std::vector<Piece>&)>& fn);
// Appends the non-empty sub-pieces of `p` for `ranges`.
void push_ranges(const Piece& p, const Ranges& ranges, std::vector<Piece>& out);

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  virtual void pre_tokenize(std::vector<Piece>& pieces) const = 0;
};

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const Json& j);

}  // namespace tq::tok
