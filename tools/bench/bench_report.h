// The bench's results: summary statistics, the machine it ran on, and a report
// of sections and rows rendered as a plain-text table and as JSON.
//
// Thread-safety: none; the bench fills one Report from its main thread.
#ifndef TOOLS_BENCH_BENCH_REPORT_H_
#define TOOLS_BENCH_BENCH_REPORT_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace aggregator {

// Order statistics of one series of measurements (any unit).
struct Summary {
  size_t count = 0;
  double min = 0;
  double median = 0;
  double p99 = 0;  // nearest rank: the value below which 99 % of samples lie
  double mean = 0;
  double max = 0;
};

// Summarises `values`; an empty series gives an all-zero Summary.
Summary Summarize(std::vector<double> values);

nlohmann::json ToJson(const Summary& summary);

struct MachineInfo {
  int cpus = 0;              // online CPUs (nproc)
  std::string cpu_model;     // "model name" from /proc/cpuinfo
  std::string kernel;        // uname -sr
  int64_t memory_bytes = 0;  // MemTotal
  std::string date;          // UTC, ISO 8601, when the bench started
};

MachineInfo ReadMachineInfo();

// One line of the "<Key>: <value>" files in /proc: the text after the colon,
// trimmed, or nullopt when `key` is absent.
std::optional<std::string> ProcField(const std::string& text,
                                     const std::string& key);

enum class Verdict { kNone, kPass, kMiss };

// Whether `value` meets "at most `limit`".
inline Verdict AtMost(double value, double limit) {
  return value <= limit ? Verdict::kPass : Verdict::kMiss;
}

struct Row {
  std::string metric;
  std::optional<double> value;  // absent: `text` says why ("not built yet")
  std::string text;
  std::string unit;
  std::string comparison;       // free text: "2.6x direct (0.097 ms)"
  std::optional<double> ratio;  // the main ratio in `comparison`, if any
  std::string target;           // from issue 6, or empty
  Verdict verdict = Verdict::kNone;
  nlohmann::json details = nlohmann::json::object();  // raw numbers
};

struct Section {
  std::string id;  // "1" .. "5", "A"
  std::string title;
  std::vector<Row> rows;
  // Printed under the rows: caveats, errors, verbatim output of other tools.
  std::vector<std::string> notes;
  bool failed = false;  // the section stopped on an error (in `notes`)
};

struct Report {
  MachineInfo machine;
  nlohmann::json options = nlohmann::json::object();
  std::vector<Section> sections;

  // The human-readable table: a header with the machine, then every section.
  std::string Text() const;
  nlohmann::json Json() const;
};

// A section as JSON (what Report::Json lists), and back: the bench runs a
// section in another process (a network namespace) and reads its result.
nlohmann::json SectionJson(const Section& section);
absl::StatusOr<Section> SectionFromJson(const nlohmann::json& json);

// "0.412", "12.3", "1234": three significant figures or whole numbers.
std::string FormatNumber(double value);

}  // namespace aggregator

#endif  // TOOLS_BENCH_BENCH_REPORT_H_
