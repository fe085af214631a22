// Typed values of aggregator.yaml: strings, booleans, one of a few words,
// integers and numbers in a range, durations, byte counts, file modes,
// addresses and lists of names. Each reads one Field and, when it is not
// valid, reports why at the field's file:line:column and returns false.
#ifndef LIB_CONFIG_TYPED_READERS_H_
#define LIB_CONFIG_TYPED_READERS_H_

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "lib/base/host_port.h"
#include "lib/config/yaml_reader.h"

namespace aggregator {

constexpr int kMaxPort = 65535;

bool ReadString(YamlReader* reader, const Field& field, std::string* out);

// YAML 1.2's core-schema booleans only: "yes" and "on" are not accepted.
bool ReadBool(YamlReader* reader, const Field& field, bool* out);

// A string that is one of `allowed`.
bool ReadOneOf(YamlReader* reader, const Field& field,
               absl::Span<const char* const> allowed, std::string* out);

// An integer from `min` to `max`.
bool ReadInt64(YamlReader* reader, const Field& field, int64_t min, int64_t max,
               int64_t* out);
template <typename Int>
bool ReadInt(YamlReader* reader, const Field& field, int64_t min, int64_t max,
             Int* out) {
  int64_t value = 0;
  if (!ReadInt64(reader, field, min, max, &value)) return false;
  *out = static_cast<Int>(value);
  return true;
}

// A finite number from `min` to `max` (HUGE_VAL: no upper bound).
bool ReadNumber(YamlReader* reader, const Field& field, double min, double max,
                double* out);

// A positive duration with a unit ("250ms", "30s", "2m", "1h"), at
// millisecond resolution, at most a year.
bool ReadDuration(YamlReader* reader, const Field& field,
                  std::chrono::milliseconds* out);

// A byte count: an integer, or an integer with a unit B, KiB, MiB, GiB or
// TiB. `range_words` says what min and max are, in words ("1KiB to 2GiB - 1").
bool ReadBytes(YamlReader* reader, const Field& field, int64_t min, int64_t max,
               absl::string_view range_words, int64_t* out);

// File permissions as an octal string of 3 or 4 digits, "0660"; at most 0777
// (no setuid, setgid or sticky bits) and at least 0600.
bool ReadFileMode(YamlReader* reader, const Field& field, int* out);

// "host:port", "[v6]:port" or "unix:/path".
bool ReadAddress(YamlReader* reader, const Field& field, bool allow_port_zero,
                 HostPort* out);

// An address, or "" for none (metrics.listen, admin.listen).
void ReadOptionalAddress(YamlReader* reader, const Field& field,
                         std::optional<HostPort>* out);

// A list of unique, non-empty strings.
void ReadNameList(YamlReader* reader, const Field& field,
                  std::vector<std::string>* out);

}  // namespace aggregator

#endif  // LIB_CONFIG_TYPED_READERS_H_
