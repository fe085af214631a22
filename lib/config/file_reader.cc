#include "lib/config/file_reader.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>

#include "absl/strings/str_cat.h"

namespace aggregator {
namespace {

// What a path that is not a regular file is, for the error message.
const char* FileKind(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

}  // namespace

absl::Status ReadBoundedFile(const std::string& path, absl::string_view what,
                             std::string* out) {
  const std::string context = absl::StrCat(path, ": cannot read ", what);
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return absl::ErrnoToStatus(errno, context);
  struct stat info;
  absl::Status status;
  if (fstat(fd, &info) != 0) {
    status = absl::ErrnoToStatus(errno, context);
  } else if (!S_ISREG(info.st_mode)) {
    status = absl::InvalidArgumentError(absl::StrCat(
        context, ": it is ", FileKind(info.st_mode), ", not a regular file"));
  } else if (static_cast<uint64_t>(info.st_size) > kMaxConfigFileBytes) {
    status = absl::InvalidArgumentError(
        absl::StrCat(context, ": larger than 16MiB, not a ", what));
  }
  char buffer[64 * 1024];
  while (status.ok()) {
    ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      status = absl::ErrnoToStatus(errno, context);
      break;
    }
    if (n == 0) break;
    out->append(buffer, static_cast<size_t>(n));
    if (out->size() > kMaxConfigFileBytes) {
      status = absl::InvalidArgumentError(
          absl::StrCat(context, ": larger than 16MiB, not a ", what));
    }
  }
  close(fd);
  return status;
}

}  // namespace aggregator
