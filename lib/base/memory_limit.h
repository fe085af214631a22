// How much memory this process may use: the smaller of the machine's memory
// and the memory limit of its cgroup (v2 memory.max, or v1
// memory.limit_in_bytes), as a container or a systemd MemoryMax= sets it.
#ifndef LIB_BASE_MEMORY_LIMIT_H_
#define LIB_BASE_MEMORY_LIMIT_H_

#include <cstdint>
#include <string>

namespace aggregator {

struct MemoryLimit {
  int64_t bytes = 0;
  std::string source;  // "physical memory" or the cgroup file it came from
};

// Reads /proc/meminfo and /proc/self/cgroup's memory limit under `root`
// ("" for the real files; tests pass a directory that mimics them).
MemoryLimit ProcessMemoryLimit(const std::string& root = "");

}  // namespace aggregator

#endif  // LIB_BASE_MEMORY_LIMIT_H_
