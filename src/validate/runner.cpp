// run_validation: plan, hash, journal/resume, supervise each cell, check, report.
#include "validate/runner.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <thread>

#include "core/error.h"
#include "core/memory_probe.h"
#include "core/thread_pool.h"
#include "io/file.h"
#include "io/safetensors.h"
#include "io/sha256.h"
#include "tokenizer/tokenizer.h"
#include "validate/atomic_file.h"
#include "validate/report.h"
#include "validate/supervisor.h"

namespace tq::validate {
namespace {

std::string width_tag(double k, double v) {
  auto f = [](double b) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "%g", b);
    return std::string(buf);
  };
  return k == v ? "q" + f(k) : "k" + f(k) + "v" + f(v);
}

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

// What must match for a journal to be resumed: the model, the suite and the matrix.
nlohmann::json run_fingerprint(const ValidateOptions& o) {
  nlohmann::json cells = nlohmann::json::array();
  for (const auto& c : plan_cells(o)) cells.push_back(c.to_json());
  std::vector<std::string> files;
  for (const auto& f : o.suite.user_files) files.push_back(f.string());
  return {{"model_dir", std::filesystem::absolute(o.model_dir).string()},
          {"tokens", o.suite.tokens},
          {"continuation", o.suite.continuation},
          {"n_texts", o.suite.n_texts},
          {"n_needle_docs", o.suite.n_needle_docs},
          {"keys_per_doc", o.suite.keys_per_doc},
          {"seed", o.suite.seed},
          {"user_files", files},
          {"cells", cells}};
}

void note(const ValidateOptions& o, const std::string& s) {
  if (!o.quiet) std::fprintf(stderr, "validate: %s\n", s.c_str());
}

}  // namespace

std::vector<CellSpec> plan_cells(const ValidateOptions& o) {
  std::vector<CellSpec> cells;
  auto base = [&](const std::string& name, CellMode m, double k, double v) {
    CellSpec c;
    c.name = name;
    c.mode = m;
    c.k_bits = k;
    c.v_bits = v;
    c.mid_trigger = o.mid_trigger;
    c.guard_limit = o.guard_limit;
    c.keep_dense = o.keep_dense;
    c.slice_tokens = o.slice_tokens;
    c.chunk = o.chunk;
    c.decode_tokens = o.decode_tokens;
    c.device = o.device;
    return c;
  };
  cells.push_back(base("dense", CellMode::Dense, 16, 16));
  for (const auto& [k, v] : o.widths)
    if (o.ordinary) cells.push_back(base("ordinary-" + width_tag(k, v), CellMode::Ordinary, k, v));
  for (const auto& [k, v] : o.widths)
    if (o.mid) cells.push_back(base("mid-" + width_tag(k, v), CellMode::Mid, k, v));
  return cells;
}

