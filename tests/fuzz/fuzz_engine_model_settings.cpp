// Fuzz target: the per-model settings file (tqserve-settings.json) over arbitrary bytes: a
// SettingsError naming a field, or settings that survive a write and re-read unchanged.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "engine/model_settings.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  try {
    auto all = tq::parse_settings_file(text);
    // What parsed must round-trip through the text the store writes.
    auto again = tq::parse_settings_file(tq::settings_file_text(all));
    if (again != all) std::abort();
  } catch (const tq::SettingsError& e) {
    if (e.field().empty()) std::abort();
  }
  return 0;
}
