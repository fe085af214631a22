#include "lib/base/port_holder.h"

#include <dirent.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>

namespace aggregator {
namespace {

constexpr char kListenState[] = "0A";  // TCP_LISTEN in /proc/net/tcp

// The socket inodes listening on `port`, from one /proc/net/tcp* table.
void ListeningInodes(const char* table, int port, std::set<std::string>* out) {
  std::ifstream in(table);
  std::string line;
  std::getline(in, line);  // the header
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string slot, local, remote, state, queues, timer, retransmits, uid,
        timeout, inode;
    if (!(fields >> slot >> local >> remote >> state >> queues >> timer >>
          retransmits >> uid >> timeout >> inode)) {
      continue;
    }
    const size_t colon = local.rfind(':');
    if (state != kListenState || colon == std::string::npos) continue;
    if (std::strtol(local.c_str() + colon + 1, nullptr, 16) == port) {
      out->insert("socket:[" + inode + "]");
    }
  }
}

// Whether process `pid` has one of `sockets` open.
bool HoldsSocket(const std::string& pid, const std::set<std::string>& sockets) {
  const std::string fd_dir = "/proc/" + pid + "/fd";
  std::unique_ptr<DIR, int (*)(DIR*)> dir(opendir(fd_dir.c_str()), closedir);
  if (dir == nullptr) return false;
  while (const dirent* entry = readdir(dir.get())) {
    char target[PATH_MAX];
    const std::string link = fd_dir + "/" + entry->d_name;
    const ssize_t n = readlink(link.c_str(), target, sizeof(target) - 1);
    if (n > 0 && sockets.count(std::string(target, static_cast<size_t>(n)))) {
      return true;
    }
  }
  return false;
}

}  // namespace

std::string DescribePortHolder(int port) {
  std::set<std::string> sockets;
  ListeningInodes("/proc/net/tcp", port, &sockets);
  ListeningInodes("/proc/net/tcp6", port, &sockets);
  if (sockets.empty()) return "";
  std::unique_ptr<DIR, int (*)(DIR*)> proc(opendir("/proc"), closedir);
  if (proc == nullptr) return "";
  while (const dirent* entry = readdir(proc.get())) {
    const std::string pid = entry->d_name;
    if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
    if (!HoldsSocket(pid, sockets)) continue;
    std::ifstream comm("/proc/" + pid + "/comm");
    std::string name;
    std::getline(comm, name);
    return "pid " + pid + (name.empty() ? "" : " (" + name + ")");
  }
  return "";
}

}  // namespace aggregator
