// `tqserve tokenize` and `tqserve detokenize`: encode text to ids and decode ids to text with a
// model directory's tokenizer.json (or an explicit file), plain or as JSON.
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "apps/tqserve/cli_common.h"
#include "apps/tqserve/commands.h"
#include "core/error.h"
#include "io/file.h"
#include "tokenizer/tokenizer.h"

namespace tq::app {
namespace {

struct TokenizerSource {
  std::string model_dir;
  std::string tokenizer_file;

  Tokenizer load() const {
    const std::filesystem::path path = !tokenizer_file.empty()
                                           ? std::filesystem::path(tokenizer_file)
                                           : std::filesystem::path(model_dir) / "tokenizer.json";
    return Tokenizer::from_file(path);
  }
};

// --model DIR | --tokenizer FILE, exactly one.
void add_source_options(CLI::App* cmd, TokenizerSource& src) {
  auto* group = cmd->add_option_group("tokenizer", "Where the tokenizer comes from (one of)");
  group->add_option("--model", src.model_dir, "Model directory holding tokenizer.json");
  group->add_option("--tokenizer", src.tokenizer_file, "Path of a tokenizer.json file");
  group->require_option(1);
}

struct TokenizeArgs {
  TokenizerSource src;
  std::string text, file;
  bool add_special_tokens = false;
  bool json = false;
};

struct DetokenizeArgs {
  TokenizerSource src;
  std::string ids, ids_file;
  bool skip_special_tokens = false;
  bool json = false;
};

void run_tokenize(const TokenizeArgs& a) {
  const Tokenizer tok = a.src.load();
  const std::string text = a.file.empty() ? a.text : read_file(a.file);
  const std::vector<int32_t> ids = tok.encode(text, a.add_special_tokens);
  if (a.json) {
    std::printf("%s\n", nlohmann::json{{"ids", ids}}.dump().c_str());
    return;
  }
  std::string line;
  for (size_t i = 0; i < ids.size(); ++i) line += (i ? " " : "") + std::to_string(ids[i]);
  std::printf("%s\n", line.c_str());
}

void run_detokenize(const DetokenizeArgs& a) {
  const Tokenizer tok = a.src.load();
  const std::vector<int32_t> ids = parse_ids(a.ids_file.empty() ? a.ids : read_file(a.ids_file));
  const std::string text = tok.decode(ids, a.skip_special_tokens);
  if (a.json) {
    std::printf("%s\n", nlohmann::json{{"text", text}}.dump().c_str());
    return;
  }
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fputc('\n', stdout);
}

}  // namespace

void add_tokenize_commands(CLI::App& app) {
  auto targs = std::make_shared<TokenizeArgs>();
  auto* tok = app.add_subcommand("tokenize", "Encode text to token ids");
  add_source_options(tok, targs->src);
  auto* input = tok->add_option_group("input", "The text to encode (one of)");
  input->add_option("--text", targs->text, "Text to encode");
  input->add_option("--file", targs->file, "File whose bytes are encoded");
  input->require_option(1);
  tok->add_flag("--add-special-tokens", targs->add_special_tokens,
                "Apply the tokenizer's post-processor (BOS, [CLS] ... [SEP], ...)");
  tok->add_flag("--json", targs->json, "Print {\"ids\": [...]}");
  tok->callback([targs] { run_tokenize(*targs); });

  auto dargs = std::make_shared<DetokenizeArgs>();
  auto* detok = app.add_subcommand("detokenize", "Decode token ids to text");
  add_source_options(detok, dargs->src);
  auto* ids = detok->add_option_group("ids", "The ids to decode (one of)");
  ids->add_option("--ids", dargs->ids, "Ids separated by commas or spaces, e.g. 1,2,3");
  ids->add_option("--ids-file", dargs->ids_file, "File with ids separated by commas or whitespace");
  ids->require_option(1);
  detok->add_flag("--skip-special-tokens", dargs->skip_special_tokens, "Drop special tokens");
  detok->add_flag("--json", dargs->json, "Print {\"text\": ...}");
  detok->callback([dargs] { run_detokenize(*dargs); });
}

}  // namespace tq::app
