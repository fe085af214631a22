// The filesystem side of a listener on a unix socket, which gRPC leaves to
// us: gRPC unlinks the path before it binds, so a second daemon would take
// over a live socket and the first would run on, reachable by nobody. Claim()
// refuses a path another process is listening on and removes a stale one;
// Restrict() gives the bound socket its mode; the destructor removes it, if it
// is still the one bound here.
#ifndef LIB_SERVER_UNIX_LISTENER_H_
#define LIB_SERVER_UNIX_LISTENER_H_

#include <sys/types.h>

#include <string>

#include "absl/status/status.h"

namespace aggregator {

class UnixListenerPath {
 public:
  // `what` names the listener in messages ("listen", "admin.listen").
  UnixListenerPath(std::string path, std::string what);
  ~UnixListenerPath();
  UnixListenerPath(const UnixListenerPath&) = delete;
  UnixListenerPath& operator=(const UnixListenerPath&) = delete;

  // Before binding: OK when the path is free (a stale socket nobody listens
  // on is removed); UNAVAILABLE when another process listens on it;
  // FAILED_PRECONDITION when it is something other than a socket.
  absl::Status Claim();

  // After binding: sets the socket's permissions and remembers it as ours.
  absl::Status Restrict(mode_t mode);

 private:
  const std::string path_;
  const std::string what_;
  // The bound socket's identity: only it is removed at the end.
  dev_t device_ = 0;
  ino_t inode_ = 0;
  // An O_PATH descriptor of the bound socket's file, held until the end (-1:
  // none). While it is open the inode is not freed, so its number cannot go
  // to a socket another daemon binds at the path once ours was removed (ext4
  // gives a freed inode's number out again at once): a matching device and
  // inode then really is ours.
  int pinned_ = -1;
};

}  // namespace aggregator

#endif  // LIB_SERVER_UNIX_LISTENER_H_
