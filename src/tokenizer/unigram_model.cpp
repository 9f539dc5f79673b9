// Unigram model (T5, ALBERT, XLM-R): Viterbi over a piece lattice built from a byte trie, with
// SentencePiece's unknown-character penalty, fused unknown runs and optional byte fallback.
#include <limits>

#include "tokenizer/model.h"
#include "tokenizer/unicode.h"

namespace tq::tok {

namespace {

// A byte trie stored as one hash map from (node, byte) to child node.
class ByteTrie {
 public:
  void insert(std::string_view key, int32_t value) {
    int32_t node = 0;
    for (unsigned char c : key) {
      const uint64_t k = (static_cast<uint64_t>(node) << 8) | c;
      auto it = edges_.find(k);
      if (it == edges_.end()) {
        it = edges_.emplace(k, static_cast<int32_t>(values_.size())).first;
        values_.push_back(-1);
      }
      node = it->second;
    }
    if (values_[node] < 0) values_[node] = value;
  }
  // Calls fn(length, value) for every key that is a prefix of s, shortest first.
  template <typename Fn>
  void prefixes(std::string_view s, Fn&& fn) const {
    int32_t node = 0;
    for (size_t i = 0; i < s.size(); ++i) {
      auto it = edges_.find((static_cast<uint64_t>(node) << 8) | static_cast<unsigned char>(s[i]));
      if (it == edges_.end()) return;
      node = it->second;
      if (values_[node] >= 0) fn(i + 1, values_[node]);
    }
  }

 private:
  std::unordered_map<uint64_t, int32_t> edges_;
  std::vector<int32_t> values_{-1};  // node 0 is the root
};

class UnigramModel : public Model {
 public:
  explicit UnigramModel(const Json& j);
  void tokenize(std::string_view word, std::vector<int32_t>& out) const override;

 private:
  std::vector<double> scores_;
  ByteTrie trie_;
  std::optional<int32_t> unk_id_;
  bool byte_fallback_ = false;
  double min_score_ = std::numeric_limits<double>::infinity();
};

UnigramModel::UnigramModel(const Json& j) {
  const Json& vocab = require(j, "vocab");
  if (!vocab.is_array()) fail("Unigram vocab must be an array of [piece, score]");
  for (size_t id = 0; id < vocab.size(); ++id) {
    const Json& e = vocab[id];
    if (!e.is_array() || e.size() != 2 || !e[0].is_string() || !e[1].is_number())
      fail("Unigram vocab entry #{} must be [piece, score]", id);
    const auto& piece = e[0].get_ref<const std::string&>();
    const double score = e[1].get<double>();
    vocab_.add(piece, static_cast<int32_t>(id));
    scores_.push_back(score);
    min_score_ = std::min(min_score_, score);
    if (!piece.empty()) trie_.insert(piece, static_cast<int32_t>(id));
  }
  if (const Json* u = field(j, "unk_id")) {
    const int32_t id = to_id(*u, "Unigram unk_id");
    if (static_cast<size_t>(id) >= scores_.size()) fail("Unigram unk_id {} is out of the vocabulary", id);
    unk_id_ = id;
  }
  byte_fallback_ = get_bool(j, "byte_fallback", false);
}

void UnigramModel::tokenize(std::string_view s, std::vector<int32_t>& out) const {
  // SentencePiece scores an unknown character below every piece (kUnkPenalty = 10).
  const double unk_score = min_score_ - 10.0;
  struct Node {
    int32_t id = -1;
    double score = 0;
    int64_t start = -1;  // -1: not reached yet
  };
  std::vector<Node> best(s.size() + 1);
  best[0].start = 0;
  size_t pos = 0;
  while (pos < s.size()) {
    const double here = best[pos].score;
    const size_t char_len = std::min(utf8_len(static_cast<unsigned char>(s[pos])), s.size() - pos);
    bool has_single = false;
    trie_.prefixes(s.substr(pos), [&](size_t len, int32_t id) {
      Node& t = best[pos + len];
      const double cand = here + scores_[id];
      if (t.start < 0 || cand > t.score) {
        t.score = cand;
        t.start = static_cast<int64_t>(pos);
        t.id = id;
      }
      if (len == char_len) has_single = true;
    });
    if (!has_single) {
      if (!unk_id_) fail("Unigram model has no unk_id for an unknown character");
      Node& t = best[pos + char_len];
      const double cand = here + unk_score;
      if (t.start < 0 || cand > t.score) {
        t.score = cand;
        t.start = static_cast<int64_t>(pos);
        t.id = *unk_id_;
      }
    }
    pos += char_len;
  }
  // Walk back, fusing consecutive unknown pieces into one.
  std::vector<std::pair<size_t, size_t>> spans;
  std::vector<bool> is_unk;
  size_t end = s.size();
  while (end > 0) {
    const Node& n = best[end];
    const auto start = static_cast<size_t>(n.start);
    const bool unk = unk_id_ && n.id == *unk_id_;
    if (unk && !is_unk.empty() && is_unk.back()) spans.back().first = start;
    else spans.emplace_back(start, end), is_unk.push_back(unk);
    end = start;
  }
  for (size_t k = spans.size(); k-- > 0;) {
    const std::string_view piece = s.substr(spans[k].first, spans[k].second - spans[k].first);
    if (auto id = vocab_.find(piece)) {
      out.push_back(*id);
      continue;
    }
    if (byte_fallback_) {
      std::vector<int32_t> bytes;
      for (unsigned char b : piece)
        if (auto id = vocab_.find(fmt::format("<0x{:02X}>", b))) bytes.push_back(*id);
        else break;
      if (bytes.size() == piece.size()) {
        out.insert(out.end(), bytes.begin(), bytes.end());
        continue;
      }
    }
    if (!unk_id_) fail("Unigram model has no unk_id for '{}'", std::string(piece));
    out.push_back(*unk_id_);
  }
}

}  // namespace

std::unique_ptr<Model> make_unigram_model(const Json& j) { return std::make_unique<UnigramModel>(j); }

}  // namespace tq::tok
