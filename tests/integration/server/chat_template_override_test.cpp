// `serve --chat-template FILE` renders chat requests with that template instead of the model's:
// the prompt token count the server reports equals the tokenizer's count of the expected
// rendering (through cpp-httplib's client, a real HTTP client).
#include <gtest/gtest.h>
#include <httplib.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "common/fixtures.h"
#include "server_process.h"
#include "tokenizer/tokenizer.h"

namespace tq::test {
namespace {

int64_t chat_prompt_tokens(const ServerProcess& srv) {
  httplib::Client cli("127.0.0.1", srv.port());
  nlohmann::json body = {{"model", "micro-qwen3"},
                         {"messages", {{{"role", "user"}, {"content", "Write a loop."}}}},
                         {"max_tokens", 1}};
  auto res = cli.Post("/v1/chat/completions", body.dump(), "application/json");
  if (!res || res->status != 200) {
    ADD_FAILURE() << "chat request failed: " << (res ? res->body : "no response");
    return -1;
  }
  return nlohmann::json::parse(res->body)["usage"]["prompt_tokens"].get<int64_t>();
}

TEST(ServeChatTemplate, FileOverridesTheModelsTemplate) {
  Tokenizer tok = Tokenizer::from_file(repo_path("models/micro-qwen3/tokenizer.json"));
  // The model's own ChatML rendering.
  std::string chatml = "<|im_start|>user\nWrite a loop.<|im_end|>\n<|im_start|>assistant\n";
  ServerProcess plain({"--no-access-log", "--served-model-name", "micro-qwen3"});
  ASSERT_TRUE(plain.started()) << plain.log();
  EXPECT_EQ(chat_prompt_tokens(plain), int64_t(tok.encode(chatml).size()));
  plain.stop(SIGTERM);

  auto file = std::filesystem::temp_directory_path() / ("tq-tpl-" + std::to_string(getpid()) + ".jinja");
  std::ofstream(file) << "{% for m in messages %}### {{ m['role'] | upper }}: {{ m['content'] }}\n"
                         "{% endfor %}{% if add_generation_prompt %}### ASSISTANT:{% endif %}";
  ServerProcess custom({"--no-access-log", "--served-model-name", "micro-qwen3", "--chat-template",
                        file.string()});
  ASSERT_TRUE(custom.started()) << custom.log();
  std::string expected = "### USER: Write a loop.\n### ASSISTANT:";
  EXPECT_EQ(chat_prompt_tokens(custom), int64_t(tok.encode(expected).size()));
  EXPECT_NE(tok.encode(expected).size(), tok.encode(chatml).size());
  custom.stop(SIGTERM);
  std::filesystem::remove(file);
}

}  // namespace
}  // namespace tq::test
