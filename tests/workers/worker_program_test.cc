// What a worker replica runs: its templates expanded and its program found
// (the working directory, then the runfiles directories). Moved from
// worker_manager_test.cc unchanged, to the file named after what they test.
#include "lib/workers/worker_program.h"

#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/testing/process_helpers.h"

namespace aggregator {
namespace {

void WriteExecutable(const std::string& path, const std::string& text) {
  {
    std::ofstream out(path, std::ios::binary);
    out << text;
    REQUIRE(out.good());
  }
  REQUIRE(chmod(path.c_str(), 0755) == 0);
}

TEST_CASE("Templates expand {index}, {port} and {name} and nothing else") {
  WorkerSpec spec;
  spec.name = "learner";
  spec.port_base = 22300;
  CHECK(ExpandWorkerTemplate("--listen=127.0.0.1:{port}", spec, 2) ==
        "--listen=127.0.0.1:22302");
  CHECK(ExpandWorkerTemplate("{name}-{index}-{index}", spec, 7) ==
        "learner-7-7");
  CHECK(ExpandWorkerTemplate("awk '{print}' {{index}} {PORT}", spec, 1) ==
        "awk '{print}' {1} {PORT}");

  spec.command = {"/bin/echo", "{name}", "{port}"};
  spec.env = {{"RANK", "{index}"}, {"PLAIN", "x"}};
  spec.cwd = "/tmp/{name}-{index}";
  absl::StatusOr<SubprocessOptions> options =
      ReplicaSubprocessOptions(spec, 1, {});
  REQUIRE(options.ok());
  CHECK(options->argv ==
        std::vector<std::string>{"/bin/echo", "learner", "22301"});
  CHECK(options->env == std::vector<std::pair<std::string, std::string>>{
                            {"RANK", "1"}, {"PLAIN", "x"}});
  CHECK(options->cwd == "/tmp/learner-1");
  CHECK(options->capture_output);
  CHECK(options->new_process_group);
  CHECK(options->die_with_parent);
}

TEST_CASE("Relative programs: the working directory, then the runfiles") {
  const std::string cwd = testing::TempDir();
  const std::string first = testing::TempDir();
  const std::string second = testing::TempDir();
  for (const std::string& dir : {cwd, first, second}) {
    REQUIRE(mkdir((dir + "/bin").c_str(), 0755) == 0);
    WriteExecutable(dir + "/bin/everywhere", "#!/bin/sh\n");
  }
  WriteExecutable(first + "/bin/runfiles", "#!/bin/sh\n");
  WriteExecutable(second + "/bin/runfiles", "#!/bin/sh\n");
  WriteExecutable(second + "/bin/second", "#!/bin/sh\n");
  const std::vector<std::string> runfiles = {first, second};

  auto resolve = [&](const std::string& program) {
    absl::StatusOr<std::string> path =
        ResolveWorkerProgram(program, cwd, runfiles);
    INFO(path.status().ToString());
    REQUIRE(path.ok());
    return *path;
  };
  // Bare names are for PATH, absolute paths are kept.
  CHECK(resolve("sleep") == "sleep");
  CHECK(resolve("/bin/sh") == "/bin/sh");
  // The working directory first, then the runfiles directories in order.
  CHECK(resolve("bin/everywhere") == cwd + "/bin/everywhere");
  CHECK(resolve("./bin/everywhere") == cwd + "/./bin/everywhere");
  CHECK(resolve("bin/runfiles") == first + "/bin/runfiles");
  CHECK(resolve("bin/second") == second + "/bin/second");

  absl::StatusOr<std::string> missing =
      ResolveWorkerProgram("bin/nothing", cwd, runfiles);
  CHECK(missing.status().code() == absl::StatusCode::kNotFound);
  CHECK(missing.status().message() ==
        absl::StrCat("cannot find the program 'bin/nothing' in the working "
                     "directory ",
                     cwd, " or in the runfiles directories ", first, ", ",
                     second));
  missing = ResolveWorkerProgram("bin/second", cwd, {first});
  CHECK(missing.status().message() ==
        absl::StrCat("cannot find the program 'bin/second' in the working "
                     "directory ",
                     cwd, " or in the runfiles directory ", first));
  missing = ResolveWorkerProgram("bin/runfiles", cwd, {});
  CHECK(missing.status().message() ==
        absl::StrCat("cannot find the program 'bin/runfiles' in the working "
                     "directory ",
                     cwd, " (and aggregatord has no runfiles directory)"));
}

}  // namespace
}  // namespace aggregator