namespace {

// A model folder's *.safetensors files (and config.json when asked), sorted by name.
std::vector<std::filesystem::path> model_files(const std::filesystem::path& dir, bool with_config) {
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.is_regular_file() &&
        (e.path().extension() == ".safetensors" || (with_config && e.path().filename() == "config.json")))
      files.push_back(e.path());
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

nlohmann::json hash_model_files(const std::filesystem::path& dir) {
  const std::vector<std::filesystem::path> files = model_files(dir, true);
  if (files.empty()) fail("{}: no .safetensors files to hash", dir.string());
  // One file a thread (a sharded 8B model: 5 files of up to 4 GB), at most one thread a core.
  std::vector<std::string> sums(files.size()), errors(files.size());
  ThreadPool pool(int(std::min<size_t>(files.size(), std::max(1u, std::thread::hardware_concurrency()))));
  pool.parallel_for(int(files.size()), [&](int i) {
    try {
      sums[size_t(i)] = sha256_file(files[size_t(i)]);
    } catch (const std::exception& e) {
      errors[size_t(i)] = e.what();
    }
  });
  nlohmann::json j = nlohmann::json::object();
  for (size_t i = 0; i < files.size(); ++i) {
    if (!errors[i].empty()) fail("{}", errors[i]);
    j[files[i].filename().string()] = sums[i];
  }
  return j;
}

std::string model_generator(const std::filesystem::path& dir) {
  const std::vector<std::filesystem::path> files = model_files(dir, false);
  if (files.empty()) return "";
  const SafetensorsFile first(files.front());
  const auto& meta = first.header().metadata;
  auto it = meta.find("generator");
  return it != meta.end() && it->second.rfind("tqserve make-model", 0) == 0 ? it->second : "";
}

nlohmann::json machine_info(const std::string& device, const std::string& gpu) {
  nlohmann::json m;
  struct utsname u {};
  if (::uname(&u) == 0) {
    m["host"] = u.nodename;
    m["kernel"] = std::string(u.sysname) + " " + u.release;
    m["arch"] = u.machine;
  }
  std::ifstream cpu("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpu, line))
    if (line.rfind("model name", 0) == 0) {
      m["cpu"] = line.substr(line.find(':') + 2);
      break;
    }
  m["cpus"] = ::sysconf(_SC_NPROCESSORS_ONLN);
  if (auto h = read_host_memory()) m["mem_total_bytes"] = h->total_bytes;
  if (auto c = cgroup_memory_limit()) m["cgroup_limit_bytes"] = *c;
  m["backend"] = device;
  if (!gpu.empty()) m["gpu"] = gpu;
  return m;
}

int run_validation(const ValidateOptions& o) {
  namespace fs = std::filesystem;
  fs::create_directories(o.out_dir / "cells");
  const fs::path journal = o.out_dir / "journal.jsonl";
  const nlohmann::json fp = run_fingerprint(o);
  nlohmann::json hashes_before = hash_model_files(o.model_dir);
  std::map<std::string, nlohmann::json> done;
  std::string started = utc_now();
  if (fs::exists(journal)) {
    if (!o.resume) fail("{} holds a journal: pass --resume to continue it, or use a new --out", o.out_dir.string());
    auto entries = journal_read(journal);
    if (entries.empty() || entries[0].value("type", "") != "run")
      fail("{}: not a validation journal", journal.string());
    if (entries[0]["fingerprint"] != fp)
      fail("{}: the journal belongs to a different run (model, suite or matrix differ)", journal.string());
    if (entries[0]["model_hashes"] != hashes_before)
      fail("{}: the model files changed since the journal was started: refusing to mix results",
           journal.string());
    started = entries[0].value("started", started);
    for (const auto& e : entries)
      if (e.value("type", "") == "cell" && e.value("ok", false)) done[e["name"]] = e;
    note(o, "resuming: " + std::to_string(done.size()) + " finished cell(s) in the journal");
  } else {
    journal_append(journal, {{"type", "run"}, {"fingerprint", fp}, {"model_hashes", hashes_before},
                             {"started", started}, {"version", o.version}});
  }
  const fs::path suite_path = o.out_dir / "suite.json";
  if (!fs::exists(suite_path)) {
    Tokenizer tok = Tokenizer::from_file(o.model_dir / "tokenizer.json");
    PromptSuite suite = build_suite(tok, o.suite);
    write_file_atomic(suite_path, suite.to_json().dump());
    note(o, "suite: " + std::to_string(suite.texts.size()) + " texts, " +
                std::to_string(suite.needles.size()) + " needle documents (" +
                std::to_string(suite.n_needles()) + " needles), " + std::to_string(o.suite.tokens) +
                " tokens each");
  }
  nlohmann::json cells = nlohmann::json::array();
  std::string fatal;
  for (const CellSpec& c : plan_cells(o)) {
    if (auto it = done.find(c.name); it != done.end()) {
      note(o, c.name + ": done (from the journal)");
      cells.push_back(it->second);
      continue;
    }
    note(o, c.name + ": running");
    CellJob job{c, fs::absolute(o.model_dir), fs::absolute(o.out_dir),
                fs::absolute(o.out_dir / "cells" / (c.name + ".json"))};
    fs::remove(job.result);
    const fs::path job_path = o.out_dir / "cells" / (c.name + ".job.json");
    write_file_atomic(job_path, job.to_json().dump(1));
    SuperviseOptions so;
    so.exe = o.exe;
    so.args = {"validate-cell", "--job", fs::absolute(job_path).string()};
    so.log = o.out_dir / "cells" / (c.name + ".log");
    so.memory_limit = o.cell_memory_limit;
    so.min_host_headroom = o.min_host_headroom;
    so.timeout_s = o.cell_timeout_s;
    Supervised s = supervise(so);
    nlohmann::json entry = {{"type", "cell"}, {"name", c.name}, {"spec", c.to_json()}};
    entry["ok"] = s.ok;
    entry["failure"] = s.failure;
    entry["wall_seconds"] = s.wall_seconds;
    entry["peak_rss_bytes"] = s.peak_rss;
    entry["memory_limit_bytes"] = o.cell_memory_limit;
    entry["min_host_headroom_bytes"] = o.min_host_headroom;
    nlohmann::json trace = nlohmann::json::array();
    for (const auto& p : decimate(s.samples, 400))
      trace.push_back({double(p.t_ns - s.start_ns) * 1e-9, p.rss, p.host_available});
    entry["memory_trace"] = trace;  // [seconds since start, child RSS, host available]
    if (s.ok) {
      try {
        entry["result"] = read_json_file(job.result);
        nlohmann::json conv = nlohmann::json::array();
        for (const auto& e : entry["result"]["conversion_events"])
          conv.push_back({{"t", double(e["t_ns"].get<int64_t>() - s.start_ns) * 1e-9},
                          {"at_token", e["at_token"]}, {"trigger", e["trigger"]}, {"doc", e["doc"]}});
        entry["conversion_marks"] = conv;
      } catch (const Error& e) {
        entry["ok"] = false;
        entry["failure"] = std::string("no result: ") + e.what();
      }
    }
    // Weights are read-only: a change during the run fails it closed, at once.
    nlohmann::json now = hash_model_files(o.model_dir);
    if (now != hashes_before) {
      entry["ok"] = false;
      entry["failure"] = "a model file changed during the run";
      fatal = "model files changed during the run (sha256 before and after this cell differ)";
    }
    journal_append(journal, entry);
    note(o, c.name + (entry["ok"].get<bool>() ? ": ok" : ": FAILED: " + entry["failure"].get<std::string>()));
    cells.push_back(entry);
    if (!fatal.empty()) break;
  }
  nlohmann::json hashes_after = hash_model_files(o.model_dir);
  nlohmann::json report;
  report["tool"] = "tqserve validate";
  report["version"] = o.version;
  report["started"] = started;
  report["finished"] = utc_now();
  report["machine"] = machine_info(o.device, o.gpu);
  report["model_dir"] = fs::absolute(o.model_dir).string();
  if (std::string g = model_generator(o.model_dir); !g.empty()) report["model_generator"] = g;
  report["model_hashes_before"] = hashes_before;
  report["model_hashes_after"] = hashes_after;
  report["settings"] = fp;
  report["settings"]["cell_memory_limit_bytes"] = o.cell_memory_limit;
  report["settings"]["min_host_headroom_bytes"] = o.min_host_headroom;
  report["settings"]["mid_trigger"] = o.mid_trigger;
  report["cells"] = cells;
  nlohmann::json checks = evaluate_checks(cells);
  checks.push_back({{"name", "model files unchanged"},
                    {"cell", "*"},
                    {"ok", hashes_before == hashes_after && fatal.empty()},
                    {"detail", fatal.empty() ? "sha256 identical before and after" : fatal}});
  bool all_ok = true;
  for (const auto& ch : checks) all_ok = all_ok && ch["ok"].get<bool>();
  report["checks"] = checks;
  report["passed"] = all_ok;
  write_file_atomic(o.out_dir / "report.json", report.dump(1));
  const std::string table = render_table(report);
  write_file_atomic(o.out_dir / "report.md", table);
  write_file_atomic(o.out_dir / "report.html", render_html(report));
  std::printf("%s", table.c_str());
  std::fflush(stdout);
  return all_ok ? 0 : 1;
}

}  // namespace tq::validate
