#include "lib/config/backoff_reader.h"

#include <chrono>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "lib/config/typed_readers.h"

namespace aggregator {
namespace {

// A backoff section's max must not be below its initial delay. Points at max
// if it was written, else at initial (above max's default).
void CheckMaxNotBelowInitial(YamlReader* reader, const Field& section,
                             const std::optional<Field>& initial,
                             const std::optional<Field>& max,
                             std::chrono::milliseconds initial_value,
                             std::chrono::milliseconds max_value) {
  if (max_value >= initial_value) return;
  const std::string max_text =
      absl::FormatDuration(absl::FromChrono(max_value));
  const std::string initial_text =
      absl::FormatDuration(absl::FromChrono(initial_value));
  if (max) {
    reader->Error(*max,
                  absl::StrCat("must be at least ", section.path, ".initial (",
                               initial_text, "), got ", max_text));
  } else if (initial) {
    reader->Error(*initial,
                  absl::StrCat("must be at most ", section.path, ".max (",
                               max_text, ", the default), got ", initial_text));
  }
}

}  // namespace

void ReadBackoff(YamlReader* reader, const Field& field, bool with_jitter,
                 BackoffOptions* backoff) {
  std::optional<Field> initial;
  std::optional<Field> max;
  bool bad = false;  // An invalid duration is reported once, not compared.
  std::vector<YamlReader::Key> keys = {
      {"initial",
       [&](const Field& f) {
         initial = f;
         bad |= !ReadDuration(reader, f, &backoff->initial);
       }},
      {"multiplier",
       [&](const Field& f) {
         ReadNumber(reader, f, 1, HUGE_VAL, &backoff->multiplier);
       }},
      {"max",
       [&](const Field& f) {
         max = f;
         bad |= !ReadDuration(reader, f, &backoff->max);
       }},
  };
  if (with_jitter) {
    keys.insert(keys.begin() + 2, {"jitter", [&](const Field& f) {
                                     ReadNumber(reader, f, 0, 1,
                                                &backoff->jitter);
                                   }});
  }
  reader->ReadMap(field, keys);
  if (!bad) {
    CheckMaxNotBelowInitial(reader, field, initial, max, backoff->initial,
                            backoff->max);
  }
}

}  // namespace aggregator
