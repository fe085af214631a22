// The typed readers on their own: each value type's accepted forms, and the
// error each reports at the value's file:line:column.
#include "lib/config/typed_readers.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <string>

#include "lib/config/yaml_reader.h"

namespace aggregator {
namespace {

// The value of "key" in a one-line document "key: <text>", as a Field.
Field ValueOf(const std::string& text) {
  YAML::Node document = YAML::Load("key: " + text);
  YAML::Node value = document["key"];
  return Field{value, value.Mark(), "key"};
}

// The reader's one error line, or "" when it reported nothing.
std::string ErrorOf(const YamlReader& reader) {
  return std::string(reader.Result().message());
}

TEST_CASE("ReadDuration takes units and reports where", "[config]") {
  YamlReader reader("t.yaml");
  std::chrono::milliseconds out{0};
  CHECK(ReadDuration(&reader, ValueOf("250ms"), &out));
  CHECK(out == std::chrono::milliseconds(250));
  CHECK(ReadDuration(&reader, ValueOf("2m"), &out));
  CHECK(out == std::chrono::minutes(2));
  CHECK(ErrorOf(reader).empty());

  YamlReader bad("t.yaml");
  CHECK_FALSE(ReadDuration(&bad, ValueOf("30"), &out));
  CHECK(ErrorOf(bad) ==
        "t.yaml:1:6: key: \"30\" has no unit; durations need one, e.g. "
        "\"30s\" or \"30ms\"");
  YamlReader negative("t.yaml");
  CHECK_FALSE(ReadDuration(&negative, ValueOf("-1s"), &out));
  CHECK(ErrorOf(negative) == "t.yaml:1:6: key: must be positive, got \"-1s\"");
}

TEST_CASE("ReadBytes takes units within its range", "[config]") {
  YamlReader reader("t.yaml");
  int64_t out = 0;
  CHECK(
      ReadBytes(&reader, ValueOf("4KiB"), 1024, 1 << 20, "1KiB to 1MiB", &out));
  CHECK(out == 4096);
  CHECK(
      ReadBytes(&reader, ValueOf("2048"), 1024, 1 << 20, "1KiB to 1MiB", &out));
  CHECK(out == 2048);
  CHECK(ErrorOf(reader).empty());
  YamlReader big("t.yaml");
  CHECK_FALSE(
      ReadBytes(&big, ValueOf("2MiB"), 1024, 1 << 20, "1KiB to 1MiB", &out));
  CHECK(ErrorOf(big) ==
        "t.yaml:1:6: key: must be from 1024 to 1048576 (1KiB to 1MiB), got "
        "\"2MiB\"");
}

TEST_CASE("ReadOneOf, ReadBool and ReadInt report the allowed values",
          "[config]") {
  YamlReader reader("t.yaml");
  constexpr const char* kAllowed[] = {"text", "json"};
  std::string word;
  CHECK(ReadOneOf(&reader, ValueOf("json"), kAllowed, &word));
  CHECK(word == "json");
  bool flag = false;
  CHECK(ReadBool(&reader, ValueOf("True"), &flag));
  CHECK(flag);
  int number = 0;
  CHECK(ReadInt(&reader, ValueOf("7"), 1, 10, &number));
  CHECK(number == 7);
  CHECK(ErrorOf(reader).empty());

  YamlReader bad("t.yaml");
  CHECK_FALSE(ReadOneOf(&bad, ValueOf("xml"), kAllowed, &word));
  CHECK_FALSE(ReadBool(&bad, ValueOf("yes"), &flag));
  CHECK_FALSE(ReadInt(&bad, ValueOf("11"), 1, 10, &number));
  CHECK(ErrorOf(bad) ==
        "t.yaml:1:6: key: expected one of text, json, got \"xml\"\n"
        "t.yaml:1:6: key: expected true or false, got \"yes\"\n"
        "t.yaml:1:6: key: must be from 1 to 10, got 11");
}

TEST_CASE("ReadFileMode wants octal with the owner's read and write",
          "[config]") {
  YamlReader reader("t.yaml");
  int mode = 0;
  CHECK(ReadFileMode(&reader, ValueOf("\"0660\""), &mode));
  CHECK(mode == 0660);
  YamlReader bad("t.yaml");
  CHECK_FALSE(ReadFileMode(&bad, ValueOf("\"0460\""), &mode));
  CHECK(ErrorOf(bad) ==
        "t.yaml:1:6: key: \"0460\" leaves the daemon's own user without read "
        "and write; give it at least 0600");
}

}  // namespace
}  // namespace aggregator
