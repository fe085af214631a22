#include "tools/bench/bench_report.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <numeric>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace aggregator {
namespace {

std::string ReadWholeFile(const char* path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Display width of UTF-8 text: one column per code point (the table uses
// "×" and "≤", which are one column wide but several bytes long).
size_t Columns(const std::string& text) {
  size_t n = 0;
  for (unsigned char c : text) n += (c & 0xC0) != 0x80;
  return n;
}

std::string Pad(const std::string& text, size_t width, bool right = false) {
  const size_t columns = Columns(text);
  if (columns >= width) return text;
  const std::string fill(width - columns, ' ');
  return right ? fill + text : text + fill;
}

const char* VerdictName(Verdict verdict) {
  switch (verdict) {
    case Verdict::kPass:
      return "PASS";
    case Verdict::kMiss:
      return "MISS";
    case Verdict::kNone:
      break;
  }
  return "-";
}

std::string ValueText(const Row& row) {
  return row.value.has_value() ? FormatNumber(*row.value) : row.text;
}

}  // namespace

Summary Summarize(std::vector<double> values) {
  Summary s;
  if (values.empty()) return s;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  s.count = n;
  s.min = values.front();
  s.max = values.back();
  s.median =
      n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
  // Nearest rank: the smallest value with at least 99 % of samples at or
  // below it.
  const size_t rank = static_cast<size_t>(std::ceil(0.99 * n));
  s.p99 = values[std::max<size_t>(rank, 1) - 1];
  s.mean = std::accumulate(values.begin(), values.end(), 0.0) / n;
  return s;
}

nlohmann::json ToJson(const Summary& s) {
  return {{"count", s.count}, {"min", s.min},   {"median", s.median},
          {"p99", s.p99},     {"mean", s.mean}, {"max", s.max}};
}

std::optional<std::string> ProcField(const std::string& text,
                                     const std::string& key) {
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    if (absl::StripAsciiWhitespace(line.substr(0, colon)) != key) continue;
    return std::string(absl::StripAsciiWhitespace(line.substr(colon + 1)));
  }
  return std::nullopt;
}

MachineInfo ReadMachineInfo() {
  MachineInfo info;
  info.cpus = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  info.cpu_model =
      ProcField(ReadWholeFile("/proc/cpuinfo"), "model name").value_or("?");
  utsname names;
  if (uname(&names) == 0) {
    info.kernel = absl::StrCat(names.sysname, " ", names.release);
  }
  // "MemTotal:       24684456 kB"
  const std::string total =
      ProcField(ReadWholeFile("/proc/meminfo"), "MemTotal").value_or("0 kB");
  int64_t kib = 0;
  if (absl::SimpleAtoi(total.substr(0, total.find(' ')), &kib)) {
    info.memory_bytes = kib * 1024;
  }
  const std::time_t now = std::time(nullptr);
  std::tm utc;
  gmtime_r(&now, &utc);
  char date[32];
  std::strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", &utc);
  info.date = date;
  return info;
}

std::string FormatNumber(double value) {
  const double magnitude = std::fabs(value);
  const char* format = magnitude >= 100  ? "%.0f"
                       : magnitude >= 10 ? "%.1f"
                       : magnitude >= 1  ? "%.2f"
                                         : "%.3f";
  char text[64];
  std::snprintf(text, sizeof(text), format, value);
  return text;
}

std::string Report::Text() const {
  std::string out;
  absl::StrAppend(&out, "learner-aggregator bench, ", machine.date, "\n");
  absl::StrAppend(&out, "machine: ", machine.cpus, " CPU(s), ",
                  machine.cpu_model, "; ", machine.kernel, "; ",
                  FormatNumber(static_cast<double>(machine.memory_bytes) /
                               (1024.0 * 1024 * 1024)),
                  " GiB RAM\n");

  // One set of column widths for the whole report, so sections line up.
  const std::vector<std::string> headers = {"metric",     "value",  "unit",
                                            "comparison", "target", "result"};
  std::vector<size_t> widths;
  for (const std::string& header : headers) widths.push_back(Columns(header));
  for (const Section& section : sections) {
    for (const Row& row : section.rows) {
      const std::vector<std::string> cells = {
          row.metric, ValueText(row), row.unit, row.comparison, row.target};
      for (size_t i = 0; i < cells.size(); ++i) {
        widths[i] = std::max(widths[i], Columns(cells[i]));
      }
    }
  }
  auto line = [&](const std::vector<std::string>& cells) {
    std::string text = "  ";
    for (size_t i = 0; i < cells.size(); ++i) {
      const bool last = i + 1 == cells.size();
      text += last ? cells[i] : Pad(cells[i], widths[i], /*right=*/i == 1);
      if (!last) text += "  ";
    }
    return text + "\n";
  };

  for (const Section& section : sections) {
    absl::StrAppend(&out, "\n", section.id, ". ", section.title, "\n");
    if (!section.rows.empty()) out += line(headers);
    for (const Row& row : section.rows) {
      out += line({row.metric, ValueText(row), row.unit, row.comparison,
                   row.target, VerdictName(row.verdict)});
    }
    for (const std::string& note : section.notes) {
      std::istringstream lines(note);
      std::string text;
      while (std::getline(lines, text)) absl::StrAppend(&out, "  ", text, "\n");
    }
  }
  return out;
}

nlohmann::json SectionJson(const Section& section) {
  nlohmann::json rows = nlohmann::json::array();
  for (const Row& row : section.rows) {
    nlohmann::json r;
    r["metric"] = row.metric;
    r["value"] = row.value.has_value() ? nlohmann::json(*row.value)
                                       : nlohmann::json(nullptr);
    if (!row.text.empty()) r["text"] = row.text;
    r["unit"] = row.unit;
    r["comparison"] = row.comparison;
    r["ratio"] = row.ratio.has_value() ? nlohmann::json(*row.ratio)
                                       : nlohmann::json(nullptr);
    r["target"] = row.target;
    r["result"] = VerdictName(row.verdict);
    r["details"] = row.details;
    rows.push_back(std::move(r));
  }
  return {{"id", section.id},
          {"title", section.title},
          {"failed", section.failed},
          {"rows", std::move(rows)},
          {"notes", section.notes}};
}

absl::StatusOr<Section> SectionFromJson(const nlohmann::json& json) {
  try {
    Section section;
    section.id = json.at("id").get<std::string>();
    section.title = json.at("title").get<std::string>();
    section.failed = json.at("failed").get<bool>();
    section.notes = json.at("notes").get<std::vector<std::string>>();
    for (const nlohmann::json& r : json.at("rows")) {
      Row row;
      row.metric = r.at("metric").get<std::string>();
      if (!r.at("value").is_null()) row.value = r.at("value").get<double>();
      row.text = r.value("text", "");
      row.unit = r.at("unit").get<std::string>();
      row.comparison = r.at("comparison").get<std::string>();
      if (!r.at("ratio").is_null()) row.ratio = r.at("ratio").get<double>();
      row.target = r.at("target").get<std::string>();
      const std::string result = r.at("result").get<std::string>();
      row.verdict = result == VerdictName(Verdict::kPass)   ? Verdict::kPass
                    : result == VerdictName(Verdict::kMiss) ? Verdict::kMiss
                                                            : Verdict::kNone;
      row.details = r.at("details");
      section.rows.push_back(std::move(row));
    }
    return section;
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("not a bench section: ", e.what()));
  }
}

nlohmann::json Report::Json() const {
  nlohmann::json json;
  json["machine"] = {{"cpus", machine.cpus},
                     {"cpu_model", machine.cpu_model},
                     {"kernel", machine.kernel},
                     {"memory_bytes", machine.memory_bytes},
                     {"date", machine.date}};
  json["options"] = options;
  json["sections"] = nlohmann::json::array();
  for (const Section& section : sections) {
    json["sections"].push_back(SectionJson(section));
  }
  return json;
}

}  // namespace aggregator
