// ConfigKeys: the key tables the section readers accept, found by reading a
// stand-in document; each must match what the loader accepts.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "lib/config/config_loader.h"

namespace aggregator {
namespace {

TEST_CASE("ConfigKeys lists every section's keys", "[config]") {
  const auto keys = ConfigKeys();
  REQUIRE(keys.count(""));
  CHECK(keys.at("connect.backoff") ==
        std::vector<std::string>{"initial", "multiplier", "jitter", "max"});
  CHECK(keys.at("workers[].backoff") ==
        std::vector<std::string>{"initial", "multiplier", "max"});
  CHECK(keys.count("learner_sources[].dns"));
  CHECK(keys.count("learner_sources[].orchestrator"));
  CHECK(keys.count("learners[].tls"));
  CHECK(keys.count("connect.keepalive"));
  // Every listed key is accepted where it is listed: an unknown key is the
  // only error a reader reports for a path that is not a list item.
  for (const auto& [path, names] : keys) {
    if (path.find('[') != std::string::npos || path.empty()) continue;
    for (const std::string& name : names) {
      std::string yaml;
      std::string indent;
      for (size_t start = 0; start <= path.size();) {
        size_t dot = path.find('.', start);
        if (dot == std::string::npos) dot = path.size();
        yaml += indent + path.substr(start, dot - start) + ":\n";
        indent += "  ";
        start = dot + 1;
      }
      yaml += indent + name + ": ~\n";
      auto config = ParseConfig(yaml, "t.yaml");
      INFO(yaml << config.status());
      CHECK((config.ok() || config.status().message().find("unknown key") ==
                                std::string::npos));
    }
  }
}

}  // namespace
}  // namespace aggregator
