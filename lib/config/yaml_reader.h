// The walk every section reader shares: one YAML document read into Fields
// (a node, where it was written, its path), maps and lists checked key by key,
// and every problem collected as "<source>:<line>:<column>: <path>: <what>".
#ifndef LIB_CONFIG_YAML_READER_H_
#define LIB_CONFIG_YAML_READER_H_

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "yaml-cpp/yaml.h"

namespace aggregator {

// One value of the document: its node, where errors about it point, and its
// path ("learners[2].address"; empty for the whole document).
struct Field {
  YAML::Node node;
  YAML::Mark mark;
  std::string path;
};

// How a node is described in "expected X, got Y" messages.
std::string Describe(const YAML::Node& node);
// `text` in double quotes.
std::string Quote(absl::string_view text);
// "<line>:<column>", 1-based.
std::string Position(const YAML::Mark& mark);
// `text` with its control characters escaped (\n, \t, \r, \xNN), so an
// error stays on one line and cannot drive a terminal, whatever the file held.
std::string Printable(absl::string_view text);

// The keys each map section accepts, by path: "" for the top level,
// "connect.backoff", "workers[]" for each item of a list.
using KeyTables = std::map<std::string, std::vector<std::string>>;

class YamlReader {
 public:
  // A key of a map section and the reader of its value.
  struct Key {
    const char* name;
    std::function<void(const Field&)> read;
  };

  // `source` names the text in error messages.
  explicit YamlReader(std::string source) : source_(std::move(source)) {}

  const std::string& source() const { return source_; }

  // Probing: ReadMap records its keys in `tables` and calls every key's reader
  // with a stand-in value, and ReadList reads one stand-in item, so that
  // reading a stand-in document visits every section. Errors are dropped.
  void Probe(KeyTables* tables) { probe_ = tables; }
  bool probing() const { return probe_ != nullptr; }
  // A stand-in value: a map of one key (what any map or list item reader
  // accepts far enough to reach its own ReadMap).
  static Field ProbeField(std::string path);

  // The one document of `yaml` as a map, or nullopt when it is empty (the
  // default configuration) or not usable (reported).
  std::optional<Field> ReadDocument(const std::string& yaml);

  // Checks that `field` is a map whose keys are all in `keys`, each at most
  // once, and calls each key's reader. An empty section ("connect:") keeps
  // every default.
  void ReadMap(const Field& field, const std::vector<Key>& keys);

  // The walk every map shares: `field` must be `expected` (a map) or empty;
  // each key must be a scalar (`key_kind` says what kind) and appear once.
  // `entry` gets each key's name, its position and its value as a Field whose
  // path is "<field path>.<name>".
  void ForEachEntry(
      const Field& field, const char* expected, const char* key_kind,
      const std::function<void(const std::string&, const YAML::Mark&,
                               const Field&)>& entry);

  // Calls `read` on each item of the list `field`; an empty value is no items.
  void ReadList(const Field& field,
                const std::function<void(const Field&)>& read);

  void Error(const Field& field, absl::string_view message);
  void Error(const YAML::Mark& mark, absl::string_view path,
             absl::string_view message);

  // OK when nothing was reported; else INVALID_ARGUMENT listing every error,
  // one per line, in document order (stable: cross-field checks come last
  // among errors at the same place).
  absl::Status Result() const;

 private:
  struct Problem {
    int line;
    int column;
    std::string text;
  };

  // False, reported, unless the stream holds at most one document with
  // content.
  bool CheckOneDocument(const std::string& yaml);

  std::string source_;
  std::vector<Problem> errors_;
  KeyTables* probe_ = nullptr;
};

}  // namespace aggregator

#endif  // LIB_CONFIG_YAML_READER_H_
