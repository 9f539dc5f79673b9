// Durable file writes for the validation runner: temp file, fsync, rename, fsync of the folder;
// and an append-only journal of JSON lines that tolerates a torn last line.
#pragma once
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tq::validate {

// Replaces `path` with `data` atomically: readers see the old file or the new one, never a
// mix. Throws Error naming the file on failure.
void write_file_atomic(const std::filesystem::path& path, const std::string& data);

// Appends one JSON line and fsyncs it.
void journal_append(const std::filesystem::path& path, const nlohmann::json& entry);
// Every complete, parseable line; a torn or corrupt line (a killed writer) is skipped.
std::vector<nlohmann::json> journal_read(const std::filesystem::path& path);

}  // namespace tq::validate
