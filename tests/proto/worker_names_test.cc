// proto/worker_names.h and the Python worker runtime
// (tools/python/learner_aggregator/worker.py) name the worker protocol the
// same way: this reads the Python module's constants from its source.
#include "proto/worker_names.h"

#include <catch2/catch.hpp>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>

namespace {

// worker.py, from the runfiles (the test's working directory).
std::string WorkerPy() {
  std::ifstream in("tools/python/learner_aggregator/worker.py");
  REQUIRE(in.good());
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The module-level `NAME = "text"` and `NAME = <a> << <b>` constants.
std::map<std::string, std::string> Constants(const std::string& source) {
  std::map<std::string, std::string> constants;
  const std::regex text(R"(^([A-Z_]+) = \"([^\"]*)\"$)");
  const std::regex shift(R"(^([A-Z_]+) = (\d+) << (\d+)$)");
  std::istringstream lines(source);
  std::string line;
  std::smatch match;
  while (std::getline(lines, line)) {
    if (std::regex_match(line, match, text)) {
      constants[match[1]] = match[2];
    } else if (std::regex_match(line, match, shift)) {
      constants[match[1]] =
          std::to_string(std::stoull(match[2]) << std::stoull(match[3]));
    }
  }
  return constants;
}

}  // namespace

TEST_CASE("The worker protocol's names are the Python runtime's") {
  const std::string source = WorkerPy();
  std::map<std::string, std::string> py = Constants(source);
  CHECK(py["GETATTR_METHOD"] == aggregator::kGetAttrMethod);
  CHECK(py["SHUTDOWN_METHOD"] == aggregator::kShutdownMethod);
  CHECK(py["INIT_METHOD"] == aggregator::kInitMethod);
  CHECK(py["LISTENING_METHOD"] == aggregator::kListeningMethod);
  CHECK(py["WORKER_FD_ENV"] == aggregator::kWorkerFdEnv);
  CHECK(py["MAX_FRAME_BYTES"] ==
        std::to_string(aggregator::kDefaultMaxFrameBytes));
  // The announcement's data: {"port": <port>}.
  CHECK(source.find(std::string("to_value({\"") +
                    aggregator::kListeningPortField + "\": port})") !=
        std::string::npos);
}
