// The /admin page in a real headless Chromium (Debian's `chromium`), driven by playwright-core
// (tests/browser/admin.mjs) against a real server: the TurboQuant parent / mid-prefill child,
// saving settings, a reload showing them persisted, and the load/unload buttons.
// TQ_SCREENSHOTS=DIR keeps the page's screenshots (docs/admin-*.png are made this way).
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/fixtures.h"
#include "pool_process.h"

namespace tq::test {
namespace {

namespace fs = std::filesystem;

std::string read_all(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string chromium_path() {
  if (const char* c = std::getenv("CHROMIUM")) return c;
  for (const char* p : {"/usr/bin/chromium", "/usr/bin/chromium-browser"})
    if (fs::exists(p)) return p;
  return "";
}

// Installs tests/browser/node_modules (npm ci, under a lock) when missing; "" or why it failed.
std::string install_browser_deps(const fs::path& dir) {
  if (fs::exists(dir / "node_modules" / "playwright-core" / "package.json")) return "";
  int fd = open((dir / ".npm-install.lock").c_str(), O_CREAT | O_RDWR, 0644);
  if (fd >= 0) flock(fd, LOCK_EX);
  std::string why;
  if (!fs::exists(dir / "node_modules" / "playwright-core" / "package.json")) {
    std::string cmd = "cd '" + dir.string() + "' && npm ci --no-audit --no-fund --loglevel=error >npm-install.log 2>&1";
    if (std::system(cmd.c_str()) != 0) why = "npm ci failed:\n" + read_all(dir / "npm-install.log");
  }
  if (fd >= 0) {
    flock(fd, LOCK_UN);
    close(fd);
  }
  return why;
}

TEST(AdminPage, ParentChildTogglesSettingsPersistenceAndLoadButtonsInChromium) {
  const std::string chromium = chromium_path();
  if (chromium.empty()) GTEST_SKIP() << "chromium is not installed (scripts/install_deps.sh installs it)";
  if (std::system("command -v node >/dev/null 2>&1") != 0) GTEST_SKIP() << "node is not installed";
  const fs::path browser_dir = repo_path("tests/browser");
  std::string why = install_browser_deps(browser_dir);
  ASSERT_TRUE(why.empty()) << why;

  PoolDir dir;
  if (!dir.ok()) GTEST_SKIP() << "../shared/models fixtures are absent";
  PoolServer srv(dir.path(), {"--pool-mem-limit", "500M"});
  ASSERT_TRUE(srv.started()) << srv.log();

  const fs::path out = fs::temp_directory_path() / ("tq-admin-page-" + std::to_string(getpid()) + ".log");
  std::string env = "TQ_BASE_URL='" + srv.base_url() + "' CHROMIUM='" + chromium + "'";
  if (const char* shots = std::getenv("TQ_SCREENSHOTS")) env += std::string(" TQ_SCREENSHOTS='") + shots + "'";
  std::string cmd = env + " timeout 180 node '" + (browser_dir / "admin.mjs").string() + "' >'" + out.string() + "' 2>&1";
  int rc = std::system(cmd.c_str());
  std::string output = read_all(out);
  fs::remove(out);
  EXPECT_EQ(rc, 0) << output << "\n--- server log ---\n" << srv.log();
  EXPECT_NE(output.find("all checks passed"), std::string::npos) << output;
  // What the page saved is in the settings file beside the models.
  std::string file = read_all(dir.path() / "tqserve-settings.json");
  EXPECT_NE(file.find("\"mid_prefill\": true"), std::string::npos) << file;
}

}  // namespace
}  // namespace tq::test
