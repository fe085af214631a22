#include "daemon/bazel_paths.h"

#include <stdlib.h>

#include <catch2/catch.hpp>
#include <string>
#include <vector>

namespace aggregator {
namespace {

TEST_CASE("The runfiles directories: $RUNFILES_DIR first") {
  // `bazel test` sets RUNFILES_DIR.
  const char* runfiles_dir = getenv("RUNFILES_DIR");
  REQUIRE(runfiles_dir != nullptr);
  const std::vector<std::string> found = FindRunfilesDirs();
  REQUIRE_FALSE(found.empty());
  CHECK(found[0] == std::string(runfiles_dir) + "/learner_aggregator");
  for (const std::string& dir : found) {
    CHECK_THAT(dir, Catch::Matchers::EndsWith("/learner_aggregator"));
  }
}

TEST_CASE("Relative user paths are taken from where `bazel run` started") {
  REQUIRE(setenv("BUILD_WORKING_DIRECTORY", "/home/me/project", 1) == 0);
  CHECK(ResolveUserPath("a.yaml") == "/home/me/project/a.yaml");
  CHECK(ResolveUserPath("/etc/a.yaml") == "/etc/a.yaml");
  CHECK(ResolveUserPath("") == "");
  REQUIRE(unsetenv("BUILD_WORKING_DIRECTORY") == 0);
  CHECK(ResolveUserPath("a.yaml") == "a.yaml");
}

}  // namespace
}  // namespace aggregator
