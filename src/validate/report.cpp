// The quality-bar checks, the Markdown table and the HTML/SVG report of a validation run.
#include "validate/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fmt/format.h>

#include "core/memory_probe.h"
#include "validate/runner.h"

namespace tq::validate {
namespace {

using json = nlohmann::json;

const json* dense_cell(const json& cells) {
  for (const auto& c : cells)
    if (c["spec"]["mode"] == "dense") return &c;
  return nullptr;
}

double num(const json& j, const char* key, double dflt = 0) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : dflt;
}

std::string mib(double b) { return fmt::format("{:.1f}", b / (1024.0 * 1024.0)); }

// A horizontal bar chart: one bar per (label, value).
std::string bar_chart(const std::string& title, const std::vector<std::pair<std::string, double>>& rows,
                      const std::string& unit, double ref_line = -1) {
  const int w = 460, row_h = 22, left = 130, top = 26;
  const int h = top + int(rows.size()) * row_h + 10;
  double mx = ref_line > 0 ? ref_line : 0;
  for (const auto& r : rows) mx = std::max(mx, r.second);
  if (mx <= 0) mx = 1;
  std::string s = fmt::format("<svg xmlns='http://www.w3.org/2000/svg' width='{}' height='{}' class='chart'>"
                              "<text x='4' y='16' class='t'>{}</text>", w, h, html_escape(title));
  for (size_t i = 0; i < rows.size(); ++i) {
    int y = top + int(i) * row_h;
    double bw = (w - left - 90) * rows[i].second / mx;
    s += fmt::format("<text x='4' y='{}' class='l'>{}</text><rect x='{}' y='{}' width='{:.1f}' "
                     "height='14' class='bar'/><text x='{:.1f}' y='{}' class='l'>{} {}</text>",
                     y + 12, html_escape(rows[i].first), left, y, std::max(bw, 0.5), left + bw + 4,
                     y + 12, fmt::format("{:.4g}", rows[i].second), unit);
  }
  if (ref_line > 0) {
    double x = left + (w - left - 90) * ref_line / mx;
    s += fmt::format("<line x1='{0:.1f}' x2='{0:.1f}' y1='{1}' y2='{2}' class='lim'/>", x, top - 4, h - 6);
  }
  return s + "</svg>";
}

// Memory over time of one cell: child RSS, the limit, the conversion points.
std::string memory_plot(const json& cell) {
  const int w = 460, h = 200, l = 56, r = 10, t = 24, b = 28;
  const json& tr = cell["memory_trace"];
  double tmax = 1e-3, ymax = 1;
  for (const auto& p : tr) {
    tmax = std::max(tmax, p[0].get<double>());
    ymax = std::max(ymax, p[1].get<double>());
  }
  const double limit = num(cell, "memory_limit_bytes");
  if (limit > 0) ymax = std::max(ymax, limit);
  ymax *= 1.08;
  auto X = [&](double s) { return l + (w - l - r) * s / tmax; };
  auto Y = [&](double v) { return t + (h - t - b) * (1 - v / ymax); };
  std::string s = fmt::format("<svg xmlns='http://www.w3.org/2000/svg' width='{}' height='{}' class='chart'>"
                              "<text x='4' y='16' class='t'>{}: child RSS (MiB) over time (s){}</text>",
                              w, h, html_escape(cell["name"].get<std::string>()),
                              cell["ok"].get<bool>() ? "" : " FAILED");
  s += fmt::format("<line x1='{0}' x2='{0}' y1='{1}' y2='{2}' class='ax'/><line x1='{0}' x2='{3}' y1='{2}' "
                   "y2='{2}' class='ax'/>", l, t, h - b, w - r);
  for (int i = 0; i <= 4; ++i) {
    double v = ymax * i / 4;
    s += fmt::format("<text x='2' y='{:.1f}' class='l'>{}</text>", Y(v) + 4, mib(v));
    double ts = tmax * i / 4;
    s += fmt::format("<text x='{:.1f}' y='{}' class='l'>{:.1f}</text>", X(ts) - 8, h - 10, ts);
  }
  std::string pts;
  for (const auto& p : tr) pts += fmt::format("{:.1f},{:.1f} ", X(p[0].get<double>()), Y(p[1].get<double>()));
  s += "<polyline fill='none' class='rss' points='" + pts + "'/>";
  if (limit > 0)
    s += fmt::format("<line x1='{}' x2='{}' y1='{:.1f}' y2='{:.1f}' class='lim'/><text x='{}' y='{:.1f}' "
                     "class='l'>limit {} MiB</text>", l, w - r, Y(limit), Y(limit), l + 4, Y(limit) - 3, mib(limit));
  if (cell.contains("conversion_marks"))
    for (const auto& m : cell["conversion_marks"]) {
      double x = X(m["t"].get<double>());
      s += fmt::format("<line x1='{0:.1f}' x2='{0:.1f}' y1='{1}' y2='{2}' class='conv'/><text x='{3:.1f}' "
                       "y='{4}' class='l'>{5} @{6}</text>", x, t, h - b, x + 2, t + 10,
                       m["trigger"].get<std::string>(), m["at_token"].get<int64_t>());
    }
  return s + "</svg>";
}

}  // namespace

