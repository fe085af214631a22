#include "lib/base/memory_limit.h"

#include <fstream>
#include <sstream>

namespace aggregator {
namespace {

std::string ReadFirstLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// A limit file's value in bytes, or 0 when it says "max" (no limit) or
// nothing readable.
int64_t LimitIn(const std::string& path) {
  const std::string text = ReadFirstLine(path);
  if (text.empty() || text == "max") return 0;
  try {
    const long long value = std::stoll(text);
    return value > 0 ? value : 0;
  } catch (const std::exception&) {
    return 0;
  }
}

int64_t PhysicalMemory(const std::string& root) {
  std::ifstream in(root + "/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  while (in >> key) {
    if (key == "MemTotal:" && in >> kib) return kib * 1024;
    in.ignore(1 << 20, '\n');
  }
  return 0;
}

}  // namespace

MemoryLimit ProcessMemoryLimit(const std::string& root) {
  MemoryLimit limit{PhysicalMemory(root), "physical memory"};
  // "0::/path" (v2) or "N:memory:/path" (v1) lines name our cgroup.
  std::ifstream cgroups(root + "/proc/self/cgroup");
  for (std::string line; std::getline(cgroups, line);) {
    const size_t first = line.find(':');
    const size_t second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1);
    const std::string path = line.substr(second + 1);
    std::string file;
    if (controllers.empty()) {
      file = root + "/sys/fs/cgroup" + path + "/memory.max";
    } else if (("," + controllers + ",").find(",memory,") !=
               std::string::npos) {
      file = root + "/sys/fs/cgroup/memory" + path + "/memory.limit_in_bytes";
    } else {
      continue;
    }
    const int64_t bytes = LimitIn(file);
    // v1 reports "no limit" as a huge number: the physical figure wins then.
    if (bytes > 0 && (limit.bytes == 0 || bytes < limit.bytes)) {
      limit = {bytes, file};
    }
  }
  return limit;
}

}  // namespace aggregator
