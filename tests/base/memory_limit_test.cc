// ProcessMemoryLimit: the smaller of physical memory and the cgroup's limit,
// read from a directory laid out like / .
#include "lib/base/memory_limit.h"

#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <string>

#include "tests/testing/process_helpers.h"

namespace aggregator {
namespace {

void Write(const std::string& root, const std::string& path,
           const std::string& text) {
  std::string dir = root;
  for (size_t at = 1; (at = path.find('/', at)) != std::string::npos; ++at) {
    mkdir((root + path.substr(0, at)).c_str(), 0755);
  }
  testing::WriteFile(root + path, text);
}

std::string Root(const std::string& cgroup) {
  const std::string root = testing::TempDir();
  Write(root, "/proc/meminfo",
        "MemTotal:       16384 kB\nMemFree:         1024 kB\n");
  Write(root, "/proc/self/cgroup", cgroup);
  return root;
}

TEST_CASE("Without a cgroup limit the machine's memory is the limit") {
  const std::string root = Root("0::/system.slice/a.service\n");
  Write(root, "/sys/fs/cgroup/system.slice/a.service/memory.max", "max\n");
  const MemoryLimit limit = ProcessMemoryLimit(root);
  CHECK(limit.bytes == 16384 * 1024);
  CHECK(limit.source == "physical memory");
}

TEST_CASE("A cgroup v2 memory.max below the machine's memory wins") {
  const std::string root = Root("0::/docker/abc\n");
  Write(root, "/sys/fs/cgroup/docker/abc/memory.max", "4194304\n");
  const MemoryLimit limit = ProcessMemoryLimit(root);
  CHECK(limit.bytes == 4194304);
  CHECK(limit.source == root + "/sys/fs/cgroup/docker/abc/memory.max");
}

TEST_CASE("A cgroup v1 limit counts; v1's 'no limit' figure does not") {
  std::string root = Root("5:cpu,cpuacct:/x\n4:memory:/docker/abc\n");
  Write(root, "/sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes",
        "2097152\n");
  CHECK(ProcessMemoryLimit(root).bytes == 2097152);
  root = Root("4:memory:/\n");
  Write(root, "/sys/fs/cgroup/memory/memory.limit_in_bytes",
        "9223372036854771712\n");
  CHECK(ProcessMemoryLimit(root).bytes == 16384 * 1024);
}

TEST_CASE("This process has a limit") { CHECK(ProcessMemoryLimit().bytes > 0); }

}  // namespace
}  // namespace aggregator
