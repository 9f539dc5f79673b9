// tqserve entry point: parses the command line, runs the chosen subcommand, maps errors to a
// message on stderr and a non-zero exit code.
#include <spdlog/spdlog.h>

#include <cstdio>
#include <exception>

#include "apps/tqserve/commands.h"
#include "core/error.h"

namespace tq::app {
int exit_code = 0;
}

int main(int argc, char** argv) {
  CLI::App app{"tqserve: an LLM inference server with TurboQuant KV-cache compression"};
  app.set_version_flag("--version", std::string("tqserve ") + TQ_VERSION);
  app.require_subcommand(1);
  bool verbose = false;
  app.add_flag("-v,--verbose", verbose, "Log debug messages to stderr");
  app.parse_complete_callback([&] {
    spdlog::set_level(verbose ? spdlog::level::debug : spdlog::level::warn);
  });
  tq::app::add_generate_command(app);
  tq::app::add_score_command(app);
  tq::app::add_tokenize_commands(app);
  tq::app::add_inspect_command(app);
  tq::app::add_template_command(app);
  tq::app::add_serve_command(app);
  tq::app::add_validate_command(app);
  tq::app::add_make_model_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const tq::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return tq::app::exit_code;
}
