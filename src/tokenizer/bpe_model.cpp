// BPE model: byte-level (GPT-2/Qwen/Llama-3) and SentencePiece-style (byte_fallback, <0xXX>)
// merging with a rank hash map and a min-heap over a linked list of symbols, plus a word cache.
// Also home of Vocab and make_model, the shared model plumbing.
#include <array>
#include <mutex>
#include <queue>

#include "tokenizer/model.h"
#include "tokenizer/unicode.h"

namespace tq::tok {

void Vocab::add(std::string token, int32_t id) {
  // Bound the id so a hostile file cannot make us allocate gigabytes for one token.
  if (static_cast<size_t>(id) > 2 * to_id_.size() + 65536)
    fail("token id {} is far beyond the vocabulary size", id);
  if (!to_id_.emplace(token, id).second) return;
  if (static_cast<size_t>(id) >= to_token_.size()) {
    to_token_.resize(id + 1);
    has_.resize(id + 1, false);
  }
  to_token_[id] = std::move(token);
  has_[id] = true;
}

namespace {

struct PairHash {
  size_t operator()(uint64_t x) const noexcept {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return static_cast<size_t>(x);
  }
};

struct MergeInfo {
  int32_t rank;
  int32_t new_id;
};

// A bounded, sharded cache of word -> ids, so concurrent encodes rarely contend on one lock.
class WordCache {
 public:
  bool get(std::string_view word, std::vector<int32_t>& out) const {
    auto& shard = shards_[StringHash{}(word) % kShards];
    std::lock_guard lock(shard.mu);
    auto it = shard.map.find(word);
    if (it == shard.map.end()) return false;
    out.insert(out.end(), it->second.begin(), it->second.end());
    return true;
  }
  void put(std::string_view word, const int32_t* ids, size_t n) const {
    auto& shard = shards_[StringHash{}(word) % kShards];
    std::lock_guard lock(shard.mu);
    if (shard.map.size() >= kPerShard) shard.map.clear();  // crude but bounded
    shard.map.emplace(std::string(word), std::vector<int32_t>(ids, ids + n));
  }

 private:
  static constexpr size_t kShards = 16, kPerShard = 4096;
  struct Shard {
    std::mutex mu;
    std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> map;
  };
  mutable std::array<Shard, kShards> shards_;
};

class BpeModel : public Model {
 public:
  explicit BpeModel(const Json& j);
  void tokenize(std::string_view word, std::vector<int32_t>& out) const override;

 private:
  void merge_word(std::string_view word, std::vector<int32_t>& out) const;
  const MergeInfo* find_merge(int32_t a, int32_t b) const {
    auto it = merges_.find((static_cast<uint64_t>(a) << 32) | static_cast<uint32_t>(b));
    return it == merges_.end() ? nullptr : &it->second;
  }

