// Reading the small files a configuration names (itself, its PEM files) with
// limits: never blocking on a FIFO or device, never more than 16 MiB.
#ifndef LIB_CONFIG_FILE_READER_H_
#define LIB_CONFIG_FILE_READER_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace aggregator {

// A configuration is a few KiB; this keeps `--config /dev/zero` from hanging.
constexpr size_t kMaxConfigFileBytes = size_t{16} << 20;

// Appends all of `path` to `out`, or says why not: "<path>: cannot read
// <what>: ..." (errno's text, the status code from errno). Opened without
// blocking and refused unless it is a regular file, so a FIFO or a device at
// the path cannot stall the reader; a file over 16 MiB is INVALID_ARGUMENT.
absl::Status ReadBoundedFile(const std::string& path, absl::string_view what,
                             std::string* out);

}  // namespace aggregator

#endif  // LIB_CONFIG_FILE_READER_H_
