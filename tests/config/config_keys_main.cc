// Prints the key tables the loader's section readers accept (ConfigKeys) as
// one JSON object, {"<path>": ["key", ...]}, for aggregator_schema_test.py.
#include <iostream>
#include <string>

#include "lib/config/config_loader.h"

namespace {

// Paths and keys are plain names; quote them anyway.
std::string Json(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

}  // namespace

int main() {
  const char* separator = "";
  std::cout << "{";
  for (const auto& [path, keys] : aggregator::ConfigKeys()) {
    std::cout << separator << "\n  " << Json(path) << ": [";
    const char* comma = "";
    for (const std::string& key : keys) {
      std::cout << comma << Json(key);
      comma = ", ";
    }
    std::cout << "]";
    separator = ",";
  }
  std::cout << "\n}\n";
  return 0;
}
