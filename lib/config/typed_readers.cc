#include "lib/config/typed_readers.h"

#include <cmath>
#include <set>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"

namespace aggregator {
namespace {

// Beyond any sensible timeout; small enough that now() + it cannot overflow.
constexpr absl::Duration kMaxDuration = absl::Hours(24 * 365);

}  // namespace

bool ReadString(YamlReader* reader, const Field& field, std::string* out) {
  if (!field.node.IsScalar()) {
    reader->Error(
        field, absl::StrCat("expected a string, got ", Describe(field.node)));
    return false;
  }
  *out = field.node.Scalar();
  return true;
}

bool ReadBool(YamlReader* reader, const Field& field, bool* out) {
  if (field.node.IsScalar()) {
    const std::string& text = field.node.Scalar();
    if (text == "true" || text == "True" || text == "TRUE") {
      *out = true;
      return true;
    }
    if (text == "false" || text == "False" || text == "FALSE") {
      *out = false;
      return true;
    }
  }
  reader->Error(field, absl::StrCat("expected true or false, got ",
                                    Describe(field.node)));
  return false;
}

bool ReadOneOf(YamlReader* reader, const Field& field,
               absl::Span<const char* const> allowed, std::string* out) {
  std::string value;
  if (!ReadString(reader, field, &value)) return false;
  for (const char* candidate : allowed) {
    if (value == candidate) {
      *out = value;
      return true;
    }
  }
  reader->Error(field,
                absl::StrCat("expected one of ", absl::StrJoin(allowed, ", "),
                             ", got ", Quote(value)));
  return false;
}

bool ReadInt64(YamlReader* reader, const Field& field, int64_t min, int64_t max,
               int64_t* out) {
  int64_t value = 0;
  if (!field.node.IsScalar() ||
      !absl::SimpleAtoi(field.node.Scalar(), &value)) {
    reader->Error(
        field, absl::StrCat("expected an integer, got ", Describe(field.node)));
    return false;
  }
  if (value < min || value > max) {
    reader->Error(field, absl::StrCat("must be from ", min, " to ", max,
                                      ", got ", value));
    return false;
  }
  *out = value;
  return true;
}

bool ReadNumber(YamlReader* reader, const Field& field, double min, double max,
                double* out) {
  double value = 0;
  if (!field.node.IsScalar() ||
      !absl::SimpleAtod(field.node.Scalar(), &value) || !std::isfinite(value)) {
    reader->Error(
        field, absl::StrCat("expected a number, got ", Describe(field.node)));
    return false;
  }
  if (value < min || value > max) {
    reader->Error(field, max == HUGE_VAL
                             ? absl::StrCat("must be at least ", min, ", got ",
                                            field.node.Scalar())
                             : absl::StrCat("must be from ", min, " to ", max,
                                            ", got ", field.node.Scalar()));
    return false;
  }
  *out = value;
  return true;
}

bool ReadDuration(YamlReader* reader, const Field& field,
                  std::chrono::milliseconds* out) {
  constexpr const char* kExpected =
      "expected a duration with a unit (us, ms, s, m, h), e.g. \"30s\" or "
      "\"250ms\", got ";
  if (!field.node.IsScalar()) {
    reader->Error(field, absl::StrCat(kExpected, Describe(field.node)));
    return false;
  }
  const std::string& text = field.node.Scalar();
  double number = 0;
  if (absl::SimpleAtod(text, &number) && std::isfinite(number)) {
    reader->Error(field, absl::StrCat(Quote(text),
                                      " has no unit; durations need one, e.g. "
                                      "\"",
                                      text, "s\" or \"", text, "ms\""));
    return false;
  }
  absl::Duration duration;
  if (!absl::ParseDuration(text, &duration)) {
    reader->Error(field, absl::StrCat(kExpected, Quote(text)));
    return false;
  }
  if (duration <= absl::ZeroDuration()) {
    reader->Error(field, absl::StrCat("must be positive, got ", Quote(text)));
    return false;
  }
  if (duration < absl::Milliseconds(1) || duration > kMaxDuration) {
    reader->Error(field, absl::StrCat("must be from 1ms to ",
                                      absl::FormatDuration(kMaxDuration),
                                      ", got ", Quote(text)));
    return false;
  }
  *out = std::chrono::milliseconds(absl::ToInt64Milliseconds(duration));
  return true;
}

bool ReadBytes(YamlReader* reader, const Field& field, int64_t min, int64_t max,
               absl::string_view range_words, int64_t* out) {
  const std::string range =
      absl::StrCat("must be from ", min, " to ", max, " (", range_words, ")");
  if (!field.node.IsScalar()) {
    reader->Error(field,
                  absl::StrCat("expected a byte count such as 1073741824 or "
                               "\"1GiB\", got ",
                               Describe(field.node)));
    return false;
  }
  absl::string_view text = field.node.Scalar();
  int64_t value = 0;
  if (absl::SimpleAtoi(text, &value)) {
    if (value < min || value > max) {
      reader->Error(field, absl::StrCat(range, ", got ", value));
      return false;
    }
    *out = value;
    return true;
  }
  size_t digits = 0;
  while (digits < text.size() &&
         absl::ascii_isdigit(static_cast<unsigned char>(text[digits]))) {
    ++digits;
  }
  absl::string_view unit = absl::StripAsciiWhitespace(text.substr(digits));
  int64_t scale = 0;
  if (unit == "B") {
    scale = 1;
  } else if (unit == "KiB") {
    scale = int64_t{1} << 10;
  } else if (unit == "MiB") {
    scale = int64_t{1} << 20;
  } else if (unit == "GiB") {
    scale = int64_t{1} << 30;
  } else if (unit == "TiB") {
    scale = int64_t{1} << 40;
  }
  if (digits == 0 || scale == 0) {
    reader->Error(field,
                  absl::StrCat("expected a byte count such as 1073741824 or "
                               "\"1GiB\" (units: B, KiB, MiB, GiB, TiB), got ",
                               Quote(text)));
    return false;
  }
  if (!absl::SimpleAtoi(text.substr(0, digits), &value) ||
      value > max / scale || value * scale < min) {
    reader->Error(field, absl::StrCat(range, ", got ", Quote(text)));
    return false;
  }
  *out = value * scale;
  return true;
}

bool ReadFileMode(YamlReader* reader, const Field& field, int* out) {
  constexpr const char* kExpected =
      "expected permissions in octal as a string, e.g. \"0660\", got ";
  if (!field.node.IsScalar()) {
    reader->Error(field, absl::StrCat(kExpected, Describe(field.node)));
    return false;
  }
  const std::string& text = field.node.Scalar();
  int mode = 0;
  bool octal = text.size() == 3 || text.size() == 4;
  for (char c : text) {
    octal = octal && c >= '0' && c <= '7';
    mode = mode * 8 + (c - '0');
  }
  if (!octal || mode > 0777) {
    reader->Error(field, absl::StrCat(kExpected, Quote(text)));
    return false;
  }
  if ((mode & 0600) != 0600) {
    reader->Error(field, absl::StrCat(Quote(text),
                                      " leaves the daemon's own user without "
                                      "read and write; give it at least 0600"));
    return false;
  }
  *out = mode;
  return true;
}

bool ReadAddress(YamlReader* reader, const Field& field, bool allow_port_zero,
                 HostPort* out) {
  std::string text;
  if (!ReadString(reader, field, &text)) return false;
  absl::StatusOr<HostPort> address = HostPort::Parse(text, allow_port_zero);
  if (!address.ok()) {
    reader->Error(field, absl::StrCat("bad address ", Quote(text), ": ",
                                      address.status().message()));
    return false;
  }
  *out = *std::move(address);
  return true;
}

void ReadOptionalAddress(YamlReader* reader, const Field& field,
                         std::optional<HostPort>* out) {
  if (field.node.IsScalar() && field.node.Scalar().empty()) {
    out->reset();
    return;
  }
  HostPort address;
  if (ReadAddress(reader, field, /*allow_port_zero=*/true, &address)) {
    *out = address;
  }
}

void ReadNameList(YamlReader* reader, const Field& field,
                  std::vector<std::string>* out) {
  std::vector<std::string> names;
  std::set<std::string> seen;
  reader->ReadList(field, [&](const Field& item) {
    std::string name;
    if (!ReadString(reader, item, &name)) return;
    if (name.empty()) {
      reader->Error(item, "must not be empty");
    } else if (!seen.insert(name).second) {
      reader->Error(item, absl::StrCat("duplicate entry ", Quote(name)));
    } else {
      names.push_back(std::move(name));
    }
  });
  *out = std::move(names);
}

}  // namespace aggregator
