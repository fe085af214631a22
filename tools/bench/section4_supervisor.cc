// Section 4 of tools/bench: the Supervisor's round trips, run by
// //tools:supervisor_bench when it is built.
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "lib/process/subprocess.h"
#include "tools/bench/bench.h"

namespace aggregator::bench {

constexpr std::chrono::minutes kSupervisorBenchDeadline(3);

Section Bench::Supervisor() {
  Section section{"4",
                  "Supervisor: round trip (process, thread children), "
                  "RecvAll of three"};
  return Run(std::move(section), [&](Section& section) -> absl::Status {
    auto published = [&](const std::string& metric, double us, double target) {
      Row row{absl::StrCat("Python original: ", metric)};
      row.value = us;
      row.unit = "µs";
      row.comparison = kPublished;
      if (target > 0) {
        row.target = absl::StrCat("aggregatord ≤ ", target, " µs");
      }
      section.rows.push_back(std::move(row));
    };
    if (options_.supervisor_bench.empty()) {
      Row row{"supervisor round trip, RecvAll"};
      row.text = "not built yet";
      row.comparison = "no //tools:supervisor_bench in this tree";
      row.target = "≤ 25 µs process, ≤ 5 µs thread";
      section.rows.push_back(std::move(row));
      section.notes.push_back(
          "NOT MEASURED: //tools:supervisor_bench is not built yet (build it, "
          "or pass --supervisor-bench PATH); no numbers are shown for it.");
    } else {
      Progress(absl::StrCat("  running ", options_.supervisor_bench));
      SubprocessOptions run;
      run.argv = {options_.supervisor_bench};
      auto process = Subprocess::Start(run);
      if (!process.ok()) return process.status();
      const auto deadline = Clock::now() + kSupervisorBenchDeadline;
      std::string output;
      while (true) {
        auto line = (*process)->ReadLine(deadline);
        if (!line.ok()) {
          if (absl::IsOutOfRange(line.status())) break;
          return line.status();
        }
        absl::StrAppend(&output, *line, "\n");
      }
      std::string errors;
      while (true) {
        auto line = (*process)->ReadLine(deadline, /*from_stderr=*/true);
        if (!line.ok()) break;
        absl::StrAppend(&errors, *line, "\n");
      }
      auto exit = (*process)->Wait(deadline);
      if (!exit.ok()) return exit.status();
      section.notes.push_back(absl::StrCat("output of ",
                                           options_.supervisor_bench, " (",
                                           exit->ToString(), "), verbatim:"));
      section.notes.push_back(output);
      if (!exit->ok()) {
        section.notes.push_back(absl::StrCat("its stderr:\n", errors));
        return absl::InternalError(
            absl::StrCat("supervisor_bench exited with ", exit->ToString()));
      }
    }
    published("round trip, process child", 114, 25);
    published("round trip, thread child", 52, 5);
    published("RecvAll of three, process children", 485, 0);
    published("RecvAll of three, thread children", 193, 0);
    return absl::OkStatus();
  });
}

}  // namespace aggregator::bench