  std::unordered_map<uint64_t, MergeInfo, PairHash> merges_;
  std::optional<int32_t> unk_id_;
  std::string prefix_, suffix_;
  bool fuse_unk_ = false, byte_fallback_ = false, ignore_merges_ = false;
  std::array<int32_t, 256> byte_ids_{};  // id of "<0xXX>" per byte, -1 when absent
  WordCache cache_;
};

BpeModel::BpeModel(const Json& j) {
  const Json& vocab = require(j, "vocab");
  if (!vocab.is_object()) fail("BPE vocab must be an object");
  for (auto it = vocab.begin(); it != vocab.end(); ++it)
    vocab_.add(it.key(), to_id(it.value(), "BPE vocab"));
  if (const Json* d = field(j, "dropout")) {
    if (!d->is_number() || d->get<double>() > 0.0) fail("BPE dropout is not supported");
  }
  prefix_ = get_string(j, "continuing_subword_prefix");
  suffix_ = get_string(j, "end_of_word_suffix");
  fuse_unk_ = get_bool(j, "fuse_unk", false);
  byte_fallback_ = get_bool(j, "byte_fallback", false);
  ignore_merges_ = get_bool(j, "ignore_merges", false);
  if (auto unk = get_opt_string(j, "unk_token")) {
    unk_id_ = vocab_.find(*unk);
    if (!unk_id_) fail("BPE unk_token '{}' is not in the vocabulary", *unk);
  }
  for (int b = 0; b < 256; ++b) {
    const auto id = vocab_.find(fmt::format("<0x{:02X}>", b));
    byte_ids_[b] = id ? *id : -1;
  }
  const Json* merges = field(j, "merges");
  if (!merges) return;
  if (!merges->is_array()) fail("BPE merges must be an array");
  merges_.reserve(merges->size() * 2);
  int32_t rank = 0;
  for (const auto& m : *merges) {
    std::string a, b;
    if (m.is_string()) {
      const auto& s = m.get_ref<const std::string&>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos) fail("BPE merge '{}' has no space separator", s);
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      a = m[0].get<std::string>();
      b = m[1].get<std::string>();
    } else {
      fail("BPE merge #{} must be \"a b\" or [a, b]", rank);
    }
    const auto ia = vocab_.find(a), ib = vocab_.find(b);
    if (!ia || !ib) fail("BPE merge #{} ('{}' '{}') uses a token missing from the vocabulary", rank, a, b);
    // With a continuing-subword prefix the right part loses its prefix when merged.
    const std::string joined =
        a + (!prefix_.empty() && b.compare(0, prefix_.size(), prefix_) == 0 ? b.substr(prefix_.size()) : b);
    const auto inew = vocab_.find(joined);
    if (!inew) fail("BPE merge #{} result '{}' is not in the vocabulary", rank, joined);
    merges_.emplace((static_cast<uint64_t>(*ia) << 32) | static_cast<uint32_t>(*ib), MergeInfo{rank, *inew});
    ++rank;
  }
}

void BpeModel::tokenize(std::string_view word, std::vector<int32_t>& out) const {
  if (ignore_merges_) {
    if (auto id = vocab_.find(word)) {
      out.push_back(*id);
      return;
    }
  }
  const bool cacheable = word.size() <= 64;
  if (cacheable && cache_.get(word, out)) return;
  const size_t before = out.size();
  merge_word(word, out);
  if (cacheable) cache_.put(word, out.data() + before, out.size() - before);
}

void BpeModel::merge_word(std::string_view word, std::vector<int32_t>& out) const {
  struct Symbol {
    int32_t id;
    int32_t prev, next;
    bool alive;
  };
  std::vector<Symbol> syms;
  syms.reserve(word.size());
  auto push = [&](int32_t id) {
    const auto n = static_cast<int32_t>(syms.size());
    syms.push_back(Symbol{id, n - 1, n + 1, true});
  };
  std::optional<int32_t> pending_unk;  // a run of unknown characters being fused
  size_t i = 0;
  std::string piece;
  while (i < word.size()) {
    const size_t at = i;
    next_cp(word, i);
    std::string_view ch = word.substr(at, i - at);
    std::optional<int32_t> id;
    if (prefix_.empty() && suffix_.empty()) {
      id = vocab_.find(ch);
    } else {
      piece.assign(at > 0 ? prefix_ : std::string());
      piece.append(ch);
      if (i == word.size()) piece.append(suffix_);
      id = vocab_.find(piece);
    }
    if (id) {
      if (pending_unk) push(*pending_unk), pending_unk.reset();
      push(*id);
      continue;
    }
    if (byte_fallback_) {
      const std::string_view src = (prefix_.empty() && suffix_.empty()) ? ch : std::string_view(piece);
      bool all = true;
      for (unsigned char b : src) all = all && byte_ids_[b] >= 0;
      if (all) {
        // Like `tokenizers`, a pending unk is not flushed here; it lands after the bytes.
        for (unsigned char b : src) push(byte_ids_[b]);
        continue;
      }
    }
    if (unk_id_) {
      if (pending_unk && !fuse_unk_) push(*pending_unk);
      pending_unk = *unk_id_;
    }
    // No unk token: the character is silently dropped, as in `tokenizers`.
  }
  if (pending_unk) push(*pending_unk);
  if (syms.empty()) return;
  syms.back().next = -1;

  struct Candidate {
    int32_t rank, pos, new_id;
    bool operator<(const Candidate& o) const {  // min-heap on (rank, pos)
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Candidate> heap;
  for (size_t k = 0; k + 1 < syms.size(); ++k)
    if (const MergeInfo* m = find_merge(syms[k].id, syms[k + 1].id))
      heap.push(Candidate{m->rank, static_cast<int32_t>(k), m->new_id});
  while (!heap.empty()) {
    const Candidate top = heap.top();
    heap.pop();
    Symbol& left = syms[top.pos];
    if (!left.alive || left.next < 0) continue;
    Symbol& right = syms[left.next];
    // Stale entry: the pair changed since it was queued.
    const MergeInfo* m = find_merge(left.id, right.id);
    if (!m || m->new_id != top.new_id) continue;
    left.id = top.new_id;
    right.alive = false;
    left.next = right.next;
    if (left.next >= 0) syms[left.next].prev = top.pos;
    if (left.prev >= 0)
      if (const MergeInfo* p = find_merge(syms[left.prev].id, left.id))
        heap.push(Candidate{p->rank, left.prev, p->new_id});
    if (left.next >= 0)
      if (const MergeInfo* n = find_merge(left.id, syms[left.next].id))
        heap.push(Candidate{n->rank, top.pos, n->new_id});
  }
  for (const auto& s : syms)
    if (s.alive) out.push_back(s.id);
}

}  // namespace

std::unique_ptr<Model> make_bpe_model(const Json& j) { return std::make_unique<BpeModel>(j); }

std::unique_ptr<Model> make_model(const Json& j) {
  std::string type = type_of(j);
  if (type.empty()) {  // old format: infer from the fields
    if (field(j, "merges")) type = "BPE";
    else if (const Json* v = field(j, "vocab"); v && v->is_array()) type = "Unigram";
    else if (field(j, "continuing_subword_prefix") || field(j, "max_input_chars_per_word")) type = "WordPiece";
    else if (field(j, "vocab")) type = "WordLevel";
    else fail("model has no \"type\" and no recognizable fields");
  }
  if (type == "BPE") return make_bpe_model(j);
  if (type == "Unigram") return make_unigram_model(j);
  if (type == "WordPiece") return make_wordpiece_model(j);
  if (type == "WordLevel") return make_wordlevel_model(j);
  fail("unknown model type '{}'", type);
}

}  // namespace tq::tok
