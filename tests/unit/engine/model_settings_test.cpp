// ModelSettings and SettingsStore: every bad value rejected naming its field, partial updates,
// the mid_prefill child keeping its value while TurboQuant is off, and the file written
// atomically and read back.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>

#include "engine/model_settings.h"

namespace tq {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

std::string field_of(const json& patch) {
  ModelSettings s;
  try {
    apply_settings_json(s, patch);
  } catch (const SettingsError& e) {
    return e.field();
  }
  return "";
}

TEST(ModelSettings, BadValuesNameTheirField) {
  EXPECT_EQ(field_of(json::parse(R"({"turboquant": {"key_bits": 9}})")), "turboquant.key_bits");
  EXPECT_EQ(field_of(json::parse(R"({"turboquant": {"value_bits": 2.25}})")), "turboquant.value_bits");
  EXPECT_EQ(field_of(json::parse(R"({"turboquant": {"enabled": "yes"}})")), "turboquant.enabled");
  EXPECT_EQ(field_of(json::parse(R"({"turboquant": {"mid_prefil": true}})")), "turboquant.mid_prefil");
  EXPECT_EQ(field_of(json::parse(R"({"sampling": {"temperature": -1}})")), "sampling.temperature");
  EXPECT_EQ(field_of(json::parse(R"({"sampling": {"top_p": 0}})")), "sampling.top_p");
  EXPECT_EQ(field_of(json::parse(R"({"sampling": {"top_k": 1.5}})")), "sampling.top_k");
  EXPECT_EQ(field_of(json::parse(R"({"sampling": {"max_tokens": 0}})")), "sampling.max_tokens");
  EXPECT_EQ(field_of(json::parse(R"({"context_size": -5})")), "context_size");
  EXPECT_EQ(field_of(json::parse(R"({"context_size": 18446744073709551615})")), "context_size");
  EXPECT_EQ(field_of(json::parse(R"({"memory_guard": {"limit": "lots"}})")), "memory_guard.limit");
  EXPECT_EQ(field_of(json::parse(R"({"memory_guard": {"min_host_headroom": "50%"}})")),
            "memory_guard.min_host_headroom");
  EXPECT_EQ(field_of(json::parse(R"({"memory_guard": {"soft": 0.99, "hard": 0.9}})")), "memory_guard.soft");
  EXPECT_EQ(field_of(json::parse(R"({"pinned": 1})")), "pinned");
  EXPECT_EQ(field_of(json::parse(R"({"colour": 1})")), "colour");
  EXPECT_EQ(field_of(json::parse(R"([1, 2])")), "settings");
  EXPECT_EQ(field_of(json::parse(R"({"sampling": {"temperature": 0.5}, "turboquant": {"key_bits": 3.5}})")), "");
}

TEST(ModelSettings, PatchesArePartialAndAllOrNothing) {
  ModelSettings s;
  apply_settings_json(s, json::parse(R"({"sampling": {"temperature": 0.7, "top_k": 40}})"));
  EXPECT_EQ(s.sampling.temperature, 0.7);
  EXPECT_EQ(s.sampling.top_k, 40);
  apply_settings_json(s, json::parse(R"({"sampling": {"temperature": null}})"));  // null unsets
  EXPECT_FALSE(s.sampling.temperature);
  EXPECT_EQ(s.sampling.top_k, 40);
  ModelSettings before = s;
  EXPECT_THROW(apply_settings_json(s, json::parse(R"({"context_size": 512, "turboquant": {"key_bits": 0}})")),
               SettingsError);
  EXPECT_EQ(s, before) << "a rejected patch changes nothing, not even its valid fields";
}

TEST(ModelSettings, MidPrefillKeepsItsValueWhileTurboQuantIsOff) {
  ModelSettings s;
  apply_settings_json(s, json::parse(R"({"turboquant": {"enabled": true, "mid_prefill": true}})"));
  apply_settings_json(s, json::parse(R"({"turboquant": {"enabled": false}})"));
  EXPECT_TRUE(s.turboquant.mid_prefill);
  apply_settings_json(s, json::parse(R"({"turboquant": {"enabled": true}})"));
  EXPECT_TRUE(s.turboquant.mid_prefill);
  ModelSettings o = s;
  o.sampling.temperature = 1.0;
  EXPECT_FALSE(o.needs_reload_from(s)) << "sampling defaults apply per request";
  o.turboquant.enabled = false;
  EXPECT_TRUE(o.needs_reload_from(s));
}

TEST(SettingsStore, WritesAtomicallyAndReadsBack) {
  const fs::path dir = fs::temp_directory_path() / ("tq-settings-" + std::to_string(getpid()));
  fs::create_directories(dir);
  const fs::path file = dir / "tqserve-settings.json";
  ModelSettings defaults;
  defaults.turboquant.enabled = true;  // e.g. the server was started with --kv turboquant
  {
    SettingsStore st(file, defaults);
    st.load();  // no file yet: defaults
    EXPECT_TRUE(st.get("a").turboquant.enabled);
    st.update("a", json::parse(R"({"turboquant": {"enabled": false, "mid_prefill": true}, "context_size": 1024})"));
    EXPECT_THROW(st.update("a", json::parse(R"({"context_size": "big"})")), SettingsError);
  }
  EXPECT_FALSE(fs::exists(dir / "tqserve-settings.json.tmp"));
  SettingsStore again(file, defaults);
  again.load();
  ModelSettings a = again.get("a");
  EXPECT_FALSE(a.turboquant.enabled);
  EXPECT_TRUE(a.turboquant.mid_prefill);
  EXPECT_EQ(a.context_size, 1024);
  EXPECT_TRUE(again.get("b").turboquant.enabled);

  // A model entry that leaves keys out takes the defaults for them; a bad file names the field.
  std::ofstream(file) << R"({"version": 1, "models": {"c": {"context_size": 7}}})";
  SettingsStore partial(file, defaults);
  partial.load();
  EXPECT_EQ(partial.get("c").context_size, 7);
  EXPECT_TRUE(partial.get("c").turboquant.enabled);
  std::ofstream(file) << R"({"version": 1, "models": {"c": {"turboquant": {"key_bits": "4"}}}})";
  SettingsStore bad(file, defaults);
  try {
    bad.load();
    ADD_FAILURE() << "a bad file loads";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("models.c.turboquant.key_bits"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(file.string()), std::string::npos) << e.what();
  }
  std::ofstream(file) << R"({"version": 2})";
  EXPECT_THROW(SettingsStore(file).load(), Error);
  std::ofstream(file) << "{not json";
  EXPECT_THROW(SettingsStore(file).load(), Error);
  fs::remove_all(dir);
}

TEST(SettingsStore, FailedWriteChangesNothing) {
  SettingsStore st("/nonexistent-dir-for-tq/settings.json");
  EXPECT_THROW(st.update("a", json::parse(R"({"context_size": 5})")), Error);
  EXPECT_EQ(st.get("a").context_size, 0);
}

}  // namespace
}  // namespace tq
