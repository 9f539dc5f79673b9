// PostProcessor implementations. Only the single-sequence template matters here: tqserve
// encodes one text at a time, and type ids / offsets are not produced.
#include "tokenizer/post_processor.h"

#include <map>

namespace tq::tok {

namespace {

class NoopPostProcessor : public PostProcessor {
 public:
  void add_special_tokens(std::vector<int32_t>&) const override {}
};

// [cls] ids [sep] (BertProcessing, and RobertaProcessing for a single sequence).
class WrapPostProcessor : public PostProcessor {
 public:
  WrapPostProcessor(int32_t cls, int32_t sep) : cls_(cls), sep_(sep) {}
  void add_special_tokens(std::vector<int32_t>& ids) const override {
    ids.insert(ids.begin(), cls_);
    ids.push_back(sep_);
  }

 private:
  int32_t cls_, sep_;
};

// TemplateProcessing "single": a list of special-token runs and the $A sequence.
class TemplatePostProcessor : public PostProcessor {
 public:
  struct Item {
    bool is_sequence = false;
    std::vector<int32_t> ids;  // for a special token
  };
  explicit TemplatePostProcessor(std::vector<Item> items) : items_(std::move(items)) {}
  void add_special_tokens(std::vector<int32_t>& ids) const override {
    std::vector<int32_t> out;
    out.reserve(ids.size() + 4);
    for (const auto& it : items_) {
      if (it.is_sequence) out.insert(out.end(), ids.begin(), ids.end());
      else out.insert(out.end(), it.ids.begin(), it.ids.end());
    }
    ids = std::move(out);
  }

 private:
  std::vector<Item> items_;
};

class SequencePostProcessor : public PostProcessor {
 public:
  explicit SequencePostProcessor(std::vector<std::unique_ptr<PostProcessor>> parts)
      : parts_(std::move(parts)) {}
  void add_special_tokens(std::vector<int32_t>& ids) const override {
    for (const auto& p : parts_) p->add_special_tokens(ids);
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> parts_;
};

// ["[CLS]", 101] as used by BertProcessing / RobertaProcessing.
int32_t token_pair_id(const Json& j, const char* key) {
  const Json& p = require(j, key);
  if (!p.is_array() || p.size() != 2) fail("'{}' must be [token, id]", key);
  return to_id(p[1], key);
}

std::unique_ptr<PostProcessor> make_template(const Json& j) {
  std::map<std::string, std::vector<int32_t>> specials;
  if (const Json* st = field(j, "special_tokens")) {
    if (!st->is_object()) fail("TemplateProcessing special_tokens must be an object");
    for (auto it = st->begin(); it != st->end(); ++it) {
      const Json& ids = require(it.value(), "ids");
      if (!ids.is_array()) fail("special token '{}' ids must be an array", it.key());
      std::vector<int32_t> v;
      for (const auto& id : ids) v.push_back(to_id(id, "special token"));
      specials[it.key()] = std::move(v);
    }
  }
  auto special = [&](const std::string& name) {
    auto it = specials.find(name);
    if (it == specials.end()) fail("template uses special token '{}' missing from special_tokens", name);
    return TemplatePostProcessor::Item{false, it->second};
  };
  std::vector<TemplatePostProcessor::Item> items;
  const Json& single = require(j, "single");
  auto parse_word = [&](std::string w) {
    // String templates: "$A", "$0", "$A:1" for the sequence, "name" or "name:1" for a token.
    if (const size_t colon = w.rfind(':'); colon != std::string::npos && colon > 0) w.resize(colon);
    if (!w.empty() && w[0] == '$') items.push_back({true, {}});
    else items.push_back(special(w));
  };
  if (single.is_string()) {
    const auto& s = single.get_ref<const std::string&>();
    size_t i = 0;
    while (i < s.size()) {
      const size_t sp = s.find(' ', i);
      const std::string w = s.substr(i, sp == std::string::npos ? std::string::npos : sp - i);
      if (!w.empty()) parse_word(w);
      if (sp == std::string::npos) break;
      i = sp + 1;
    }
  } else if (single.is_array()) {
    for (const auto& piece : single) {
      if (piece.is_string()) {
        parse_word(piece.get<std::string>());
      } else if (const Json* st = field(piece, "SpecialToken")) {
        items.push_back(special(get_string(*st, "id")));
      } else if (field(piece, "Sequence")) {
        items.push_back({true, {}});
      } else {
        fail("unknown TemplateProcessing piece {}", piece.dump());
      }
    }
  } else {
    fail("TemplateProcessing single must be a list or a string");
  }
  return std::make_unique<TemplatePostProcessor>(std::move(items));
}

}  // namespace

std::unique_ptr<PostProcessor> make_post_processor(const Json& j) {
  const std::string type = type_of(j);
  if (type == "ByteLevel") return std::make_unique<NoopPostProcessor>();
  if (type == "TemplateProcessing") return make_template(j);
  if (type == "BertProcessing" || type == "RobertaProcessing")
    return std::make_unique<WrapPostProcessor>(token_pair_id(j, "cls"), token_pair_id(j, "sep"));
  if (type == "Sequence") {
    const Json& list = require(j, "processors");
    if (!list.is_array()) fail("Sequence processors must be an array");
    std::vector<std::unique_ptr<PostProcessor>> parts;
    for (const auto& p : list) parts.push_back(make_post_processor(p));
    return std::make_unique<SequencePostProcessor>(std::move(parts));
  }
  fail("unknown post_processor type '{}'", type);
}

}  // namespace tq::tok
