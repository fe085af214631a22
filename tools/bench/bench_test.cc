// The bench's own logic: statistics, report rendering, the config it writes
// and what it reads from /proc and the daemon's log.
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "lib/config/config_loader.h"
#include "tools/bench/bench_processes.h"
#include "tools/bench/bench_report.h"

namespace aggregator {
namespace {

TEST_CASE("Summarize gives median, nearest-rank p99, min, max, mean") {
  std::vector<double> values;
  for (int i = 100; i >= 1; --i) values.push_back(i);  // unsorted on purpose
  const Summary s = Summarize(values);
  CHECK(s.count == 100);
  CHECK(s.min == 1);
  CHECK(s.max == 100);
  CHECK(s.median == Approx(50.5));
  CHECK(s.p99 == 99);
  CHECK(s.mean == Approx(50.5));

  CHECK(Summarize({7}).p99 == 7);
  CHECK(Summarize({3, 1, 2}).median == 2);
  CHECK(Summarize({}).count == 0);
}

TEST_CASE("FormatNumber keeps about three significant figures") {
  CHECK(FormatNumber(0.41234) == "0.412");
  CHECK(FormatNumber(4.4) == "4.40");
  CHECK(FormatNumber(26) == "26.0");
  CHECK(FormatNumber(6100) == "6100");
}

TEST_CASE("ProcField reads /proc-style key: value lines") {
  const std::string text =
      "Name:\tbench\nVmHWM:\t  123456 kB\nmodel name\t: AMD EPYC 7B13\n";
  CHECK(ProcField(text, "VmHWM") == "123456 kB");
  CHECK(ProcField(text, "model name") == "AMD EPYC 7B13");
  CHECK_FALSE(ProcField(text, "VmRSS").has_value());
}

TEST_CASE("this process's memory figures are readable and the peak resets") {
  auto rss = ProcStatusKiB(getpid(), "VmRSS");
  REQUIRE(rss.ok());
  CHECK(*rss > 0);
  auto peak = ProcStatusKiB(getpid(), "VmHWM");
  REQUIRE(peak.ok());
  CHECK(*peak >= *rss);
  CHECK_FALSE(ProcStatusKiB(getpid(), "NoSuchField").ok());
  // clear_refs may be unavailable in a sandbox; when it works the peak starts
  // again from the resident size (other threads may allocate meanwhile: 4 MiB
  // of slack).
  if (ResetPeakRss(getpid()).ok()) {
    auto after = ProcStatusKiB(getpid(), "VmHWM");
    auto now = ProcStatusKiB(getpid(), "VmRSS");
    REQUIRE(after.ok());
    REQUIRE(now.ok());
    CHECK(*after <= *now + 4096);
  }
}

TEST_CASE("LogTimeOfDayMs parses aggregatord's log timestamps") {
  auto ms = LogTimeOfDayMs("2024-05-01T01:02:03.456 info serving: 4 of 4");
  REQUIRE(ms.has_value());
  CHECK(*ms == Approx(((1 * 60 + 2) * 60 + 3) * 1000.0 + 456));
  CHECK_FALSE(LogTimeOfDayMs("<6> serving: 4 of 4").has_value());
  CHECK_FALSE(LogTimeOfDayMs("").has_value());
}

TEST_CASE("the config the bench writes is valid and needs every learner") {
  const std::string yaml =
      BenchConfigYaml({"127.0.0.1:1000", "127.0.0.1:1001", "127.0.0.1:1002"});
  auto config = ParseConfig(yaml, "bench.yaml");
  INFO(yaml);
  REQUIRE(config.ok());
  CHECK(config->learners.size() == 3);
  CHECK(config->learners[2].address.ToString() == "127.0.0.1:1002");
  CHECK(config->service.min_learners == 3);
  CHECK(config->connect.backoff.initial.count() <= 10);
  CHECK(config->max_message_bytes == int64_t{1} << 30);
}

TEST_CASE("the report renders every row with its verdict, and as JSON") {
  Report report;
  report.machine.cpus = 2;
  report.machine.cpu_model = "test CPU";
  Section section{"1", "Small calls"};
  Row pass{"GetResource via aggregatord, median"};
  pass.value = 0.15;
  pass.unit = "ms";
  pass.comparison = "1.5× direct";
  pass.ratio = 1.5;
  pass.target = "≤ 0.2 ms";
  pass.verdict = AtMost(0.15, 0.2);
  section.rows.push_back(pass);
  Row missing{"supervisor round trip"};
  missing.text = "not built yet";
  section.rows.push_back(missing);
  section.notes.push_back("a note\nover two lines");
  report.sections.push_back(section);

  const std::string text = report.Text();
  CHECK(text.find("test CPU") != std::string::npos);
  CHECK(text.find("1. Small calls") != std::string::npos);
  CHECK(text.find("PASS") != std::string::npos);
  CHECK(text.find("not built yet") != std::string::npos);
  CHECK(text.find("  over two lines") != std::string::npos);

  const nlohmann::json json = report.Json();
  const auto& rows = json["sections"][0]["rows"];
  REQUIRE(rows.size() == 2);
  CHECK(rows[0]["value"] == 0.15);
  CHECK(rows[0]["result"] == "PASS");
  CHECK(rows[1]["value"].is_null());
  CHECK(rows[1]["text"] == "not built yet");
  CHECK(AtMost(0.3, 0.2) == Verdict::kMiss);
}

TEST_CASE("TempDir writes files and removes everything on destruction") {
  std::string path;
  {
    auto dir = TempDir::Create();
    REQUIRE(dir.ok());
    path = dir->path();
    auto file = dir->Write("a.yaml", "listen: x\n");
    REQUIRE(file.ok());
    struct stat info;
    CHECK(stat(file->c_str(), &info) == 0);
  }
  struct stat info;
  CHECK(stat(path.c_str(), &info) != 0);
}

TEST_CASE("A section read back from its JSON is the same section") {
  Section section{"6", "a title"};
  Row measured{"Learn 64 MiB"};
  measured.value = 671.5;
  measured.unit = "ms";
  measured.comparison = "1.23× direct";
  measured.ratio = 1.23;
  measured.target = "≤ 1.35× direct";
  measured.verdict = Verdict::kPass;
  measured.details = {{"rate", "1gbit"}};
  Row missing{"not measured"};
  missing.text = "n/a";
  missing.verdict = Verdict::kMiss;
  section.rows = {measured, missing};
  section.notes = {"a note"};
  section.failed = true;
  auto back = SectionFromJson(SectionJson(section));
  REQUIRE(back.ok());
  CHECK(SectionJson(*back) == SectionJson(section));
  CHECK(back->rows[0].verdict == Verdict::kPass);
  CHECK_FALSE(back->rows[1].value.has_value());
  CHECK_FALSE(SectionFromJson(nlohmann::json{{"id", "6"}}).ok());
}

}  // namespace
}  // namespace aggregator
