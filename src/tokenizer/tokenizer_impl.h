// Tokenizer::Impl: the loaded pipeline (added vocabulary, normalizer, pre-tokenizer, model,
// post-processor, decoder) shared by Tokenizer copies and StreamDetokenizer. Internal header.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "tokenizer/added_vocabulary.h"
#include "tokenizer/decoder.h"
#include "tokenizer/model.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/post_processor.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace tq {

struct Tokenizer::Impl {
  std::unique_ptr<tok::Normalizer> normalizer;        // may be null
  std::unique_ptr<tok::PreTokenizer> pre_tokenizer;   // may be null
  std::unique_ptr<tok::Model> model;
  std::unique_ptr<tok::PostProcessor> post_processor; // may be null
  std::unique_ptr<tok::Decoder> decoder;              // may be null: tokens joined by spaces
  tok::AddedVocabulary added;
  int32_t vocab_size = 0;

  // The token string of id (added tokens first), or null for an unknown id.
  const std::string* token(int32_t id) const {
    if (const tok::AddedToken* t = added.by_id(id)) return &t->content;
    return model->vocab().token(id);
  }
  // The string the decoder sees for id (see AddedToken::decode_form).
  const std::string* decoder_token(int32_t id) const {
    if (const tok::AddedToken* t = added.by_id(id)) return &t->decode_form;
    return model->vocab().token(id);
  }
  // Token strings for ids (specials dropped when asked); throws on an unknown id.
  std::vector<std::string> tokens_for(std::span<const int32_t> ids, bool skip_special) const;
  std::string decode_tokens(std::vector<std::string> tokens) const;
};

}  // namespace tq
