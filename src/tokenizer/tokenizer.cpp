// Tokenizer: tokenizer.json loading (component factories, added tokens) and the encode/decode
// pipeline: added-token extraction + normalization, pre-tokenization, model, post-processing.
#include "tokenizer/tokenizer.h"

#include "core/error.h"
#include "io/file.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode.h"

namespace tq {

namespace {

std::vector<tok::AddedToken> parse_added_tokens(const tok::Json& root) {
  std::vector<tok::AddedToken> out;
  const tok::Json* list = tok::field(root, "added_tokens");
  if (!list) return out;
  if (!list->is_array()) fail("added_tokens must be an array");
  for (const auto& j : *list) {
    tok::AddedToken t;
    t.id = tok::to_id(tok::require(j, "id"), "added token");
    t.content = tok::get_string(j, "content");
    if (!tok::is_valid_utf8(t.content)) fail("added token {} is not valid UTF-8", t.id);
    t.special = tok::get_bool(j, "special", false);
    t.normalized = tok::get_bool(j, "normalized", !t.special);
    t.lstrip = tok::get_bool(j, "lstrip", false);
    t.rstrip = tok::get_bool(j, "rstrip", false);
    t.single_word = tok::get_bool(j, "single_word", false);
    out.push_back(std::move(t));
  }
  return out;
}

std::shared_ptr<const Tokenizer::Impl> build(const tok::Json& root) {
  if (!root.is_object()) fail("tokenizer.json must hold a JSON object");
  auto impl = std::make_shared<Tokenizer::Impl>();
  auto component = [&](const char* key, auto make) {
    const tok::Json* j = tok::field(root, key);
    using Ptr = decltype(make(*j));
    if (!j) return Ptr{};
    return with_context(key, [&] { return make(*j); });
  };
  impl->normalizer = component("normalizer", tok::make_normalizer);
  impl->pre_tokenizer = component("pre_tokenizer", tok::make_pre_tokenizer);
  impl->post_processor = component("post_processor", tok::make_post_processor);
  impl->decoder = component("decoder", tok::make_decoder);
  impl->model = with_context("model", [&] { return tok::make_model(tok::require(root, "model")); });
  impl->added = tok::AddedVocabulary(with_context("added_tokens", [&] { return parse_added_tokens(root); }),
                                     impl->normalizer.get());
  impl->vocab_size = std::max(impl->model->vocab().size(), impl->added.max_id() + 1);
  return impl;
}

}  // namespace

std::vector<std::string> Tokenizer::Impl::tokens_for(std::span<const int32_t> ids, bool skip_special) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (const int32_t id : ids) {
    if (id < 0 || id >= vocab_size) fail("token id {} is out of range (vocab size {})", id, vocab_size);
    const tok::AddedToken* a = added.by_id(id);
    if (a && a->special && skip_special) continue;
    const std::string* t = decoder_token(id);
    if (!t) fail("token id {} has no token in this vocabulary", id);
    tokens.push_back(*t);
  }
  return tokens;
}

std::string Tokenizer::Impl::decode_tokens(std::vector<std::string> tokens) const {
  std::string out;
  if (!decoder) {
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i) out.push_back(' ');
      out += tokens[i];
    }
    return out;
  }
  decoder->decode_chain(tokens);
  for (const auto& t : tokens) out += t;
  return out;
}

Tokenizer Tokenizer::from_json(const std::string& json_text) {
  tok::Json root;
  try {
    root = tok::Json::parse(json_text);
  } catch (const tok::Json::parse_error& e) {
    fail("invalid JSON at byte {}: {}", e.byte, e.what());
  } catch (const tok::Json::exception& e) {  // e.g. out_of_range for a number overflow
    fail("invalid JSON: {}", e.what());
  }
  try {
    return Tokenizer(build(root));
  } catch (const tok::Json::exception& e) {
    fail("malformed tokenizer.json: {}", e.what());
  }
}

Tokenizer Tokenizer::from_file(const std::filesystem::path& tokenizer_json) {
  const std::string text = read_file(tokenizer_json);
  return with_context(tokenizer_json.string(), [&] { return from_json(text); });
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  const Impl& m = *impl_;
  const std::string clean = tok::sanitize_utf8(text);
  std::vector<tok::Piece> pieces = m.added.extract_and_normalize(clean, m.normalizer.get());
  if (m.pre_tokenizer) m.pre_tokenizer->pre_tokenize(pieces);
  std::vector<int32_t> ids;
  ids.reserve(clean.size() / 3 + 4);
  for (const auto& p : pieces) {
    if (p.id >= 0) ids.push_back(p.id);
    else if (!p.text.empty()) m.model->tokenize(p.text, ids);
  }
  if (add_special_tokens && m.post_processor) m.post_processor->add_special_tokens(ids);
  return ids;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  return impl_->decode_tokens(impl_->tokens_for(ids, skip_special_tokens));
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  if (auto id = impl_->added.find(token)) return id;
  return impl_->model->vocab().find(token);
}

std::string Tokenizer::id_to_token(int32_t id) const {
  const std::string* t = impl_->token(id);
  return t ? *t : std::string();
}

int32_t Tokenizer::vocab_size() const { return impl_->vocab_size; }

bool Tokenizer::is_special(int32_t id) const {
  const tok::AddedToken* t = impl_->added.by_id(id);
  return t && t->special;
}

}  // namespace tq
