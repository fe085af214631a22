// Structured log fields of the current thread: ScopedLogFields adds them while
// it lives, and lib/ops/logging's json format writes them on every line. Here,
// below everything, so that any package can say which learner or worker a line
// is about (lib/learners cannot use lib/ops, of its own rank).
#ifndef LIB_BASE_LOG_FIELDS_H_
#define LIB_BASE_LOG_FIELDS_H_

#include <cstddef>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

namespace aggregator {

// Structured fields ("worker", "learner", "address", "code", "pid") added to
// every json line logged on this thread while it lives; the text format
// ignores them (its messages already say it). Nests: inner fields come last.
class ScopedLogFields {
 public:
  explicit ScopedLogFields(
      std::initializer_list<std::pair<const char*, std::string>> fields);
  ~ScopedLogFields();
  ScopedLogFields(const ScopedLogFields&) = delete;
  ScopedLogFields& operator=(const ScopedLogFields&) = delete;

 private:
  size_t added_;
};

// This thread's fields, outermost first.
const std::vector<std::pair<const char*, std::string>>& CurrentLogFields();

}  // namespace aggregator

#endif  // LIB_BASE_LOG_FIELDS_H_
