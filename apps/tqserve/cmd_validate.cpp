// `tqserve validate`: the validation matrix (dense / ordinary / mid-prefill TurboQuant per width)
// with supervised cells; and the hidden `validate-cell` subcommand each cell's child runs.
#include <cstdio>
#include <sstream>

#include "apps/tqserve/cli_common.h"
#include "apps/tqserve/commands.h"
#include "backend/cuda/cuda_backend.h"
#include "core/error.h"
#include "core/memory_probe.h"
#include "engine/device_support.h"
#include "io/file.h"
#include "tokenizer/tokenizer.h"
#include "validate/atomic_file.h"
#include "validate/cell.h"
#include "validate/runner.h"
#include "validate/supervisor.h"

namespace tq::app {
namespace {

struct ValidateArgs {
  std::string model, out, widths = "8/8,4/4", modes = "ordinary,mid";
  std::string device = "cpu", mid_trigger = "forced", guard_limit, cell_limit, headroom, keep_dense;
  std::vector<std::string> prompt_files;
  std::string write_suite;
  int64_t tokens = 4096, continuation = 256, chunk = 512, decode = 32, slice = 8192;
  int texts = 2, needle_docs = 8, keys = 16;
  double timeout = 0;
  bool resume = false, quiet = false;
  bool widths_given = false;  // --widths on the command line (else the device's default)
};

// The GPU keeps only some TurboQuant formats on the device (docs/gpu.md): every TurboQuant cell
// of the plan is checked there before the first one starts, so an unsupported width is one clear
// error, not a matrix of failed cells.
void check_cells_on_device(const validate::ValidateOptions& o) {
  const ModelConfig cfg = ModelConfig::from_model_dir(o.model_dir);
  auto be = make_backend(o.device);
  for (const validate::CellSpec& c : validate::plan_cells(o)) {
    if (c.mode == validate::CellMode::Dense) continue;
    try {
      check_backend_kv(*be, validate::cell_kv_policy(c, cfg), cfg);
    } catch (const Error& e) {
      fail("--widths: cell {} cannot run on --device cuda: {}", c.name, e.what());
    }
  }
}

std::vector<std::pair<double, double>> parse_widths(const std::string& s) {
  std::vector<std::pair<double, double>> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    size_t slash = item.find('/');
    try {
      double k = std::stod(item.substr(0, slash));
      double v = slash == std::string::npos ? k : std::stod(item.substr(slash + 1));
      quant::QuantWidth::parse(k);
      quant::QuantWidth::parse(v);
      out.push_back({k, v});
    } catch (const Error&) {
      throw;
    } catch (...) {
      fail("--widths: '{}' is not K/V bits like 8/8 or 4", item);
    }
  }
  if (out.empty()) fail("--widths: no widths given");
  return out;
}

void run(const ValidateArgs& a) {
  validate::ValidateOptions o;
  o.model_dir = a.model;
  o.out_dir = a.out;
  check_device(a.device);  // before any cell: a missing GPU is one clear error, not a failed matrix
  o.device = a.device;
  if (a.device == "cuda") o.gpu = cuda_device_summary();
  // The GPU's TurboQuant kernels take 4-bit K and V: that is its default matrix.
  o.widths = parse_widths(a.device == "cuda" && !a.widths_given ? "4/4" : a.widths);
  o.ordinary = a.modes.find("ordinary") != std::string::npos;
  o.mid = a.modes.find("mid") != std::string::npos;
  o.suite.tokens = a.tokens;
  o.suite.continuation = a.continuation;
  o.suite.n_texts = a.texts;
  o.suite.n_needle_docs = a.needle_docs;
  o.suite.keys_per_doc = a.keys;
  for (const auto& f : a.prompt_files) o.suite.user_files.push_back(f);
  o.chunk = a.chunk;
  o.decode_tokens = a.decode;
  o.slice_tokens = a.slice;
  o.keep_dense = a.keep_dense;
  o.mid_trigger = a.mid_trigger;
  o.guard_limit = a.guard_limit;
  if (a.mid_trigger == "organic" && a.guard_limit.empty())
    fail("--mid-trigger organic needs --guard-limit (the limit the cells' memory guard enforces)");
  if (!a.guard_limit.empty() && !MemoryLimit::parse(a.guard_limit))
    fail("--guard-limit: '{}' is not a size or a percent", a.guard_limit);
  if (!a.cell_limit.empty()) {
    auto b = parse_byte_size(a.cell_limit);
    if (!b) fail("--cell-memory-limit: '{}' is not a size", a.cell_limit);
    o.cell_memory_limit = *b;
  }
  if (!a.headroom.empty()) {
    auto b = parse_byte_size(a.headroom);
    if (!b) fail("--min-host-headroom: '{}' is not a size", a.headroom);
    o.min_host_headroom = *b;
  }
  o.cell_timeout_s = a.timeout;
  o.resume = a.resume;
  o.quiet = a.quiet;
  o.exe = validate::self_exe();
  o.version = TQ_VERSION;
  if (!a.write_suite.empty()) {
    Tokenizer tok = Tokenizer::from_file(std::filesystem::path(a.model) / "tokenizer.json");
    validate::write_file_atomic(a.write_suite, validate::build_suite(tok, o.suite).to_json().dump());
    return;
  }
  if (a.out.empty()) fail("validate: give --out DIR");
  if (o.device == "cuda") check_cells_on_device(o);
  exit_code = validate::run_validation(o);
}

}  // namespace