std::string html_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      case '\'': o += "&#39;"; break;
      default: o += c;
    }
  }
  return o;
}

json evaluate_checks(const json& cells) {
  json checks = json::array();
  auto add = [&](const std::string& name, const std::string& cell, bool ok, const std::string& detail) {
    checks.push_back({{"name", name}, {"cell", cell}, {"ok", ok}, {"detail", detail}});
  };
  for (const auto& c : cells)
    add("cell completed", c["name"], c["ok"].get<bool>(),
        c["ok"].get<bool>() ? "ok" : c.value("failure", std::string("failed")));
  const json* d = dense_cell(cells);
  if (!d || !d->value("ok", false)) {
    add("dense baseline", "dense", false, "the dense cell did not complete: no quality checks possible");
    return checks;
  }
  const json& dr = (*d)["result"];
  const double dnll = num(dr, "mean_nll");
  const double dneedles = num(dr, "needles"), total = num(dr, "needles_total");
  for (const auto& c : cells) {
    if (c["spec"]["mode"] == "dense" || !c.value("ok", false)) continue;
    const json& r = c["result"];
    const std::string name = c["name"];
    const double k = c["spec"]["k_bits"], v = c["spec"]["v_bits"];
    const double kl = num(r, "mean_kl"), top1 = num(r, "top1"), nll = num(r, "mean_nll");
    if (k >= 8 && v >= 8) {
      add("8-bit greedy identical", name, r["greedy_hash"] == dr["greedy_hash"],
          fmt::format("greedy hash {} vs dense {}", r["greedy_hash"].get<std::string>(),
                      dr["greedy_hash"].get<std::string>()));
      add("8-bit KL <= 1e-3", name, kl <= 1e-3, fmt::format("mean KL {:.3g}", kl));
    } else if (k >= 4 && v >= 4) {
      add("4-bit KL <= 0.01", name, kl <= 0.01, fmt::format("mean KL {:.3g}", kl));
      add("4-bit top-1 >= 97%", name, top1 >= 0.97, fmt::format("top-1 {:.2f}%", 100 * top1));
      add("4-bit NLL within +1%", name, nll <= dnll * 1.01,
          fmt::format("mean NLL {:.4f} vs dense {:.4f} ({:+.2f}%)", nll, dnll, 100 * (nll / dnll - 1)));
      const double allowed = std::max(1.0, std::round(total / 64.0));
      const double diff = std::fabs(num(r, "needles") - dneedles);
      add("4-bit needles within 1 in 64 of dense", name, diff <= allowed,
          fmt::format("{}/{} vs dense {}/{}", num(r, "needles"), total, dneedles, total));
    }
  }
  return checks;
}

namespace {

// A model written by `tqserve make-model` has random weights: its distributions are near uniform,
// so the quality checks (top-1 above all: near ties flip) say little about a trained model.
std::string random_weights_note(const json& rep) {
  return fmt::format("random, written by `{}`: near-uniform distributions, so the quality checks "
                     "(top-1, needles, NLL) measure the runner, not a trained model's quality",
                     rep.value("model_generator", std::string()));
}

}  // namespace

