// Replay driver for fuzz targets in ordinary builds: runs LLVMFuzzerTestOneInput over every file
// of the corpus folders (and files) given on the command line. Any crash fails the test.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

static void run_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
}

int main(int argc, char** argv) {
  size_t n = 0;
  for (int i = 1; i < argc; ++i) {
    std::filesystem::path p(argv[i]);
    if (std::filesystem::is_directory(p)) {
      for (const auto& e : std::filesystem::recursive_directory_iterator(p))
        if (e.is_regular_file()) {
          run_file(e.path());
          ++n;
        }
    } else if (std::filesystem::exists(p)) {
      run_file(p);
      ++n;
    }
  }
  // Also a handful of degenerate inputs, so a target with an empty corpus still runs.
  const uint8_t zeros[64] = {};
  for (size_t len = 0; len <= sizeof zeros; len += 8) LLVMFuzzerTestOneInput(zeros, len);
  std::printf("replayed %zu corpus inputs\n", n);
  return 0;
}
