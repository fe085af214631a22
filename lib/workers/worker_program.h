// What a worker replica runs: its spec's templates expanded for the replica
// and its program found, as Subprocess options.
#ifndef LIB_WORKERS_WORKER_PROGRAM_H_
#define LIB_WORKERS_WORKER_PROGRAM_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/config/config.h"
#include "lib/process/subprocess.h"

namespace aggregator {

// `text` with "{index}", "{port}" (port_base + index) and "{name}" replaced;
// any other text in braces is kept as written.
std::string ExpandWorkerTemplate(std::string_view text, const WorkerSpec& spec,
                                 int index);

// Where a worker's program is run from. A name without '/' is left for the
// PATH lookup, and an absolute path is kept. A relative path with '/' is
// `working_dir`/program if that exists, else the first `program_dirs`/program
// that exists (the daemon passes its Bazel runfiles directories); otherwise
// NOT_FOUND naming every place looked in. The result is absolute, so a
// worker's own `cwd` does not change what runs.
absl::StatusOr<std::string> ResolveWorkerProgram(
    const std::string& program, const std::string& working_dir,
    const std::vector<std::string>& program_dirs);

// The Subprocess options of replica `index` of `spec`: templates expanded, the
// program resolved (against the daemon's working directory, then
// `program_dirs`), output captured, own process group, dies with the daemon.
absl::StatusOr<SubprocessOptions> ReplicaSubprocessOptions(
    const WorkerSpec& spec, int index,
    const std::vector<std::string>& program_dirs);

}  // namespace aggregator

#endif  // LIB_WORKERS_WORKER_PROGRAM_H_
