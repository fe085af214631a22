#include "lib/server/status_page.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace aggregator {
namespace {

// Inline, so the page needs nothing else.
constexpr char kStyle[] =
    "body{font-family:sans-serif;margin:1.5em;color:#222}"
    "h1{font-size:1.4em}h2{font-size:1.15em;margin-top:1.5em}"
    "table{border-collapse:collapse;margin:.5em 0}"
    "th,td{border:1px solid #ccc;padding:.25em .6em;text-align:left;"
    "vertical-align:top}"
    "th{background:#f2f2f2}td.num{text-align:right}"
    "td.error{font-family:monospace;white-space:pre-wrap;max-width:40em;"
    "word-break:break-all}"
    ".ready,.running,.in{color:#176f2c;font-weight:bold}"
    ".failed,.out,.stopped,.crashed,.yes{color:#b00020;font-weight:bold}"
    ".connecting,.starting,.rejoining,.backoff{color:#a15c00;font-weight:bold}"
    "p.note{color:#666;font-size:.9em}";

std::string Duration(std::chrono::steady_clock::duration duration) {
  const int64_t seconds =
      std::chrono::duration_cast<std::chrono::seconds>(duration).count();
  if (seconds < 60) return absl::StrCat(seconds, "s");
  if (seconds < 3600) {
    return absl::StrCat(seconds / 60, "m ", seconds % 60, "s");
  }
  return absl::StrCat(seconds / 3600, "h ", (seconds % 3600) / 60, "m");
}

std::string Ms(double ms) {
  return ms > 0 ? absl::StrFormat("%.1f ms", ms) : "-";
}

// A table cell; `css` and `text` are escaped.
std::string Cell(absl::string_view text, absl::string_view css = "") {
  if (css.empty()) return absl::StrCat("<td>", HtmlEscape(text), "</td>");
  return absl::StrCat("<td class=\"", HtmlEscape(css), "\">", HtmlEscape(text),
                      "</td>");
}

std::string Row(absl::string_view name, absl::string_view value) {
  return absl::StrCat("<tr><th>", HtmlEscape(name), "</th>", Cell(value),
                      "</tr>");
}

// The first word of a standing ("out: why" -> "out"), for its colour.
std::string FirstWord(absl::string_view text) {
  return std::string(text.substr(0, text.find_first_of(": ")));
}

}  // namespace

std::string HtmlEscape(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string RenderStatusPage(const ServerStatus& status,
                             const StatusPageFacts& facts) {
  size_t ready = 0;
  for (const LearnerSnapshot& learner : status.learners) {
    if (learner.state == LearnerState::kReady) ++ready;
  }
  std::string html = absl::StrCat(
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
      "<meta http-equiv=\"refresh\" content=\"",
      kStatusPageRefreshSeconds,
      "\"><meta name=\"viewport\" content=\"width=device-width\">"
      "<title>aggregatord status</title><style>",
      kStyle, "</style></head><body>\n<h1>aggregatord ",
      HtmlEscape(facts.version), "</h1>\n<table id=\"daemon\">",
      Row("serving", status.ready ? "yes" : "no (fewer than min_learners)"),
      Row("uptime", Duration(facts.uptime)),
      Row("aggregator id", facts.aggregator_id),
      Row("configuration", status.config_path),
      Row("configuration generation", absl::StrCat(status.config_generation)),
      Row("membership generation", absl::StrCat(facts.membership_generation)),
      Row("learners ready",
          absl::StrCat(ready, " of ", status.learners.size(), " (min_learners ",
                       facts.min_learners, ")")),
      "</table>\n");

  absl::StrAppend(&html, "<h2>Learners</h2>\n<table id=\"learners\"><tr>",
                  "<th>id</th><th>address</th><th>state</th><th>standing</th>",
                  "<th>calls</th><th>failures</th><th>Learn p50</th>",
                  "<th>Learn p99</th><th>straggler</th><th>last error</th>",
                  "</tr>\n");
  for (const LearnerSnapshot& learner : status.learners) {
    LearnerPlanStatus plan;
    if (auto found = status.plans.find(learner.id);
        found != status.plans.end()) {
      plan = found->second;
    }
    const std::string state = LearnerStateName(learner.state);
    absl::StrAppend(
        &html, "<tr class=\"learner\">", Cell(learner.id, "id"),
        Cell(learner.address.ToString()), Cell(state, "state " + state),
        Cell(plan.standing, FirstWord(plan.standing)),
        Cell(absl::StrCat(learner.calls), "num"),
        Cell(absl::StrCat(learner.failures), "num"),
        Cell(Ms(plan.learn_p50_ms), "num"), Cell(Ms(plan.learn_p99_ms), "num"),
        plan.late_ms > 0 ? Cell(absl::StrCat(plan.straggler ? "yes, " : "",
                                             "late ", plan.late_ms, " ms"),
                                "yes")
        : plan.straggler ? Cell("yes", "yes")
                         : Cell("no"),
        Cell(learner.last_error, "error"), "</tr>\n");
  }
  absl::StrAppend(&html, "</table>\n");

  absl::StrAppend(&html, "<h2>Workers</h2>\n<table id=\"workers\"><tr>",
                  "<th>worker</th><th>pid</th><th>state</th>",
                  "<th>restarts</th><th>last error</th></tr>\n");
  for (const WorkerSnapshot& worker : status.workers) {
    const std::string state = WorkerStateName(worker.state);
    absl::StrAppend(&html, "<tr class=\"worker\">",
                    Cell(absl::StrCat(worker.name, "-", worker.index)),
                    Cell(worker.pid > 0 ? absl::StrCat(worker.pid) : "-"),
                    Cell(state, state),
                    Cell(absl::StrCat(worker.restarts), "num"),
                    Cell(worker.last_error, "error"), "</tr>\n");
  }
  absl::StrAppend(&html, "</table>\n");

  absl::StrAppend(&html, "<h2>Learner sources</h2>\n<table id=\"sources\"><tr>",
                  "<th>kind</th><th>target</th><th>learners</th>",
                  "<th>last refresh</th><th>refreshes</th><th>errors</th>",
                  "<th>reported failed</th><th>last error</th></tr>\n");
  for (const SourceSnapshot& source : status.sources) {
    absl::StrAppend(&html, "<tr class=\"source\">", Cell(source.kind),
                    Cell(source.target),
                    Cell(absl::StrCat(source.learners.size()), "num"),
                    Cell(source.since_last_refresh
                             ? Duration(*source.since_last_refresh) + " ago"
                             : "none yet"),
                    Cell(absl::StrCat(source.refreshes), "num"),
                    Cell(absl::StrCat(source.errors), "num"),
                    Cell(absl::StrCat(source.reported), "num"),
                    Cell(source.last_error, "error"), "</tr>\n");
  }
  absl::StrAppend(
      &html, "</table>\n<p class=\"note\">Read-only; reloads every ",
      kStatusPageRefreshSeconds,
      " s. Metrics: <a href=\"/metrics\">/metrics</a>. Control: aggregatorctl "
      "status, aggregatorctl reload.</p>\n</body></html>\n");
  return html;
}

}  // namespace aggregator
