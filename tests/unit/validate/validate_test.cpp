// Validation runner units: SHA-256 vectors, atomic files and the journal, KL, the quality-bar
// checks, the report renderers, the prompt suite and the cell plan.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <random>

#include "core/error.h"
#include "io/sha256.h"
#include "validate/atomic_file.h"
#include "validate/cell.h"
#include "validate/report.h"
#include "validate/runner.h"
#include "validate/supervisor.h"

namespace tq::validate {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

fs::path temp_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("tq_validate_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::string hex_of(Sha256::Impl impl, std::string_view data) {
  Sha256 h(impl);
  h.update(data);
  return h.finish_hex();
}

// Both implementations: the portable code and, where the CPU has them, the SHA extensions.
std::vector<Sha256::Impl> impls() {
  std::vector<Sha256::Impl> v{Sha256::Impl::Portable};
  if (Sha256::hardware_available()) v.push_back(Sha256::Impl::Fastest);
  return v;
}

TEST(Sha256, KnownVectors) {
  std::printf("SHA extensions on this CPU: %s\n", Sha256::hardware_available() ? "yes" : "no");
  for (Sha256::Impl impl : impls()) {
    EXPECT_EQ(Sha256(impl).hardware(), impl == Sha256::Impl::Fastest);
    EXPECT_EQ(hex_of(impl, ""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    EXPECT_EQ(hex_of(impl, "abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    EXPECT_EQ(hex_of(impl, "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
              "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    Sha256 h(impl);  // a million 'a', fed in uneven pieces
    std::string chunk(997, 'a');
    size_t left = 1000000;
    while (left) {
      size_t n = std::min(left, chunk.size());
      h.update(chunk.data(), n);
      left -= n;
    }
    EXPECT_EQ(h.finish_hex(), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  }
}

// Random bytes of lengths around the block and padding boundaries, and one of a few MB, against
// coreutils' sha256sum on the same file, through both implementations and sha256_file.
TEST(Sha256, MatchesSha256sumOnRandomFiles) {
  if (std::system("sha256sum --version > /dev/null 2>&1") != 0) GTEST_SKIP() << "no sha256sum here";
  fs::path d = temp_dir("sha_random");
  std::mt19937_64 g{std::random_device{}()};
  const size_t sizes[] = {1, 55, 56, 63, 64, 65, 119, 120, 128, 1000, 4096 + 17, (3u << 20) + 5};
  for (size_t n : sizes) {
    std::string data(n, '\0');
    for (char& c : data) c = char(g());
    const fs::path f = d / ("r" + std::to_string(n));
    std::ofstream(f, std::ios::binary).write(data.data(), std::streamsize(n));
    const std::string cmd = "sha256sum '" + f.string() + "' > '" + f.string() + ".sum'";
    ASSERT_EQ(std::system(cmd.c_str()), 0);
    std::ifstream in(f.string() + ".sum");
    std::string want;
    in >> want;
    for (Sha256::Impl impl : impls()) {
      EXPECT_EQ(hex_of(impl, data), want) << n << " bytes";
      Sha256 h(impl);  // in pieces of 1, 63 and 100 bytes
      for (size_t at = 0, k = 0; at < n; ++k) {
        const size_t piece = std::min<size_t>(n - at, k % 3 == 0 ? 1 : k % 3 == 1 ? 63 : 100);
        h.update(data.data() + at, piece);
        at += piece;
      }
      EXPECT_EQ(h.finish_hex(), want) << n << " bytes in pieces";
    }
    EXPECT_EQ(sha256_file(f), want) << n << " bytes";
  }
  fs::remove_all(d);
}

TEST(Sha256, FileHashMatchesAndNamesMissingFiles) {
  fs::path d = temp_dir("sha");
  std::ofstream(d / "f") << "abc";
  EXPECT_EQ(sha256_file(d / "f"), sha256_hex("abc"));
  EXPECT_THROW(sha256_file(d / "missing"), tq::Error);
  fs::remove_all(d);
}

// Every shard and config.json, hashed in parallel, each under its own name; other files ignored;
// an unreadable shard named in the error.
TEST(HashModelFiles, HashesEveryShardByName) {
  fs::path d = temp_dir("hash_model");
  std::map<std::string, std::string> want;
  for (int i = 0; i < 7; ++i) {
    const std::string name = "model-0000" + std::to_string(i + 1) + "-of-00007.safetensors";
    std::string data(size_t(1000 + 3001 * i), char('a' + i));
    std::ofstream(d / name, std::ios::binary) << data;
    want[name] = sha256_hex(data);
  }
  std::ofstream(d / "config.json") << "{}";
  want["config.json"] = sha256_hex("{}");
  std::ofstream(d / "tokenizer.json") << "not hashed";
  const json got = hash_model_files(d);
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [name, sum] : want) EXPECT_EQ(got.value(name, ""), sum) << name;
  fs::create_symlink(d / "nowhere", d / "broken.safetensors");  // a dangling link is not a file
  EXPECT_EQ(hash_model_files(d).size(), want.size());
  fs::remove(d / "broken.safetensors");
  fs::create_directory(d / "dir.safetensors");  // a directory is not a file either
  EXPECT_EQ(hash_model_files(d).size(), want.size());
  if (::geteuid() != 0) {  // root reads anything
    fs::permissions(d / "config.json", fs::perms::none);
    try {
      hash_model_files(d);
      ADD_FAILURE() << "an unreadable file was hashed";
    } catch (const tq::Error& e) {
      EXPECT_NE(std::string(e.what()).find("config.json"), std::string::npos) << e.what();
    }
  }
  fs::remove_all(d);
}

TEST(AtomicFile, ReplacesAndLeavesNoTemp) {
  fs::path d = temp_dir("atomic");
  write_file_atomic(d / "r.json", "one");
  write_file_atomic(d / "r.json", "two");
  std::ifstream in(d / "r.json");
  std::string s((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(s, "two");
  int files = 0;
  for ([[maybe_unused]] auto& e : fs::directory_iterator(d)) ++files;
  EXPECT_EQ(files, 1);
  EXPECT_THROW(write_file_atomic(d / "no" / "such" / "dir", "x"), tq::Error);
  fs::remove_all(d);
}

TEST(Journal, SkipsATornLastLine) {
  fs::path d = temp_dir("journal");
  journal_append(d / "j", {{"type", "run"}});
  journal_append(d / "j", {{"type", "cell"}, {"name", "dense"}});
  std::ofstream(d / "j", std::ios::app) << "{\"type\": \"cell\", \"na";  // killed mid-write
  auto e = journal_read(d / "j");
  ASSERT_EQ(e.size(), 2u);
  EXPECT_EQ(e[1]["name"], "dense");
  EXPECT_TRUE(journal_read(d / "absent").empty());
  fs::remove_all(d);
}

TEST(Kl, ZeroForIdenticalPositiveOtherwise) {
  std::vector<float> a = {1, 2, 3, 0.5f}, la(4), lb(4);
  log_softmax(a.data(), 4, la.data());
  EXPECT_NEAR(mean_kl_rows(la.data(), la.data(), 1, 4), 0, 1e-9);
  std::vector<float> b = {1, 2, 2.5f, 0.5f};
  log_softmax(b.data(), 4, lb.data());
  double kl = mean_kl_rows(la.data(), lb.data(), 1, 4);
  EXPECT_GT(kl, 0);
  double sum = 0;
  for (float x : la) sum += std::exp(double(x));
  EXPECT_NEAR(sum, 1.0, 1e-6);
}

json cell(const std::string& name, const std::string& mode, double bits, json result, bool ok = true) {
  return {{"name", name}, {"ok", ok}, {"failure", ok ? "" : "stopped: exceeded its memory limit"},
          {"spec", {{"mode", mode}, {"k_bits", bits}, {"v_bits", bits}}}, {"result", result},
          {"memory_trace", json::array({{0.0, 1000, 0}, {1.0, 5000, 0}})}, {"peak_rss_bytes", 5000},
          {"memory_limit_bytes", 8000}};
}

json metrics(double nll, double kl, double top1, const std::string& hash, int needles) {
  return {{"mean_nll", nll}, {"mean_kl", kl}, {"top1", top1}, {"greedy_hash", hash},
          {"needles", needles}, {"needles_total", 64}, {"prefill_tokens_per_s", 100.0},
          {"suffix_tokens_per_s", 90.0}, {"decode_tokens_per_s", 10.0}, {"kv_peak_bytes", 1 << 20},
          {"conversion", nullptr}};
}

TEST(Checks, ApplyTheBarsOfTurboquantMd) {
  json cells = json::array({cell("dense", "dense", 16, metrics(1.0, 0, 1, "aa", 63)),
                            cell("ordinary-q8", "ordinary", 8, metrics(1.0, 5e-4, 0.999, "aa", 63)),
                            cell("mid-q4", "mid", 4, metrics(1.02, 0.02, 0.95, "bb", 60))});
  json checks = evaluate_checks(cells);
  std::map<std::string, bool> by;
  for (const auto& c : checks) by[c["name"].get<std::string>() + "/" + c["cell"].get<std::string>()] = c["ok"];
  EXPECT_TRUE(by["8-bit greedy identical/ordinary-q8"]);
  EXPECT_TRUE(by["8-bit KL <= 1e-3/ordinary-q8"]);
  EXPECT_FALSE(by["4-bit KL <= 0.01/mid-q4"]);
  EXPECT_FALSE(by["4-bit top-1 >= 97%/mid-q4"]);
  EXPECT_FALSE(by["4-bit NLL within +1%/mid-q4"]);
  EXPECT_FALSE(by["4-bit needles within 1 in 64 of dense/mid-q4"]);
}

TEST(Checks, AFailedCellFailsTheRun) {
  json cells = json::array({cell("dense", "dense", 16, metrics(1.0, 0, 1, "aa", 63)),
                            cell("mid-q4", "mid", 4, json(), false)});
  bool any_fail = false;
  for (const auto& c : evaluate_checks(cells)) any_fail = any_fail || !c["ok"].get<bool>();
  EXPECT_TRUE(any_fail);
}

TEST(Report, TableAndHtmlAreSelfContained) {
  json rep = {{"model_dir", "m<x>"}, {"version", "0.1"}, {"machine", {{"cpu", "cpu"}, {"cpus", 2}}},
              {"settings", {{"tokens", 4096}}}, {"passed", false},
              {"model_hashes_before", {{"a.safetensors", "00"}}}, {"model_hashes_after", {{"a.safetensors", "00"}}}};
  json c = cell("mid-q4", "mid", 4, metrics(1.0, 0.001, 0.99, "aa", 63));
  c["result"]["conversion"] = {{"trigger", "forced"}, {"at_token", 1920}, {"layers", 6}, {"slices", 6}, {"seconds", 0.05}};
  c["conversion_marks"] = json::array({{{"t", 0.5}, {"at_token", 1920}, {"trigger", "forced"}}});
  c["result"]["backend_bytes_max"] = 3 * 1024 * 1024;  // 3.0 MiB in both tables
  rep["cells"] = json::array({cell("dense", "dense", 16, metrics(1.0, 0, 1, "aa", 63)), c,
                              cell("mid-q8", "mid", 8, json(), false)});
  rep["checks"] = evaluate_checks(rep["cells"]);
  std::string t = render_table(rep);
  EXPECT_NE(t.find("forced @1920, 6 layers"), std::string::npos);
  EXPECT_NE(t.find("FAILED: stopped"), std::string::npos);
  EXPECT_NE(t.find("| backend MiB |"), std::string::npos);
  EXPECT_NE(t.find("| 3.0 |"), std::string::npos);
  EXPECT_EQ(t.find("- GPU:"), std::string::npos);  // a CPU run names no GPU
  EXPECT_EQ(t.find("- weights:"), std::string::npos);  // nor random weights
  json rnd = rep;
  rnd["model_generator"] = "tqserve make-model --like tiny --random --seed 0";
  EXPECT_NE(render_table(rnd).find("- weights: random, written by `tqserve make-model --like tiny"), std::string::npos);
  EXPECT_NE(render_html(rnd).find("<p>Weights: random, written by"), std::string::npos);
  json gpu = rep;
  gpu["machine"]["backend"] = "cuda";
  gpu["machine"]["gpu"] = "NVIDIA H200 sm_90";
  EXPECT_NE(render_table(gpu).find("- GPU: NVIDIA H200 sm_90"), std::string::npos);
  EXPECT_NE(render_html(gpu).find("backend NVIDIA H200 sm_90"), std::string::npos);
  std::string h = render_html(rep);
  EXPECT_NE(h.find("<td>3.0</td>"), std::string::npos);
  EXPECT_NE(h.find("<svg"), std::string::npos);
  EXPECT_NE(h.find("class='conv'"), std::string::npos);  // the conversion point is marked
  EXPECT_NE(h.find("class='lim'"), std::string::npos);   // and the limit
  EXPECT_NE(h.find("m&lt;x&gt;"), std::string::npos);
  EXPECT_EQ(h.find("<script"), std::string::npos);
  EXPECT_EQ(h.find("http://"), h.find("http://www.w3.org"));  // no external resources
}

TEST(Plan, DenseFirstThenEachModeAndWidth) {
  ValidateOptions o;
  o.widths = {{8, 8}, {4, 4}, {3.5, 3.5}};
  auto cells = plan_cells(o);
  ASSERT_EQ(cells.size(), 7u);
  EXPECT_EQ(cells[0].name, "dense");
  EXPECT_EQ(cells[1].name, "ordinary-q8");
  EXPECT_EQ(cells[6].name, "mid-q3.5");
  o.ordinary = false;
  EXPECT_EQ(plan_cells(o).size(), 4u);
  CellSpec back = CellSpec::from_json(cells[4].to_json());
  EXPECT_EQ(back.name, cells[4].name);
  EXPECT_EQ(back.mode, CellMode::Mid);
  EXPECT_EQ(back.device, "cpu");
  // The device reaches every cell (and so the run's fingerprint: a CPU journal does not resume
  // on the GPU); a job written before the flag reads as a CPU cell.
  o.device = "cuda";
  for (const CellSpec& c : plan_cells(o)) EXPECT_EQ(CellSpec::from_json(c.to_json()).device, "cuda");
  nlohmann::json old = cells[0].to_json();
  old.erase("device");
  EXPECT_EQ(CellSpec::from_json(old).device, "cpu");
}

TEST(Decimate, KeepsPeakAndEnds) {
  std::vector<MemoryPoint> pts;
  for (int i = 0; i < 1000; ++i) pts.push_back({i, uint64_t(i == 617 ? 99999 : i), 0});
  auto d = decimate(pts, 50);
  EXPECT_LE(d.size(), 51u);
  bool peak = false;
  for (auto& p : d) peak = peak || p.rss == 99999;
  EXPECT_TRUE(peak);
  EXPECT_EQ(d.back().t_ns, 999);
}

TEST(Supervisor, StopsAChildOverItsLimit) {
  fs::path d = temp_dir("sup");
  SuperviseOptions o;
  o.exe = "/usr/bin/python3";
  o.args = {"-c", "import time\nx = bytearray(200 * 1024 * 1024)\nfor i in range(0, len(x), 4096): x[i] = 1\ntime.sleep(5)"};
  o.log = d / "log";
  o.memory_limit = 64ull << 20;
  Supervised s = supervise(o);
  EXPECT_FALSE(s.ok);
  EXPECT_NE(s.failure.find("memory limit"), std::string::npos);
  EXPECT_LT(s.wall_seconds, 4.5);
  o.args = {"-c", "pass"};
  o.memory_limit = 0;
  EXPECT_TRUE(supervise(o).ok);
  fs::remove_all(d);
}

}  // namespace
}  // namespace tq::validate