std::string render_table(const json& rep) {
  std::string s = fmt::format("# Validation: {}\n\n", rep.value("model_dir", std::string()));
  s += fmt::format("- version {}, {} .. {}\n- machine: {} ({} CPUs, {}), backend {}\n", rep.value("version", std::string()),
                   rep.value("started", std::string()), rep.value("finished", std::string()),
                   rep["machine"].value("cpu", std::string("?")), rep["machine"].value("cpus", 0),
                   format_bytes(rep["machine"].value("mem_total_bytes", uint64_t(0))),
                   rep["machine"].value("backend", std::string("?")));
  if (rep["machine"].contains("gpu")) s += fmt::format("- GPU: {}\n", rep["machine"]["gpu"].get<std::string>());
  if (rep.contains("model_generator")) s += fmt::format("- weights: {}\n", random_weights_note(rep));
  s += fmt::format("- documents: {} tokens; suffix throughput measured from half of each prompt\n\n",
                   rep["settings"].value("tokens", 0));
  s += "| cell | prefill tok/s | suffix tok/s | decode tok/s | peak RSS MiB | backend MiB | KV peak MiB | mean NLL | "
       "dNLL | mean KL | top-1 | greedy | needles | conversion |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  const json* d = dense_cell(rep["cells"]);
  const double dnll = d && d->value("ok", false) ? num((*d)["result"], "mean_nll") : 0;
  for (const auto& c : rep["cells"]) {
    if (!c.value("ok", false)) {
      s += fmt::format("| {} | FAILED: {} ||||||||||||| \n", c["name"].get<std::string>(),
                       c.value("failure", std::string()));
      continue;
    }
    const json& r = c["result"];
    std::string conv = "-";
    if (r.contains("conversion") && !r["conversion"].is_null()) {
      const json& v = r["conversion"];
      conv = fmt::format("{} @{}, {} layers, {} slices, {:.3f} s", v["trigger"].get<std::string>(),
                         v["at_token"].get<int64_t>(), v["layers"].get<int>(), v["slices"].get<int64_t>(),
                         v["seconds"].get<double>());
    }
    s += fmt::format("| {} | {:.1f} | {:.1f} | {:.1f} | {} | {} | {} | {:.4f} | {:+.2f}% | {:.2e} | {:.2f}% | {} | {}/{} | {} |\n",
                     c["name"].get<std::string>(), num(r, "prefill_tokens_per_s"), num(r, "suffix_tokens_per_s"),
                     num(r, "decode_tokens_per_s"), mib(num(c, "peak_rss_bytes")), mib(num(r, "backend_bytes_max")),
                     mib(num(r, "kv_peak_bytes")),
                     num(r, "mean_nll"), dnll > 0 ? 100 * (num(r, "mean_nll") / dnll - 1) : 0.0,
                     num(r, "mean_kl"), 100 * num(r, "top1"), r.value("greedy_hash", std::string()),
                     num(r, "needles"), num(r, "needles_total"), conv);
  }
  s += "\n| check | cell | result | detail |\n|---|---|---|---|\n";
  for (const auto& ch : rep["checks"])
    s += fmt::format("| {} | {} | {} | {} |\n", ch["name"].get<std::string>(), ch["cell"].get<std::string>(),
                     ch["ok"].get<bool>() ? "pass" : "FAIL", ch["detail"].get<std::string>());
  s += fmt::format("\n**{}**\n", rep.value("passed", false) ? "PASSED" : "FAILED");
  return s;
}

