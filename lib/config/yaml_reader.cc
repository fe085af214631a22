#include "lib/config/yaml_reader.h"

#include <algorithm>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "yaml-cpp/eventhandler.h"

namespace aggregator {
namespace {

// Where each YAML document of a stream starts and whether it holds anything:
// the events of yaml-cpp's parser, nothing built.
class DocumentWalker : public YAML::EventHandler {
 public:
  struct Document {
    YAML::Mark start;
    YAML::Mark content;  // the first node's mark
    bool empty = true;
  };
  std::vector<Document> documents;

  void OnDocumentStart(const YAML::Mark& mark) override {
    documents.push_back({mark, mark, true});
  }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& mark, YAML::anchor_t) override {
    Node(mark, /*empty=*/true);
  }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t) override {
    Node(mark, false);
  }
  void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                const std::string&) override {
    Node(mark, false);
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string&,
                       YAML::anchor_t, YAML::EmitterStyle::value) override {
    Node(mark, false);
  }
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {
    Node(mark, false);
  }
  void OnMapEnd() override {}

 private:
  void Node(const YAML::Mark& mark, bool empty) {
    Document& document = documents.back();
    if (document.empty && !empty) document.content = mark;
    document.empty = document.empty && empty;
  }
};

}  // namespace

std::string Describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Scalar:
      return absl::StrCat("\"", node.Scalar(), "\"");
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Map:
      return "a map";
    default:
      return "nothing";
  }
}

std::string Quote(absl::string_view text) {
  return absl::StrCat("\"", text, "\"");
}

std::string Position(const YAML::Mark& mark) {
  return absl::StrCat(mark.line + 1, ":", mark.column + 1);
}

std::string Printable(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x20 && byte != 0x7f) {
      out.push_back(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else {
      absl::StrAppendFormat(&out, "\\x%02x", byte);
    }
  }
  return out;
}

Field YamlReader::ProbeField(std::string path) {
  YAML::Node node(YAML::NodeType::Map);
  node["probe"] = YAML::Node(YAML::NodeType::Map);
  return Field{node, YAML::Mark::null_mark(), std::move(path)};
}

// The documents are walked here rather than by YAML::LoadAll: on some
// malformed input ("," alone) yaml-cpp 0.7 returns an empty document forever
// without moving on, and LoadAll collects them until memory runs out. A
// document that starts where the one before it did is that case.
bool YamlReader::CheckOneDocument(const std::string& yaml) {
  std::istringstream stream(yaml);
  YAML::Parser parser(stream);
  DocumentWalker walker;
  try {
    while (parser.HandleNextDocument(walker)) {
      const std::vector<DocumentWalker::Document>& seen = walker.documents;
      if (seen.size() >= 2 &&
          seen.back().start.pos == seen[seen.size() - 2].start.pos) {
        Error(seen.back().start, "",
              "YAML syntax error: unexpected character; a value or a "
              "\"key: value\" was expected");
        return false;
      }
      if (seen.size() >= 2 && !seen.back().empty) {
        Error(seen.back().content, "",
              "only one YAML document is allowed; remove the \"---\" "
              "separator");
        return false;
      }
    }
  } catch (const YAML::ParserException& e) {
    Error(e.mark, "", absl::StrCat("YAML syntax error: ", e.msg));
    return false;
  }
  return true;
}

std::optional<Field> YamlReader::ReadDocument(const std::string& yaml) {
  if (!CheckOneDocument(yaml)) return std::nullopt;
  YAML::Node document;
  try {
    document = YAML::Load(yaml);
  } catch (const YAML::ParserException& e) {
    Error(e.mark, "", absl::StrCat("YAML syntax error: ", e.msg));
    return std::nullopt;
  }
  // An empty file, or one of only comments, is the default configuration.
  if (document.IsNull()) return std::nullopt;
  Field root{document, document.Mark(), ""};
  if (!root.node.IsMap()) {
    Error(root, absl::StrCat("expected a map of settings (key: value), got ",
                             Describe(root.node)));
    return std::nullopt;
  }
  return root;
}

