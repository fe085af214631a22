// ScopedLogFields: a thread's structured log fields, added while a scope
// lives, nested (inner last), removed with it, and never seen by another
// thread.
#include "lib/base/log_fields.h"

#include <catch2/catch.hpp>
#include <future>
#include <string>
#include <utility>
#include <vector>

namespace aggregator {
namespace {

using Fields = std::vector<std::pair<std::string, std::string>>;

Fields Current() {
  Fields fields;
  for (const auto& [key, value] : CurrentLogFields()) {
    fields.emplace_back(key, value);
  }
  return fields;
}

TEST_CASE("Fields nest, inner last, and go with their scope") {
  CHECK(Current().empty());
  {
    ScopedLogFields worker({{"worker", "sim-0"}, {"pid", "1234"}});
    CHECK(Current() == Fields{{"worker", "sim-0"}, {"pid", "1234"}});
    {
      ScopedLogFields learner({{"learner", "l1"}});
      CHECK(Current() ==
            Fields{{"worker", "sim-0"}, {"pid", "1234"}, {"learner", "l1"}});
    }
    CHECK(Current() == Fields{{"worker", "sim-0"}, {"pid", "1234"}});
    ScopedLogFields none({});
    CHECK(Current().size() == 2);
  }
  CHECK(Current().empty());
}

TEST_CASE("Each thread has its own fields") {
  ScopedLogFields here({{"learner", "main"}});
  auto other = std::async(std::launch::async, [] {
    const Fields before = Current();
    ScopedLogFields there({{"learner", "other"}});
    return std::make_pair(before, Current());
  });
  const auto [before, during] = other.get();
  CHECK(before.empty());
  CHECK(during == Fields{{"learner", "other"}});
  CHECK(Current() == Fields{{"learner", "main"}});
}

}  // namespace
}  // namespace aggregator
