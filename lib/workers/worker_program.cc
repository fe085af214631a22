#include "lib/workers/worker_program.h"

#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/string_view.h"

namespace aggregator {
namespace {

bool Exists(const std::string& path) {
  struct stat info;
  return stat(path.c_str(), &info) == 0;
}

}  // namespace

std::string ExpandWorkerTemplate(std::string_view text, const WorkerSpec& spec,
                                 int index) {
  return absl::StrReplaceAll(absl::string_view(text.data(), text.size()),
                             {{"{index}", absl::StrCat(index)},
                              {"{port}", absl::StrCat(spec.port_base + index)},
                              {"{name}", spec.name}});
}

absl::StatusOr<std::string> ResolveWorkerProgram(
    const std::string& program, const std::string& working_dir,
    const std::vector<std::string>& program_dirs) {
  if (program.find('/') == std::string::npos || program[0] == '/') {
    return program;
  }
  const std::string in_working_dir = absl::StrCat(working_dir, "/", program);
  if (Exists(in_working_dir)) return in_working_dir;
  for (const std::string& dir : program_dirs) {
    const std::string in_runfiles = absl::StrCat(dir, "/", program);
    if (Exists(in_runfiles)) return in_runfiles;
  }
  return absl::NotFoundError(
      absl::StrCat("cannot find the program '", program,
                   "' in the working directory ", working_dir,
                   program_dirs.empty()
                       ? " (and aggregatord has no runfiles directory)"
                       : absl::StrCat(" or in the runfiles director",
                                      program_dirs.size() == 1 ? "y " : "ies ",
                                      absl::StrJoin(program_dirs, ", "))));
}

absl::StatusOr<SubprocessOptions> ReplicaSubprocessOptions(
    const WorkerSpec& spec, int index,
    const std::vector<std::string>& program_dirs) {
  if (spec.command.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker \"", spec.name, "\" has an empty command"));
  }
  SubprocessOptions options;
  for (const std::string& arg : spec.command) {
    options.argv.push_back(ExpandWorkerTemplate(arg, spec, index));
  }
  for (const auto& [key, value] : spec.env) {
    options.env.emplace_back(key, ExpandWorkerTemplate(value, spec, index));
  }
  if (!spec.cwd.empty()) {
    options.cwd = ExpandWorkerTemplate(spec.cwd, spec, index);
  }
  char working_dir[PATH_MAX];
  if (getcwd(working_dir, sizeof(working_dir)) == nullptr) {
    return absl::ErrnoToStatus(
        errno, "cannot read the daemon's working directory to find '" +
                   options.argv[0] + "'");
  }
  absl::StatusOr<std::string> program =
      ResolveWorkerProgram(options.argv[0], working_dir, program_dirs);
  if (!program.ok()) return program.status();
  options.argv[0] = *std::move(program);
  options.capture_output = true;
  options.new_process_group = true;
  options.die_with_parent = true;
  return options;
}

}  // namespace aggregator
