// The tqserve subcommands. Each cmd_<name>.cpp adds one subcommand to the CLI11 app; the
// callback it sets returns the process exit code through the shared `exit_code`.
#pragma once
#include <CLI/CLI.hpp>

namespace tq::app {

// Set by the chosen subcommand's callback; main() returns it.
extern int exit_code;

void add_generate_command(CLI::App& app);
void add_score_command(CLI::App& app);
void add_tokenize_commands(CLI::App& app);  // tokenize and detokenize
void add_inspect_command(CLI::App& app);
void add_template_command(CLI::App& app);
void add_serve_command(CLI::App& app);
void add_validate_command(CLI::App& app);  // and the hidden validate-cell
void add_make_model_command(CLI::App& app);

}  // namespace tq::app
