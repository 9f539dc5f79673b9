// Validation reports: the readable table (Markdown) and the self-contained HTML page with inline
// SVG plots (memory over time per cell with the conversion point and limits; throughput and
// quality per mode). Both are pure functions of report.json.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

namespace tq::validate {

std::string render_table(const nlohmann::json& report);
std::string render_html(const nlohmann::json& report);
// Escapes &, <, >, " for HTML text and attributes.
std::string html_escape(const std::string& s);

}  // namespace tq::validate