std::string render_html(const json& rep) {
  std::string h = "<!doctype html><html><head><meta charset='utf-8'><title>tqserve validation</title><style>"
                  "body{font-family:system-ui,sans-serif;margin:24px;color:#222}table{border-collapse:collapse;"
                  "font-size:13px}td,th{border:1px solid #ccc;padding:3px 6px;text-align:right}th{background:#f3f3f3}"
                  ".chart{border:1px solid #ddd;margin:4px;background:#fff}.t{font-size:12px;font-weight:600}"
                  ".l{font-size:10px;fill:#333}.bar{fill:#4a7fc1}.rss{stroke:#4a7fc1;stroke-width:1.5}"
                  ".lim{stroke:#c0392b;stroke-dasharray:4 3}.conv{stroke:#e67e22;stroke-width:1.5}"
                  ".ax{stroke:#999}.pass{color:#1e8449}.fail{color:#c0392b;font-weight:700}</style></head><body>";
  h += fmt::format("<h1>tqserve validation: <span class='{}'>{}</span></h1>", rep.value("passed", false) ? "pass" : "fail",
                   rep.value("passed", false) ? "PASSED" : "FAILED");
  h += fmt::format("<p>{}<br>version {} &middot; {} .. {} &middot; {} &middot; {} CPUs &middot; backend {}</p>",
                   html_escape(rep.value("model_dir", std::string())), html_escape(rep.value("version", std::string())),
                   rep.value("started", std::string()), rep.value("finished", std::string()),
                   html_escape(rep["machine"].value("cpu", std::string("?"))), rep["machine"].value("cpus", 0),
                   html_escape(rep["machine"].value("gpu", rep["machine"].value("backend", std::string("cpu")))));
  if (rep.contains("model_generator")) h += fmt::format("<p>Weights: {}</p>", html_escape(random_weights_note(rep)));
  h += "<h2>Memory over time</h2><div>";
  for (const auto& c : rep["cells"]) h += memory_plot(c);
  h += "</div><h2>Throughput and quality per mode</h2><div>";
  std::vector<std::pair<std::string, double>> pre, suf, dec, kl, top1, needles;
  for (const auto& c : rep["cells"]) {
    if (!c.value("ok", false)) continue;
    const json& r = c["result"];
    std::string n = c["name"];
    pre.push_back({n, num(r, "prefill_tokens_per_s")});
    suf.push_back({n, num(r, "suffix_tokens_per_s")});
    dec.push_back({n, num(r, "decode_tokens_per_s")});
    kl.push_back({n, num(r, "mean_kl")});
    top1.push_back({n, 100 * num(r, "top1")});
    needles.push_back({n, num(r, "needles")});
  }
  h += bar_chart("prefill tokens/s (whole prompt)", pre, "tok/s");
  h += bar_chart("suffix tokens/s (after the boundary)", suf, "tok/s");
  h += bar_chart("decode tokens/s", dec, "tok/s");
  h += bar_chart("mean KL(dense || mode); line: 4-bit bar 0.01", kl, "", 0.01);
  h += bar_chart("top-1 agreement with dense (%); line: 97%", top1, "%", 97);
  h += bar_chart("needles answered", needles, "");
  h += "</div><h2>Table</h2><table><tr><th>cell</th><th>prefill tok/s</th><th>suffix tok/s</th><th>decode tok/s</th>"
       "<th>peak RSS MiB</th><th>backend MiB</th><th>KV peak MiB</th><th>mean NLL</th><th>mean KL</th><th>top-1</th><th>greedy</th><th>needles</th>"
       "<th>conversion</th></tr>";
  for (const auto& c : rep["cells"]) {
    if (!c.value("ok", false)) {
      h += fmt::format("<tr><td>{}</td><td colspan='12' class='fail'>{}</td></tr>", html_escape(c["name"]),
                       html_escape(c.value("failure", std::string())));
      continue;
    }
    const json& r = c["result"];
    std::string conv = "-";
    if (!r["conversion"].is_null())
      conv = fmt::format("{} @{} ({} layers, {} slices, {:.3f} s)", r["conversion"]["trigger"].get<std::string>(),
                         r["conversion"]["at_token"].get<int64_t>(), r["conversion"]["layers"].get<int>(),
                         r["conversion"]["slices"].get<int64_t>(), r["conversion"]["seconds"].get<double>());
    h += fmt::format("<tr><td>{}</td><td>{:.1f}</td><td>{:.1f}</td><td>{:.1f}</td><td>{}</td><td>{}</td><td>{}</td>"
                     "<td>{:.4f}</td><td>{:.2e}</td><td>{:.2f}%</td><td>{}</td><td>{}/{}</td><td>{}</td></tr>",
                     html_escape(c["name"]), num(r, "prefill_tokens_per_s"), num(r, "suffix_tokens_per_s"),
                     num(r, "decode_tokens_per_s"), mib(num(c, "peak_rss_bytes")), mib(num(r, "backend_bytes_max")),
                     mib(num(r, "kv_peak_bytes")), num(r, "mean_nll"),
                     num(r, "mean_kl"), 100 * num(r, "top1"), html_escape(r.value("greedy_hash", std::string())),
                     num(r, "needles"), num(r, "needles_total"), html_escape(conv));
  }
  h += "</table><h2>Checks</h2><table><tr><th>check</th><th>cell</th><th>result</th><th>detail</th></tr>";
  for (const auto& ch : rep["checks"])
    h += fmt::format("<tr><td>{}</td><td>{}</td><td class='{}'>{}</td><td>{}</td></tr>", html_escape(ch["name"]),
                     html_escape(ch["cell"]), ch["ok"].get<bool>() ? "pass" : "fail",
                     ch["ok"].get<bool>() ? "pass" : "FAIL", html_escape(ch["detail"]));
  h += "</table><h2>Model files (sha256)</h2><table><tr><th>file</th><th>before</th><th>after</th></tr>";
  for (auto it = rep["model_hashes_before"].begin(); it != rep["model_hashes_before"].end(); ++it)
    h += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td></tr>", html_escape(it.key()),
                     it.value().get<std::string>(),
                     rep["model_hashes_after"].value(it.key(), std::string("(missing)")));
  return h + "</table></body></html>\n";
}

}  // namespace tq::validate