void add_validate_command(CLI::App& app) {
  auto a = std::make_shared<ValidateArgs>();
  CLI::App* c = app.add_subcommand(
      "validate", "Validation matrix: dense / ordinary / mid-prefill TurboQuant, quality and speed");
  c->add_option("--model", a->model, "Model directory")->required()->check(CLI::ExistingDirectory);
  c->add_option("--out", a->out, "Run folder: journal, cells, report.json / .md / .html");
  c->add_option("--widths", a->widths,
                "TurboQuant K/V widths, e.g. 8/8,4/4,3.5/3.5 (with --device cuda the default is 4/4, "
                "the widths the GPU keeps on the device)")
      ->capture_default_str();
  c->add_option("--modes", a->modes, "TurboQuant modes beside dense: ordinary, mid or both")
      ->capture_default_str();
  c->add_option("--tokens", a->tokens, "Tokens per document (prompt + continuation)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t(64), int64_t(1) << 20));
  c->add_option("--continuation", a->continuation, "Teacher-forced tokens at the end of each text")
      ->capture_default_str()
      ->check(CLI::Range(int64_t(8), int64_t(1) << 16));
  c->add_option("--texts", a->texts, "Built-in code texts")->capture_default_str()->check(CLI::Range(0, 64));
  c->add_option("--needle-docs", a->needle_docs, "Built-in needle documents")
      ->capture_default_str()
      ->check(CLI::Range(0, 256));
  c->add_option("--needle-keys", a->keys, "KEY = value lines per needle document (half are asked)")
      ->capture_default_str()
      ->check(CLI::Range(2, 64));
  c->add_option("--prompt-file", a->prompt_files, "Extra text files to score (repeatable)")
      ->check(CLI::ExistingFile);
  c->add_option("--prefill-chunk", a->chunk, "Prompt tokens per prefill step")->capture_default_str();
  c->add_option("--decode-tokens", a->decode, "Greedy tokens generated per text")->capture_default_str();
  c->add_option("--kv-slice", a->slice, "Tokens per conversion step")->capture_default_str();
  c->add_option("--kv-keep-dense", a->keep_dense, "Layers kept dense under TurboQuant");
  add_device_option(c, a->device);
  c->add_option("--mid-trigger", a->mid_trigger,
                "Mid-prefill cells: forced (convert at half of each prompt) or organic (the memory guard "
                "converts under --guard-limit)")
      ->capture_default_str()
      ->check(CLI::IsMember({"forced", "organic"}));
  c->add_option("--guard-limit", a->guard_limit, "Organic mid cells: the cells' memory guard limit");
  c->add_option("--cell-memory-limit", a->cell_limit,
                "RSS limit of each cell's child process; a cell over it is stopped and failed");
  c->add_option("--min-host-headroom", a->headroom,
                "Host MemAvailable floor while cells run; under it the cell is stopped and failed");
  c->add_option("--cell-timeout", a->timeout, "Seconds per cell before it is stopped (0: none)");
  c->add_flag("--resume", a->resume, "Continue the run in --out from its journal (finished cells are kept)");
  c->add_flag("--quiet", a->quiet, "No progress lines on stderr");
  c->add_option("--write-suite", a->write_suite, "Write the prompt suite as JSON to this file and exit");
  c->callback([a, c] {
    a->widths_given = c->count("--widths") > 0;
    run(*a);
  });

  // The child side of a cell: hidden from --help.
  auto job = std::make_shared<std::string>();
  CLI::App* cell = app.add_subcommand("validate-cell", "");
  cell->group("");
  cell->add_option("--job", *job, "Cell job JSON")->required();
  cell->callback([job] {
    const validate::CellJob j = validate::CellJob::from_json(read_json_file(*job));
    auto be = make_backend(j.cell.device);
    validate::run_cell(j, *be);
  });
}

}  // namespace tq::app
