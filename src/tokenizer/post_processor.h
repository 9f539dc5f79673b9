// PostProcessor: adds a model's special tokens around an encoded sequence when asked
// (TemplateProcessing, BertProcessing, RobertaProcessing; ByteLevel adds nothing to ids).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "tokenizer/json_fields.h"

namespace tq::tok {

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  // Wraps a single sequence's ids in the special tokens (called for add_special_tokens only).
  virtual void add_special_tokens(std::vector<int32_t>& ids) const = 0;
};

std::unique_ptr<PostProcessor> make_post_processor(const Json& j);

}  // namespace tq::tok
