#include "tools/bench/bench_processes.h"

#include <dirent.h>
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "tools/bench/bench_report.h"

namespace aggregator {
namespace {

constexpr std::chrono::seconds kStopGrace(2);
// Lines kept from a daemon's output; old ones are dropped beyond this.
constexpr size_t kMaxLines = 20000;

// The text after the last space: "... listening on 127.0.0.1:5" -> address.
std::string LastWord(const std::string& line) {
  return line.substr(line.rfind(' ') + 1);
}

// The word after `prefix` (present in `line`): "admin on 127.0.0.1:5 (TLS)".
std::string WordAfter(const std::string& line, const std::string& prefix) {
  const size_t start = line.find(prefix) + prefix.size();
  return line.substr(start, line.find(' ', start) - start);
}

std::string ReadWholeFile(const std::string& path, bool* ok) {
  std::ifstream in(path);
  *ok = in.good();
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

absl::StatusOr<std::unique_ptr<LearnerProcess>> LearnerProcess::Spawn(
    const std::string& binary, int64_t batch_size, const ChildEnv& env,
    const std::string& host) {
  return SpawnServer({binary, "--listen", absl::StrCat(host, ":0"),
                      "--batch-size", absl::StrCat(batch_size)},
                     env, "example_learner");
}

absl::StatusOr<std::unique_ptr<LearnerProcess>> LearnerProcess::SpawnServer(
    std::vector<std::string> argv, const ChildEnv& env, std::string name) {
  SubprocessOptions options;
  options.argv = std::move(argv);
  options.env = env.vars;
  auto process = Subprocess::Start(options);
  if (!process.ok()) return process.status();
  return std::unique_ptr<LearnerProcess>(
      new LearnerProcess(std::move(*process), std::move(name)));
}

LearnerProcess::~LearnerProcess() { process_->Stop(kStopGrace); }

absl::Status LearnerProcess::WaitListening(BenchClock::time_point deadline) {
  const std::string prefix = name_ + " listening on ";
  while (true) {
    auto line = process_->ReadLine(deadline);
    if (!line.ok()) {
      return absl::Status(line.status().code(),
                          absl::StrCat(name_, " (pid ", process_->pid(),
                                       ") did not report its address: ",
                                       line.status().message()));
    }
    if (absl::StartsWith(*line, prefix)) {
      address_ = LastWord(*line);
      return absl::OkStatus();
    }
  }
}

absl::StatusOr<LearnerSet> LearnerSet::Start(const std::string& binary,
                                             int count, int64_t batch_size,
                                             const ChildEnv& env,
                                             BenchClock::time_point deadline,
                                             const std::string& host) {
  LearnerSet set;
  for (int i = 0; i < count; ++i) {
    auto learner = LearnerProcess::Spawn(binary, batch_size, env, host);
    if (!learner.ok()) return learner.status();
    set.learners_.push_back(std::move(*learner));
  }
  for (auto& learner : set.learners_) {
    if (absl::Status s = learner->WaitListening(deadline); !s.ok()) return s;
  }
  return set;
}

std::vector<std::string> LearnerSet::Addresses(size_t count) const {
  std::vector<std::string> addresses;
  for (size_t i = 0; i < count && i < learners_.size(); ++i) {
    addresses.push_back(learners_[i]->address());
  }
  return addresses;
}

void LearnerSet::StopAll() {
  // Signal every learner before waiting for any, so their exits overlap.
  for (auto& learner : learners_) {
    (void)learner->process().Signal(SIGTERM, /*group=*/true);
  }
  const auto deadline = BenchClock::now() + std::chrono::seconds(5);
  for (auto& learner : learners_) (void)learner->process().Wait(deadline);
  learners_.clear();  // each destructor SIGKILLs a straggler and reaps it
}

std::string BenchConfigYaml(const std::vector<std::string>& addresses) {
  std::string yaml = "listen: \"127.0.0.1:0\"\nlearners:\n";
  for (size_t i = 0; i < addresses.size(); ++i) {
    absl::StrAppend(&yaml, "  - id: learner", i, "\n    address: \"",
                    addresses[i], "\"\n");
  }
  absl::StrAppend(&yaml, "min_learners: ", addresses.size(), "\n");
  // The learners already answer: a refused first attempt (none expected) is
  // retried within milliseconds rather than gRPC's default second.
  yaml +=
      "connect:\n"
      "  timeout: 20s\n"
      "  attempt_timeout: 5s\n"
      "  backoff:\n"
      "    initial: 5ms\n"
      "    multiplier: 1.6\n"
      "    jitter: 0.2\n"
      "    max: 100ms\n"
      "call_timeout: 120s\n"
      "max_message_bytes: 1GiB\n"
      "metrics: {listen: \"\"}\n"
      "admin: {listen: \"\"}\n"
      "log:\n"
      "  level: info\n";
  return yaml;
}

absl::StatusOr<std::unique_ptr<DaemonProcess>> DaemonProcess::Spawn(
    const std::string& binary, const std::string& config_path,
    const ChildEnv& env, const std::string& listen) {
  SubprocessOptions options;
  options.argv = {binary, "--config", config_path, "--listen", listen};
  options.env = env.vars;
  std::unique_ptr<DaemonProcess> daemon(new DaemonProcess());
  daemon->wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (daemon->wake_fd_ < 0) {
    return absl::ErrnoToStatus(errno, "eventfd for the daemon reader");
  }
  daemon->spawned_ = BenchClock::now();
  auto process = Subprocess::Start(options);
  if (!process.ok()) return process.status();
  daemon->process_ = std::move(*process);
  daemon->pid_ = daemon->process_->pid();
  daemon->stdout_fd_ = daemon->process_->stdout_fd();
  daemon->stderr_fd_ = daemon->process_->stderr_fd();
  // Raw reads of the two pipe fds only: Subprocess's own line buffers are not
  // touched from this thread, and the fds stay open until the thread is
  // joined (the destructor joins it before destroying process_).
  daemon->reader_ = std::thread([raw = daemon.get()] { raw->ReadOutput(); });
  return daemon;
}

DaemonProcess::~DaemonProcess() {
  if (process_ != nullptr) process_->Stop(kStopGrace);
  if (reader_.joinable()) {
    const uint64_t one = 1;
    (void)!write(wake_fd_, &one, sizeof(one));
    reader_.join();
  }
  if (wake_fd_ >= 0) close(wake_fd_);
}

void DaemonProcess::ReadOutput() {
  std::string partial[2];
  bool open[2] = {stdout_fd_ >= 0, stderr_fd_ >= 0};
  const int fds[2] = {stdout_fd_, stderr_fd_};
  while (open[0] || open[1]) {
    pollfd polled[3] = {{open[0] ? fds[0] : -1, POLLIN, 0},
                        {open[1] ? fds[1] : -1, POLLIN, 0},
                        {wake_fd_, POLLIN, 0}};
    if (poll(polled, 3, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (polled[2].revents != 0) break;
    for (int i = 0; i < 2; ++i) {
      if (!open[i] || polled[i].revents == 0) continue;
      char chunk[8192];
      const ssize_t n = read(fds[i], chunk, sizeof(chunk));
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (n <= 0) {
        open[i] = false;
        if (!partial[i].empty()) partial[i] += '\n';
      } else {
        partial[i].append(chunk, n);
      }
      const auto now = BenchClock::now();
      MutexLock lock(&mu_);
      size_t newline;
      while ((newline = partial[i].find('\n')) != std::string::npos) {
        lines_.push_back(Line{partial[i].substr(0, newline), now});
        partial[i].erase(0, newline + 1);
      }
      if (lines_.size() > kMaxLines) {
        lines_.erase(lines_.begin(), lines_.begin() + lines_.size() / 2);
      }
    }
  }
  MutexLock lock(&mu_);
  reader_done_ = true;
}

absl::StatusOr<DaemonProcess::Line> DaemonProcess::WaitForLine(
    const std::string& needle, BenchClock::time_point deadline) {
  MutexLock lock(&mu_);
  size_t next = 0;
  // New lines, or the end of the output.
  auto news = [this, &next]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return next < lines_.size() || reader_done_;
  };
  while (true) {
    for (; next < lines_.size(); ++next) {
      if (lines_[next].text.find(needle) != std::string::npos) {
        return lines_[next];
      }
    }
    if (reader_done_) {
      return absl::OutOfRangeError(absl::StrCat("aggregatord (pid ", pid_,
                                                ") closed its output before '",
                                                needle, "'"));
    }
    if (!mu_.AwaitWithTimeout(absl::Condition(&news),
                              absl::FromChrono(deadline - BenchClock::now()))) {
      return absl::DeadlineExceededError(absl::StrCat(
          "aggregatord (pid ", pid_, ") did not log '", needle, "' in time"));
    }
  }
}

absl::StatusOr<DaemonProcess::Listening> DaemonProcess::WaitListening(
    BenchClock::time_point deadline) {
  auto line = WaitForLine("aggregatord listening on ", deadline);
  if (!line.ok()) return line.status();
  // "... aggregatord listening on 127.0.0.1:41234 (plaintext) with ..."
  return Listening{WordAfter(line->text, "listening on "), line->arrived};
}

absl::StatusOr<std::string> DaemonProcess::WaitAdmin(
    BenchClock::time_point deadline) {
  auto line = WaitForLine("admin on ", deadline);
  if (!line.ok()) return line.status();
  return WordAfter(line->text, "admin on ");
}

absl::StatusOr<BenchClock::time_point> DaemonProcess::WaitServing(
    const std::string& address, BenchClock::time_point deadline) {
  auto channel =
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  auto stub = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       (deadline - BenchClock::now()));
  grpc::health::v1::HealthCheckRequest request;
  auto reader = stub->Watch(&context, request);
  grpc::health::v1::HealthCheckResponse response;
  while (reader->Read(&response)) {
    if (response.status() == grpc::health::v1::HealthCheckResponse::SERVING) {
      const auto arrived = BenchClock::now();
      context.TryCancel();
      (void)reader->Finish();
      return arrived;
    }
  }
  const grpc::Status status = reader->Finish();
  return absl::DeadlineExceededError(
      absl::StrCat("aggregatord at ", address, " did not report SERVING (",
                   status.error_message(), "); its log ends:\n", Tail(10)));
}

absl::StatusOr<std::chrono::nanoseconds> DaemonProcess::Terminate(
    BenchClock::time_point deadline) {
  const auto signalled = BenchClock::now();
  if (absl::Status s = process_->Signal(SIGTERM); !s.ok()) return s;
  auto exited = process_->Wait(deadline);
  const auto elapsed = BenchClock::now() - signalled;
  if (!exited.ok()) return exited.status();
  if (!exited->ok()) {
    return absl::InternalError(
        absl::StrCat("aggregatord exited with ", exited->ToString(),
                     " after SIGTERM; its log ends:\n", Tail(10)));
  }
  return std::chrono::duration_cast<std::chrono::nanoseconds>(elapsed);
}

int DaemonProcess::warnings() const {
  MutexLock lock(&mu_);
  int count = 0;
  for (const Line& line : lines_) {
    for (const char* level : {" warning ", " error ", " critical "}) {
      if (line.text.find(level) != std::string::npos) {
        ++count;
        break;
      }
    }
  }
  return count;
}

std::string DaemonProcess::Tail(size_t count) const {
  MutexLock lock(&mu_);
  std::string text;
  const size_t first = lines_.size() > count ? lines_.size() - count : 0;
  for (size_t i = first; i < lines_.size(); ++i) {
    absl::StrAppend(&text, lines_[i].text, "\n");
  }
  return text;
}

absl::StatusOr<int64_t> ProcStatusKiB(pid_t pid, const std::string& field) {
  const std::string path = absl::StrCat("/proc/", pid, "/status");
  bool ok = false;
  const std::string text = ReadWholeFile(path, &ok);
  if (!ok) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  const auto value = ProcField(text, field);  // "123456 kB"
  int64_t kib = 0;
  if (!value.has_value() ||
      !absl::SimpleAtoi(value->substr(0, value->find(' ')), &kib)) {
    return absl::NotFoundError(absl::StrCat("no ", field, " in ", path));
  }
  return kib;
}

absl::Status ResetPeakRss(pid_t pid) {
  const std::string path = absl::StrCat("/proc/", pid, "/clear_refs");
  const int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return absl::ErrnoToStatus(errno, path);
  const ssize_t n = write(fd, "5", 1);
  const int error = errno;
  close(fd);
  if (n != 1) return absl::ErrnoToStatus(error, absl::StrCat("write ", path));
  return absl::OkStatus();
}

std::optional<double> LogTimeOfDayMs(const std::string& line) {
  // "YYYY-MM-DDTHH:MM:SS.mmm": the time of day starts at offset 11.
  if (line.size() < 23 || line[10] != 'T' || line[13] != ':' ||
      line[16] != ':' || line[19] != '.') {
    return std::nullopt;
  }
  int hours, minutes, seconds, millis;
  if (!absl::SimpleAtoi(line.substr(11, 2), &hours) ||
      !absl::SimpleAtoi(line.substr(14, 2), &minutes) ||
      !absl::SimpleAtoi(line.substr(17, 2), &seconds) ||
      !absl::SimpleAtoi(line.substr(20, 3), &millis)) {
    return std::nullopt;
  }
  return ((hours * 60.0 + minutes) * 60.0 + seconds) * 1000.0 + millis;
}

absl::StatusOr<TempDir> TempDir::Create() {
  const char* base = std::getenv("TMPDIR");
  std::string pattern =
      absl::StrCat(base != nullptr && *base != '\0' ? base : "/tmp",
                   "/aggregator-bench-XXXXXX");
  if (mkdtemp(pattern.data()) == nullptr) {
    return absl::ErrnoToStatus(errno, absl::StrCat("mkdtemp ", pattern));
  }
  return TempDir(pattern);
}

TempDir::~TempDir() {
  if (path_.empty()) return;
  // Flat: the bench only writes files directly in it.
  if (DIR* dir = opendir(path_.c_str())) {
    while (dirent* entry = readdir(dir)) {
      const std::string name = entry->d_name;
      if (name != "." && name != "..") unlink((path_ + "/" + name).c_str());
    }
    closedir(dir);
  }
  rmdir(path_.c_str());
}

absl::StatusOr<std::string> TempDir::Write(const std::string& name,
                                           const std::string& content) const {
  const std::string path = absl::StrCat(path_, "/", name);
  std::ofstream out(path, std::ios::trunc);
  out << content;
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  return path;
}

}  // namespace aggregator