void YamlReader::ReadMap(const Field& field, const std::vector<Key>& keys) {
  if (probe_ != nullptr) {
    std::vector<std::string>& names = (*probe_)[field.path];
    for (const Key& key : keys) {
      if (std::find(names.begin(), names.end(), key.name) == names.end()) {
        names.push_back(key.name);
      }
    }
    for (const Key& key : keys) {
      key.read(ProbeField(field.path.empty()
                              ? key.name
                              : absl::StrCat(field.path, ".", key.name)));
    }
    return;
  }
  ForEachEntry(
      field, "a map", "names",
      [&](const std::string& name, const YAML::Mark& key, const Field& value) {
        for (const Key& candidate : keys) {
          if (name == candidate.name) return candidate.read(value);
        }
        std::vector<std::string> allowed;
        for (const Key& candidate : keys) {
          allowed.push_back(candidate.name);
        }
        Error(key, value.path,
              absl::StrCat("unknown key; allowed here: ",
                           absl::StrJoin(allowed, ", ")));
      });
}

void YamlReader::ForEachEntry(
    const Field& field, const char* expected, const char* key_kind,
    const std::function<void(const std::string&, const YAML::Mark&,
                             const Field&)>& entry) {
  if (field.node.IsNull()) return;
  if (!field.node.IsMap()) {
    Error(field,
          absl::StrCat("expected ", expected, ", got ", Describe(field.node)));
    return;
  }
  std::map<std::string, YAML::Mark> seen;
  for (YAML::const_iterator it = field.node.begin(); it != field.node.end();
       ++it) {
    const YAML::Node key = it->first;
    if (!key.IsScalar()) {
      Error(key.Mark(), field.path,
            absl::StrCat("keys must be ", key_kind, ", got ", Describe(key)));
      continue;
    }
    const std::string& name = key.Scalar();
    const std::string path =
        field.path.empty() ? name : absl::StrCat(field.path, ".", name);
    auto [first, inserted] = seen.emplace(name, key.Mark());
    if (!inserted) {
      Error(key.Mark(), path,
            absl::StrCat("duplicate key, first at ", Position(first->second)));
      continue;
    }
    // An empty value ("key:") has no position of its own: point at its key.
    const YAML::Node value = it->second;
    entry(name, key.Mark(),
          Field{value, value.IsNull() ? key.Mark() : value.Mark(), path});
  }
}

void YamlReader::ReadList(const Field& field,
                          const std::function<void(const Field&)>& read) {
  if (probe_ != nullptr) {
    read(ProbeField(absl::StrCat(field.path, "[]")));
    return;
  }
  if (field.node.IsNull()) return;
  if (!field.node.IsSequence()) {
    Error(field, absl::StrCat("expected a list, got ", Describe(field.node)));
    return;
  }
  for (size_t i = 0; i < field.node.size(); ++i) {
    const YAML::Node item = field.node[i];
    read(Field{item, item.IsNull() ? field.mark : item.Mark(),
               absl::StrCat(field.path, "[", i, "]")});
  }
}

void YamlReader::Error(const Field& field, absl::string_view message) {
  Error(field.mark, field.path, message);
}

void YamlReader::Error(const YAML::Mark& mark, absl::string_view path,
                       absl::string_view message) {
  if (probe_ != nullptr) return;
  std::string text = source_;
  if (!mark.is_null()) absl::StrAppend(&text, ":", Position(mark));
  if (!path.empty()) absl::StrAppend(&text, ": ", path);
  absl::StrAppend(&text, ": ", message);
  errors_.push_back(Problem{mark.line, mark.column, Printable(text)});
}

absl::Status YamlReader::Result() const {
  if (errors_.empty()) return absl::OkStatus();
  std::vector<Problem> sorted = errors_;
  // Document order reads best; cross-field checks are added last.
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const Problem& a, const Problem& b) {
                     return std::make_pair(a.line, a.column) <
                            std::make_pair(b.line, b.column);
                   });
  std::vector<std::string> lines;
  lines.reserve(sorted.size());
  for (const Problem& problem : sorted) lines.push_back(problem.text);
  return absl::InvalidArgumentError(absl::StrJoin(lines, "\n"));
}

}  // namespace aggregator
