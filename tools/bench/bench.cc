// bench: measures aggregatord against issue 6's targets in one run, with the
// daemon and example learners as real processes on this machine.
//
//   bazel run -c opt //tools:bench -- [--quick] [--json PATH]
//       [--env KEY=VALUE]... [--preload LIB] [--compare-allocators]
//
// Sections: 1 small calls, 2 large batches, 3 fan-out, 4 supervisor (run by
// //tools:supervisor_bench when built), 5 start-up and shutdown; A (only with
// --compare-allocators) the linked tcmalloc against preloaded jemalloc and
// full tcmalloc. Prints a table on stdout, progress on stderr, and writes JSON.
// See tools/bench/BENCH.md for what each row means.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "lib/process/subprocess.h"
#include "proto/learner.grpc.pb.h"
#include "proto/learner_names.h"
#include "tests/testing/synthetic_batch.h"
#include "tools/bench/bench_processes.h"
#include "tools/bench/bench_report.h"
#include "tools/bench/tool_paths.h"

namespace aggregator {
namespace {

namespace pb = aggregator::v1;
using Clock = BenchClock;
using Milliseconds = std::chrono::duration<double, std::milli>;

constexpr double kMiB = 1024.0 * 1024.0;

// Deadlines: generous, because other builds may share the 2 cores.
constexpr std::chrono::seconds kStartDeadline(30);
constexpr std::chrono::seconds kSmallCallDeadline(10);
constexpr std::chrono::seconds kLargeCallDeadline(120);
constexpr std::chrono::seconds kExitDeadline(10);
constexpr std::chrono::minutes kSupervisorBenchDeadline(3);

// The Python original, measured by issue 6's author (not here).
constexpr char kPublished[] = "published, not measured here";
constexpr double kPythonResourceMs = 4.4;
constexpr double kPythonGetDataMs = 26;
constexpr double kPythonLearnMs = 28;
constexpr double kPythonStartupMs = 6100;
constexpr double kPythonCloseMs = 9000;

struct BenchOptions {
  bool quick = false;
  int small_iterations = 2000;
  int fanout_iterations = 300;
  int large_iterations = 5;
  int startup_cycles = 5;
  std::vector<int> sizes_mib = {16, 64, 256};
  std::vector<int> learner_counts = {1, 2, 4, 8};
  std::vector<int> fanout_counts = {1, 2, 4, 8, 16, 32, 64};
  int64_t large_sample_bytes = 1 << 20;
  int64_t stream_message_bytes = 1 << 20;  // LearnStream messages
  int breakdown_iterations = 500;  // section 1's timed calls, per method
  std::string baseline_daemon;     // section 1 times it too
  // Section 6: the bandwidth limit (tc's rate syntax), the timed calls.
  std::string netns_rate = "1gbit";
  int netns_iterations = 3;
  std::vector<int> netns_sizes_mib = {64};
  std::string netns_child_out;  // set: this process is section 6's child
  std::string sections = "123456";
  bool compare_allocators = false;
  std::string daemon;
  std::string learner;
  std::string supervisor_bench;
  std::vector<std::string> env;
  std::string preload;
  std::string json_path;
};

void Progress(const std::string& text) {
  static const auto started = BenchClock::now();
  std::fprintf(
      stderr, "bench: [%5.1f s] %s\n",
      std::chrono::duration<double>(BenchClock::now() - started).count(),
      text.c_str());
}

// "16" for whole numbers of MiB, else three figures.
std::string MiBText(double bytes) {
  const double mib = bytes / (1024.0 * 1024.0);
  return mib == static_cast<int64_t>(mib)
             ? absl::StrCat(static_cast<int64_t>(mib))
             : FormatNumber(mib);
}

std::string Times(double ratio) { return FormatNumber(ratio) + "×"; }

double ToMs(Clock::duration d) { return Milliseconds(d).count(); }

std::shared_ptr<grpc::Channel> Channel(const std::string& address) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(),
                                   args);
}

void SetDeadline(grpc::ClientContext* context, std::chrono::seconds timeout) {
  context->set_deadline(std::chrono::system_clock::now() + timeout);
}

absl::Status FromGrpc(const char* what, const grpc::Status& status) {
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      absl::StrCat(what, ": ", status.error_message()));
}

// The sample count a Learn reply reports: the example learner's `received`,
// which the aggregator merges into one entry per learner.
int64_t ReceivedCount(const pb::LearnReply& reply) {
  auto it = reply.info().fields().find("received");
  if (it == reply.info().fields().end()) return -1;
  if (it->second.has_number_value()) {
    return static_cast<int64_t>(it->second.number_value());
  }
  int64_t sum = 0;
  for (const auto& value : it->second.list_value().values()) {
    sum += static_cast<int64_t>(value.number_value());
  }
  return sum;
}

absl::Status CheckReceived(const pb::LearnReply& reply, int64_t expected,
                           const std::string& where) {
  const int64_t got = ReceivedCount(reply);
  if (got == expected) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(where, ": Learn reply reports ", got,
                                          " samples received, expected ",
                                          expected));
}

// A Learn batch serialised once; every call sends the same bytes (the
// ByteBuffers reference `wire`, so a call copies nothing and allocates no
// payload on the client side). `messages` are the same bytes cut into
// LearnStream messages: consecutive sample records, with no plan_id (the
// newest plan).
struct LargeBatch {
  int64_t samples = 0;
  int64_t payload_bytes = 0;
  std::string wire;
  grpc::ByteBuffer buffer;
  std::vector<grpc::ByteBuffer> messages;
};

// A ByteBuffer over wire[begin, end), which must outlive it.
grpc::ByteBuffer StaticBuffer(const std::string& wire, size_t begin,
                              size_t end) {
  grpc::Slice slice(wire.data() + begin, end - begin,
                    grpc::Slice::STATIC_SLICE);
  return grpc::ByteBuffer(&slice, 1);
}

std::unique_ptr<LargeBatch> BuildLargeBatch(int64_t samples,
                                            int64_t sample_bytes,
                                            int64_t message_bytes) {
  auto batch = std::make_unique<LargeBatch>();
  batch->samples = samples;
  batch->payload_bytes = samples * sample_bytes;
  std::vector<size_t> ends;  // of each sample record
  {
    const pb::LearnRequest request = SyntheticBatch(samples, sample_bytes, "s");
    batch->wire.reserve(request.ByteSizeLong());
    for (const pb::Sample& sample : request.samples()) {
      // Field 1, length-delimited: what LearnRequest's serialisation holds.
      pb::LearnRequest one;
      *one.add_samples() = sample;
      batch->wire += one.SerializeAsString();
      ends.push_back(batch->wire.size());
    }
  }
  batch->buffer = StaticBuffer(batch->wire, 0, batch->wire.size());
  size_t begin = 0;
  for (size_t i = 0; i < ends.size(); ++i) {
    const bool last = i + 1 == ends.size();
    if (last || static_cast<int64_t>(ends[i + 1] - begin) > message_bytes) {
      batch->messages.push_back(StaticBuffer(batch->wire, begin, ends[i]));
      begin = ends[i];
    }
  }
  return batch;
}

// Sends pre-serialised Learn requests (or a LargeBatch's messages by
// LearnStream) through the generic API and a completion queue driven by the
// calling thread: no serialisation, no payload allocation and no thread hop
// on the client side of the clock.
class LargeLearnClient {
 public:
  explicit LargeLearnClient(const std::string& address)
      : stub_(Channel(address)) {}
  ~LargeLearnClient() {
    cq_.Shutdown();
    void* tag;
    bool ok;
    while (cq_.Next(&tag, &ok)) {
    }
  }

  // One Learn; returns its wall time in ms. The reply is parsed after the
  // clock stops.
  absl::StatusOr<double> Learn(const grpc::ByteBuffer& request,
                               pb::LearnReply* reply) {
    grpc::ClientContext context;
    const auto deadline = std::chrono::system_clock::now() + kLargeCallDeadline;
    context.set_deadline(deadline);
    grpc::ByteBuffer response;
    grpc::Status status;
    const auto started = Clock::now();
    auto call = stub_.PrepareUnaryCall(&context, kLearnMethod, request, &cq_);
    call->StartCall();
    (void)Step([&](void* tag) { call->Finish(&response, &status, tag); },
               &context, deadline);
    return Answer("Learn", Clock::now() - started, status, &response, reply);
  }

  // One LearnStream; returns its wall time in ms.
  absl::StatusOr<double> LearnStream(
      const std::vector<grpc::ByteBuffer>& messages, pb::LearnReply* reply) {
    grpc::ClientContext context;
    const auto deadline = std::chrono::system_clock::now() + kLargeCallDeadline;
    context.set_deadline(deadline);
    grpc::ByteBuffer response;
    grpc::Status status;
    const auto started = Clock::now();
    auto call = stub_.PrepareCall(&context, kLearnStreamMethod, &cq_);
    // Each step waits for its own tag; a failed one (the call is over) skips
    // to Finish, which says why.
    auto step = [&](const std::function<void(void*)>& start) {
      return Step(start, &context, deadline);
    };
    bool ok = step([&](void* tag) { call->StartCall(tag); });
    for (const grpc::ByteBuffer& message : messages) {
      if (!ok) break;
      ok = step([&](void* tag) { call->Write(message, tag); });
    }
    if (ok) ok = step([&](void* tag) { call->WritesDone(tag); });
    if (ok) (void)step([&](void* tag) { call->Read(&response, tag); });
    (void)step([&](void* tag) { call->Finish(&status, tag); });
    return Answer("LearnStream", Clock::now() - started, status, &response,
                  reply);
  }

 private:
  // Starts one operation with a tag and waits for it: whether it succeeded.
  // Past the deadline the call is cancelled (the operation then completes,
  // and a Finish says DEADLINE_EXCEEDED or CANCELLED).
  bool Step(const std::function<void(void*)>& start,
            grpc::ClientContext* context,
            std::chrono::system_clock::time_point deadline) {
    int tag_value = 0;
    start(&tag_value);
    void* tag = nullptr;
    bool ok = false;
    if (cq_.AsyncNext(&tag, &ok, deadline) !=
        grpc::CompletionQueue::GOT_EVENT) {
      context->TryCancel();
      (void)cq_.Next(&tag, &ok);
      return false;
    }
    return ok;
  }

  // The call's wall time in ms, or why it failed; the reply is parsed after
  // the clock has stopped.
  static absl::StatusOr<double> Answer(const char* method, Clock::duration took,
                                       const grpc::Status& status,
                                       grpc::ByteBuffer* response,
                                       pb::LearnReply* reply) {
    if (!status.ok()) return FromGrpc(method, status);
    if (!grpc::SerializationTraits<pb::LearnReply>::Deserialize(response, reply)
             .ok()) {
      return absl::InternalError(
          absl::StrCat(method, ": cannot parse the reply"));
    }
    return ToMs(took);
  }

  grpc::GenericStub stub_;
  grpc::CompletionQueue cq_;
};

// A daemon started for one measurement, ready (health SERVING).
struct RunningDaemon {
  std::unique_ptr<DaemonProcess> process;
  std::string address;
  double listening_ms = 0;  // spawn -> "listening" line read
  double ready_ms = 0;      // spawn -> SERVING seen by the health watch
  // "starting" -> "serving:" by the daemon's own log timestamps (1 ms
  // resolution), when both lines parse.
  std::optional<double> log_ready_ms;
};

// How a large batch goes through aggregatord: one Learn (store-and-forward)
// or LearnStream (progressive dispatch).
enum class Relay { kLearn, kLearnStream };

// One relay's figures in a large case: its own daemon's time and memory.
struct RelayResult {
  Summary ms;
  double baseline_rss_mib = 0;  // before the first Learn
  double first_peak_mib = 0;    // peak over the warm-up call
  double peak_mib = 0;          // peak over the timed calls
  bool peak_reset = false;      // clear_refs worked: peak_mib excludes warm-up
  int warnings = 0;
};

struct LargeCaseResult {
  std::map<Relay, RelayResult> relays;
  Summary direct_ms;
};

class Bench {
 public:
  Bench(BenchOptions options, ChildEnv env, TempDir dir)
      : options_(std::move(options)),
        env_(std::move(env)),
        dir_(std::move(dir)) {}

  Section SmallCalls();
  Section LargeBatches();
  Section FanOut();
  Section Supervisor();
  Section StartUp();
  // Section 6: runs NetworkInNamespace in a child in a new network namespace
  // (unshare --net) and reports what it found.
  Section Network();
  // Section 6's measurements, in the child: the namespace's loopback with a
  // bandwidth limit per host.
  Section NetworkInNamespace();
  Section Allocators();

 private:
  // Runs `body`; an error marks the section failed and is noted in it (the
  // rows gathered so far are kept). Every process `body` started is stopped
  // by its owner's destructor on the way out.
  Section Run(Section section,
              const std::function<absl::Status(Section&)>& body);

  // `binary`: aggregatord's (empty: --daemon's); `listen`: its address.
  absl::StatusOr<RunningDaemon> StartDaemon(
      const std::vector<std::string>& learners, const ChildEnv& env,
      const std::string& binary = "",
      const std::string& listen = "127.0.0.1:0");
  absl::StatusOr<LearnerSet> StartLearners(
      int count, int64_t batch_size, const ChildEnv& env,
      const std::string& host = "127.0.0.1") {
    return LearnerSet::Start(options_.learner, count, batch_size, env,
                             Clock::now() + kStartDeadline, host);
  }
  // Learns `batch` through a fresh daemon per relay (the same learners),
  // interleaved call by call with the same bytes sent to `direct`.
  // The learners listen on `learner_host`, the daemons on `daemon_host`.
  absl::StatusOr<LargeCaseResult> RunLargeCase(
      const LargeBatch& batch, int learners, LargeLearnClient& direct,
      const ChildEnv& env, int iterations, const std::vector<Relay>& relays,
      const std::string& learner_host = "127.0.0.1",
      const std::string& daemon_host = "127.0.0.1");
  // A hostile Learn: `mib` MiB of empty samples (bytes 0a 00 repeated) on a
  // plan of 4 × 32. A row: the daemon's peak RSS while refusing it.
  absl::Status AddRefusedBodyRow(Section& section, int mib);
  // SIGTERM -> exit in ms; a slow exit (over 200 ms) adds the daemon's last
  // log lines to the section's notes.
  absl::StatusOr<double> Terminate(RunningDaemon& daemon, Section& section,
                                   const std::string& what);
  // Rows of where `name`'s calls through `stub` spend their time, from the
  // daemon's timestamps; `prepare` runs before each call, outside the clock.
  absl::Status AddBreakdownRows(
      Section& section, const std::string& name, pb::Learner::Stub& stub,
      const std::function<absl::Status()>& prepare,
      const std::function<grpc::Status(pb::Learner::Stub&,
                                       grpc::ClientContext*)>& call);
  // Rows for one large case (shared by sections 2 and A).
  void AddLargeRows(Section& section, const std::string& prefix,
                    const LargeBatch& batch, int learners, Relay relay,
                    const RelayResult& result, const Summary& direct_ms);

  const BenchOptions options_;
  const ChildEnv env_;
  const TempDir dir_;
  int configs_written_ = 0;
  // From section 3, reported in section 5: spawn -> ready and SIGTERM -> exit
  // by learner count.
  std::map<int, double> fanout_ready_ms_;
  std::map<int, double> fanout_exit_ms_;
};

Section Bench::Run(Section section,
                   const std::function<absl::Status(Section&)>& body) {
  Progress(absl::StrCat("section ", section.id, ": ", section.title));
  const absl::Status status = body(section);
  if (!status.ok()) {
    section.failed = true;
    section.notes.push_back(
        absl::StrCat("ERROR: section stopped: ", status.ToString()));
    Progress(
        absl::StrCat("section ", section.id, " failed: ", status.ToString()));
  }
  return section;
}

absl::StatusOr<RunningDaemon> Bench::StartDaemon(
    const std::vector<std::string>& learners, const ChildEnv& env,
    const std::string& binary, const std::string& listen) {
  auto config =
      dir_.Write(absl::StrCat("aggregator-", ++configs_written_, ".yaml"),
                 BenchConfigYaml(learners));
  if (!config.ok()) return config.status();
  const auto deadline = Clock::now() + kStartDeadline;
  auto process = DaemonProcess::Spawn(binary.empty() ? options_.daemon : binary,
                                      *config, env, listen);
  if (!process.ok()) return process.status();
  RunningDaemon daemon;
  daemon.process = std::move(*process);
  auto listening = daemon.process->WaitListening(deadline);
  if (!listening.ok()) return listening.status();
  daemon.address = listening->address;
  daemon.listening_ms = ToMs(listening->arrived - daemon.process->spawned());
  auto serving = daemon.process->WaitServing(daemon.address, deadline);
  if (!serving.ok()) return serving.status();
  daemon.ready_ms = ToMs(*serving - daemon.process->spawned());
  auto starting =
      daemon.process->WaitForLine("starting with configuration", deadline);
  auto ready_line = daemon.process->WaitForLine("serving:", deadline);
  if (starting.ok() && ready_line.ok()) {
    const auto from = LogTimeOfDayMs(starting->text);
    const auto to = LogTimeOfDayMs(ready_line->text);
    if (from.has_value() && to.has_value()) {
      double ms = *to - *from;
      if (ms < 0) ms += 24 * 3600 * 1000.0;  // across midnight
      daemon.log_ready_ms = ms;
    }
  }
  return daemon;
}

absl::StatusOr<double> Bench::Terminate(RunningDaemon& daemon, Section& section,
                                        const std::string& what) {
  auto exit = daemon.process->Terminate(Clock::now() + kExitDeadline);
  if (!exit.ok()) return exit.status();
  const double ms = ToMs(*exit);
  if (ms > 200) {
    section.notes.push_back(
        absl::StrCat("note: ", what, ": SIGTERM → exit took ", FormatNumber(ms),
                     " ms; the daemon's log ends:\n", daemon.process->Tail(4)));
  }
  return ms;
}

// Section 1 ------------------------------------------------------------------

// Where one relayed call's time went, in ms, from the client's clock and the
// daemon's timestamps (lib/service/call_timing.h; both steady_clock).
struct CallStages {
  double to_aggregator = 0;  // the call sent -> the daemon's handler runs
  double to_first_call = 0;  // -> its first learner call starts
  double calls_out = 0;      // first -> last learner call started
  std::vector<double> round_trips;  // each learner's, start -> answer
  double first_out_last_in = 0;     // first call started -> last answer
  double merge = 0;                 // last answer -> the reply merged
  double hand_over = 0;             // merged -> handed to gRPC (Finish)
  double to_client = 0;             // -> the client has it
  double total = 0;
};

// Parses "arrived=T,<learner>=T0-T1,...,merged=T,replied=T" against the
// client's `sent` and `received`.
absl::StatusOr<CallStages> ParseTiming(const std::string& timing,
                                       Clock::time_point sent,
                                       Clock::time_point received) {
  auto ms = [](int64_t from, int64_t to) { return (to - from) / 1e6; };
  const int64_t sent_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                              sent.time_since_epoch())
                              .count();
  const int64_t received_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(
          received.time_since_epoch())
          .count();
  int64_t arrived = -1, merged = -1, replied = -1;
  int64_t first_start = INT64_MAX, last_start = 0, last_end = 0;
  CallStages stages;
  for (absl::string_view field : absl::StrSplit(timing, ',')) {
    const size_t eq = field.find('=');
    if (eq == absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat("timing: '", field, "'"));
    }
    const absl::string_view key = field.substr(0, eq);
    const absl::string_view value = field.substr(eq + 1);
    int64_t t = 0;
    if (const size_t dash = value.find('-'); dash != absl::string_view::npos) {
      int64_t end = 0;
      if (!absl::SimpleAtoi(value.substr(0, dash), &t) ||
          !absl::SimpleAtoi(value.substr(dash + 1), &end)) {
        return absl::InvalidArgumentError(
            absl::StrCat("timing: '", field, "'"));
      }
      first_start = std::min(first_start, t);
      last_start = std::max(last_start, t);
      last_end = std::max(last_end, end);
      stages.round_trips.push_back(ms(t, end));
      continue;
    }
    if (!absl::SimpleAtoi(value, &t)) {
      return absl::InvalidArgumentError(absl::StrCat("timing: '", field, "'"));
    }
    if (key == "arrived") arrived = t;
    if (key == "merged") merged = t;
    if (key == "replied") replied = t;
  }
  if (arrived < 0 || merged < 0 || replied < 0 || stages.round_trips.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("timing without every stage: '", timing, "'"));
  }
  stages.to_aggregator = ms(sent_ns, arrived);
  stages.to_first_call = ms(arrived, first_start);
  stages.calls_out = ms(first_start, last_start);
  stages.first_out_last_in = ms(first_start, last_end);
  stages.merge = ms(last_end, merged);
  stages.hand_over = ms(merged, replied);
  stages.to_client = ms(replied, received_ns);
  stages.total = ms(sent_ns, received_ns);
  return stages;
}

Section Bench::SmallCalls() {
  const int iterations = options_.small_iterations;
  const int warmup = std::max(20, iterations / 10);
  const bool baseline = !options_.baseline_daemon.empty();
  Section section{
      "1", absl::StrCat("Small calls: 4 learners via aggregatord vs 1 "
                        "learner direct (",
                        iterations, " calls each after ", warmup,
                        " warm-up, interleaved",
                        baseline ? ", with the baseline daemon" : "", ")")};
  return Run(std::move(section), [&](Section& section) -> absl::Status {
    auto learners = StartLearners(4, 32, env_);
    if (!learners.ok()) return learners.status();
    auto direct_learner = StartLearners(1, 128, env_);
    if (!direct_learner.ok()) return direct_learner.status();
    auto daemon = StartDaemon(learners->Addresses(4), env_);
    if (!daemon.ok()) return daemon.status();
    auto aggregated = pb::Learner::NewStub(Channel(daemon->address));
    auto direct = pb::Learner::NewStub(Channel((*direct_learner)[0].address()));
    // The baseline daemon (another build) serves the same learners.
    std::optional<RunningDaemon> old_daemon;
    std::unique_ptr<pb::Learner::Stub> old;
    if (baseline) {
      auto started =
          StartDaemon(learners->Addresses(4), env_, options_.baseline_daemon);
      if (!started.ok()) return started.status();
      old_daemon = *std::move(started);
      old = pb::Learner::NewStub(Channel(old_daemon->address));
    }
    const pb::LearnRequest batch = SyntheticBatch(128, 64, "s");

    using Call =
        std::function<grpc::Status(pb::Learner::Stub&, grpc::ClientContext*)>;
    struct Method {
      const char* name;
      double target_ms;
      double python_ms;
      Call call;
    };
    pb::Resource resource;
    pb::DataDemand demand;
    pb::LearnReply learned;
    const std::vector<Method> methods = {
        {"GetResource", 0.2, kPythonResourceMs,
         [&](pb::Learner::Stub& stub, grpc::ClientContext* context) {
           return stub.GetResource(context, {}, &resource);
         }},
        {"GetData", 0.4, kPythonGetDataMs,
         [&](pb::Learner::Stub& stub, grpc::ClientContext* context) {
           return stub.GetData(context, {}, &demand);
         }},
        {"Learn 128 × 64 B", 0.5, kPythonLearnMs,
         [&](pb::Learner::Stub& stub, grpc::ClientContext* context) {
           return stub.Learn(context, batch, &learned);
         }},
    };
    // One call, timed from just before the stub call to its return; the
    // context (with its deadline) is made before the clock starts.
    auto time_call = [](pb::Learner::Stub& stub,
                        const Call& call) -> absl::StatusOr<double> {
      grpc::ClientContext context;
      SetDeadline(&context, kSmallCallDeadline);
      const auto started = Clock::now();
      const grpc::Status status = call(stub, &context);
      const auto finished = Clock::now();
      if (!status.ok()) return FromGrpc("call", status);
      return ToMs(finished - started);
    };

    // The aggregator splits by a plan, and a plan trains once: each Learn
    // follows a GetData of its own (for 128 samples), outside the clock.
    auto plan = [&](pb::Learner::Stub& stub) -> absl::Status {
      grpc::ClientContext context;
      SetDeadline(&context, kSmallCallDeadline);
      const grpc::Status s = stub.GetData(&context, {}, &demand);
      if (!s.ok()) return FromGrpc("GetData", s);
      if (demand.batch_size() != 128) {
        return absl::InternalError(
            absl::StrCat("GetData via aggregatord demands ",
                         demand.batch_size(), " samples, expected 128"));
      }
      return absl::OkStatus();
    };
    for (const Method& method : methods) {
      const bool learn = absl::StartsWith(method.name, "Learn");
      std::vector<double> via, via_old, to_one;
      auto timed = [&](pb::Learner::Stub& stub, const char* where,
                       std::vector<double>* out, bool keep) -> absl::Status {
        if (learn && &stub != direct.get()) {
          if (absl::Status s = plan(stub); !s.ok()) return s;
        }
        auto ms = time_call(stub, method.call);
        if (!ms.ok()) {
          return absl::Status(ms.status().code(),
                              absl::StrCat(method.name, " ", where, ": ",
                                           ms.status().message()));
        }
        if (keep) out->push_back(*ms);
        return absl::OkStatus();
      };
      for (int i = 0; i < warmup + iterations; ++i) {
        const bool keep = i >= warmup;
        if (absl::Status s = timed(*aggregated, "via aggregatord", &via, keep);
            !s.ok()) {
          return s;
        }
        if (old != nullptr) {
          if (absl::Status s =
                  timed(*old, "via the baseline aggregatord", &via_old, keep);
              !s.ok()) {
            return s;
          }
        }
        if (absl::Status s = timed(*direct, "direct", &to_one, keep); !s.ok()) {
          return s;
        }
      }
      if (learn) {
        // The last reply was the direct learner's; check one of each.
        if (absl::Status s = CheckReceived(learned, 128, "direct"); !s.ok()) {
          return s;
        }
        if (absl::Status s = plan(*aggregated); !s.ok()) return s;
        grpc::ClientContext context;
        SetDeadline(&context, kSmallCallDeadline);
        const grpc::Status s = aggregated->Learn(&context, batch, &learned);
        if (!s.ok()) return FromGrpc("Learn", s);
        if (absl::Status c = CheckReceived(learned, 128, "aggregatord");
            !c.ok()) {
          return c;
        }
      }
      const Summary a = Summarize(via);
      const Summary d = Summarize(to_one);
      const double ratio = a.median / d.median;
      Row median{absl::StrCat(method.name, " via aggregatord, median")};
      median.value = a.median;
      median.unit = "ms";
      median.comparison = absl::StrCat(Times(ratio), " direct (",
                                       FormatNumber(d.median), " ms)");
      median.ratio = ratio;
      median.target = absl::StrCat("≤ ", method.target_ms, " ms");
      median.verdict = AtMost(a.median, method.target_ms);
      median.details = {{"aggregated_ms", ToJson(a)}, {"direct_ms", ToJson(d)}};
      section.rows.push_back(std::move(median));

      Row p99{absl::StrCat(method.name, " via aggregatord, p99")};
      p99.value = a.p99;
      p99.unit = "ms";
      p99.ratio = a.p99 / d.p99;
      p99.comparison = absl::StrCat(Times(*p99.ratio), " direct p99 (",
                                    FormatNumber(d.p99), " ms)");
      section.rows.push_back(std::move(p99));

      if (old != nullptr) {
        const Summary o = Summarize(via_old);
        Row row{absl::StrCat(method.name, " via the baseline, median")};
        row.value = o.median;
        row.unit = "ms";
        row.ratio = o.median / d.median;
        row.comparison =
            absl::StrCat(Times(*row.ratio), " direct; this build ",
                         Times(a.median / o.median), " of it; p99 ",
                         FormatNumber(o.p99), " ms");
        row.details = {{"baseline_ms", ToJson(o)},
                       {"daemon", options_.baseline_daemon}};
        section.rows.push_back(std::move(row));
      }

      Row one{absl::StrCat(method.name, " direct to 1 learner, median")};
      one.value = d.median;
      one.unit = "ms";
      one.comparison = absl::StrCat("p99 ", FormatNumber(d.p99), " ms");
      section.rows.push_back(std::move(one));

      Row python{absl::StrCat("Python original: ", method.name)};
      python.value = method.python_ms;
      python.unit = "ms";
      python.ratio = method.python_ms / a.median;
      python.comparison = absl::StrCat(kPublished, "; aggregatord median ",
                                       Times(*python.ratio), " faster");
      section.rows.push_back(std::move(python));

      if (absl::StartsWith(method.name, "GetResource")) continue;
      if (absl::Status s = AddBreakdownRows(
              section, method.name, *aggregated,
              [&] { return learn ? plan(*aggregated) : absl::OkStatus(); },
              method.call);
          !s.ok()) {
        return s;
      }
    }
    if (const int warnings = daemon->process->warnings(); warnings > 0) {
      section.notes.push_back(
          absl::StrCat("note: aggregatord logged ", warnings,
                       " warning(s); last lines:\n", daemon->process->Tail(5)));
    }
    section.notes.push_back(
        "where it goes: the daemon's timestamps of calls that ask for them "
        "(x-aggregator-timing), medians of each stage over " +
        std::to_string(options_.breakdown_iterations) +
        " calls timed apart from the rows above.");
    return absl::OkStatus();
  });
}

absl::Status Bench::AddBreakdownRows(
    Section& section, const std::string& name, pb::Learner::Stub& stub,
    const std::function<absl::Status()>& prepare,
    const std::function<grpc::Status(pb::Learner::Stub&, grpc::ClientContext*)>&
        call) {
  std::vector<double> to_aggregator, to_first_call, calls_out, round_trips,
      slowest, first_out_last_in, merge, hand_over, to_client, total;
  const int iterations = options_.breakdown_iterations;
  const int warmup = std::max(10, iterations / 10);
  for (int i = 0; i < warmup + iterations; ++i) {
    if (absl::Status s = prepare(); !s.ok()) return s;
    grpc::ClientContext context;
    SetDeadline(&context, kSmallCallDeadline);
    context.AddMetadata(kTimingKey, "1");
    const auto sent = Clock::now();
    const grpc::Status status = call(stub, &context);
    const auto received = Clock::now();
    if (!status.ok()) return FromGrpc(name.c_str(), status);
    if (i < warmup) continue;
    const auto& trailers = context.GetServerTrailingMetadata();
    auto found = trailers.find(kTimingKey);
    if (found == trailers.end()) {
      section.notes.push_back(absl::StrCat(
          "note: no breakdown for ", name,
          ": the daemon sends no x-aggregator-timing (an older build?)"));
      return absl::OkStatus();
    }
    auto stages =
        ParseTiming(std::string(found->second.data(), found->second.size()),
                    sent, received);
    if (!stages.ok()) return stages.status();
    to_aggregator.push_back(stages->to_aggregator);
    to_first_call.push_back(stages->to_first_call);
    calls_out.push_back(stages->calls_out);
    for (double ms : stages->round_trips) round_trips.push_back(ms);
    slowest.push_back(*std::max_element(stages->round_trips.begin(),
                                        stages->round_trips.end()));
    first_out_last_in.push_back(stages->first_out_last_in);
    merge.push_back(stages->merge);
    hand_over.push_back(stages->hand_over);
    to_client.push_back(stages->to_client);
    total.push_back(stages->total);
  }
  auto add = [&](const std::string& stage, const std::vector<double>& values,
                 const std::string& comparison) {
    const Summary summary = Summarize(values);
    Row row{absl::StrCat("  ", name, ": ", stage)};
    row.value = summary.median;
    row.unit = "ms";
    row.comparison = comparison;
    row.details = {{"ms", ToJson(summary)}};
    section.rows.push_back(std::move(row));
    return summary.median;
  };
  auto median = [](const std::vector<double>& values) {
    return FormatNumber(Summarize(values).median);
  };
  double sum = 0;
  sum += add("coordinator → aggregator", to_aggregator,
             "call sent → the daemon's handler runs");
  sum += add("fan-out start", to_first_call,
             absl::StrCat("handler → first learner call; all out in +",
                          median(calls_out), " ms"));
  add("a learner's round trip", round_trips,
      absl::StrCat("its call out → its answer in; the slowest of 4 ",
                   median(slowest), " ms"));
  sum += add("first call out → last answer in", first_out_last_in,
             "the learners, as the aggregator waits for them");
  sum += add("merge", merge,
             absl::StrCat("last answer → reply merged; handed to gRPC +",
                          median(hand_over), " ms"));
  sum += Summarize(hand_over).median;
  sum += add("reply → coordinator", to_client,
             "handed to gRPC → the client has it");
  add("total, timing asked", total,
      absl::StrCat("the stages' medians add up to ", FormatNumber(sum), " ms"));
  return absl::OkStatus();
}

// Section 2 ------------------------------------------------------------------

absl::StatusOr<LargeCaseResult> Bench::RunLargeCase(
    const LargeBatch& batch, int count, LargeLearnClient& direct,
    const ChildEnv& env, int iterations, const std::vector<Relay>& relays,
    const std::string& learner_host, const std::string& daemon_host) {
  auto learners =
      StartLearners(count, batch.samples / count, env, learner_host);
  if (!learners.ok()) return learners.status();
  // One daemon per relay, so each one's peak RSS is its own.
  struct Daemon {
    Relay relay;
    RunningDaemon daemon;
    std::unique_ptr<pb::Learner::Stub> stub;
    std::unique_ptr<LargeLearnClient> client;
    std::vector<double> ms;
  };
  std::vector<Daemon> daemons;
  for (Relay relay : relays) {
    auto daemon = StartDaemon(learners->Addresses(count), env, "",
                              absl::StrCat(daemon_host, ":0"));
    if (!daemon.ok()) return daemon.status();
    Daemon d{relay, *std::move(daemon)};
    d.stub = pb::Learner::NewStub(Channel(d.daemon.address));
    d.client = std::make_unique<LargeLearnClient>(d.daemon.address);
    daemons.push_back(std::move(d));
  }
  // A plan trains once: every Learn (its plan_id empty, so the newest plan)
  // follows a GetData of its own, outside the timed call.
  auto learn = [&](Daemon& d, pb::LearnReply* reply) -> absl::StatusOr<double> {
    grpc::ClientContext context;
    SetDeadline(&context, kSmallCallDeadline);
    pb::DataDemand demand;
    const grpc::Status s = d.stub->GetData(&context, {}, &demand);
    if (!s.ok()) return FromGrpc("GetData", s);
    if (demand.batch_size() != batch.samples) {
      return absl::InternalError(
          absl::StrCat("GetData via aggregatord demands ", demand.batch_size(),
                       " samples, expected ", batch.samples));
    }
    return d.relay == Relay::kLearn
               ? d.client->Learn(batch.buffer, reply)
               : d.client->LearnStream(batch.messages, reply);
  };

  LargeCaseResult result;
  pb::LearnReply reply;
  for (Daemon& d : daemons) {
    RelayResult& r = result.relays[d.relay];
    const pid_t pid = d.daemon.process->pid();
    auto baseline = ProcStatusKiB(pid, "VmRSS");
    if (!baseline.ok()) return baseline.status();
    r.baseline_rss_mib = *baseline / 1024.0;
    auto warm = learn(d, &reply);
    if (!warm.ok()) return warm.status();
    if (absl::Status s = CheckReceived(reply, batch.samples, "aggregatord");
        !s.ok()) {
      return s;
    }
    auto first_peak = ProcStatusKiB(pid, "VmHWM");
    if (!first_peak.ok()) return first_peak.status();
    r.first_peak_mib = *first_peak / 1024.0;
    // Without a reset the peak still covers the warm-up call; a fresh daemon
    // per case keeps other cases out of it either way.
    r.peak_reset = ResetPeakRss(pid).ok();
  }

  std::vector<double> to_one;
  for (int i = 0; i < iterations; ++i) {
    for (Daemon& d : daemons) {
      auto ms = learn(d, &reply);
      if (!ms.ok()) return ms.status();
      d.ms.push_back(*ms);
    }
    auto ms = direct.Learn(batch.buffer, &reply);
    if (!ms.ok()) return ms.status();
    to_one.push_back(*ms);
  }
  if (absl::Status s = CheckReceived(reply, batch.samples, "direct"); !s.ok()) {
    return s;
  }
  for (Daemon& d : daemons) {
    RelayResult& r = result.relays[d.relay];
    auto peak = ProcStatusKiB(d.daemon.process->pid(), "VmHWM");
    if (!peak.ok()) return peak.status();
    r.peak_mib = *peak / 1024.0;
    r.ms = Summarize(d.ms);
    r.warnings = d.daemon.process->warnings();
  }
  result.direct_ms = Summarize(to_one);
  return result;
}

const char* RelayName(Relay relay) {
  return relay == Relay::kLearn ? "Learn" : "LearnStream";
}

void Bench::AddLargeRows(Section& section, const std::string& prefix,
                         const LargeBatch& batch, int learners, Relay relay,
                         const RelayResult& r, const Summary& direct_ms) {
  const double batch_mib = batch.payload_bytes / kMiB;
  const double ratio = r.ms.median / direct_ms.median;
  const double mb_per_s = batch.payload_bytes / 1e6 / (r.ms.median / 1e3);
  const bool is_64x4 = batch.payload_bytes == 64 * (1 << 20) && learners == 4;
  const bool is_256 = batch.payload_bytes == 256 * (1 << 20);
  const bool stream = relay == Relay::kLearnStream;

  Row time{absl::StrCat(prefix, stream ? "LearnStream " : "Learn ",
                        MiBText(batch.payload_bytes), " MiB, ", learners,
                        " learner", learners == 1 ? "" : "s")};
  time.value = r.ms.median;
  time.unit = "ms";
  time.ratio = ratio;
  time.comparison =
      absl::StrCat(Times(ratio), " direct (", FormatNumber(direct_ms.median),
                   " ms); ", FormatNumber(mb_per_s), " MB/s");
  if (is_64x4 && stream) {
    time.target = "≤ 1.3× direct";
    time.verdict = AtMost(ratio, 1.3);
  } else if (is_64x4) {
    time.target = "≤ 1.5× direct and ≤ 80 ms";
    time.verdict =
        ratio <= 1.5 && r.ms.median <= 80 ? Verdict::kPass : Verdict::kMiss;
  }
  time.details = {
      {"relay", RelayName(relay)},
      {"learners", learners},
      {"batch_bytes", batch.payload_bytes},
      {"samples", batch.samples},
      {"messages", stream ? batch.messages.size() : 1},
      {"aggregated_ms", ToJson(r.ms)},
      {"direct_ms", ToJson(direct_ms)},
      {"mb_per_s", mb_per_s},
      {"direct_mb_per_s", batch.payload_bytes / 1e6 / (direct_ms.median / 1e3)},
      {"daemon_warnings", r.warnings}};
  section.rows.push_back(std::move(time));

  Row rss{absl::StrCat(prefix, "  daemon peak RSS")};
  rss.value = r.peak_mib;
  rss.unit = "MiB";
  rss.ratio = r.peak_mib / batch_mib;
  rss.comparison = absl::StrCat(
      Times(*rss.ratio), " batch; idle ", FormatNumber(r.baseline_rss_mib),
      " MiB, first call ", FormatNumber(r.first_peak_mib), " MiB");
  if (is_256 || (is_64x4 && stream)) {
    const double limit = 1.2 * batch_mib + 64;
    rss.target =
        absl::StrCat("≤ 1.2× batch + 64 MiB (", FormatNumber(limit), ")");
    rss.verdict = AtMost(r.peak_mib, limit);
  }
  rss.details = {{"relay", RelayName(relay)},
                 {"peak_mib", r.peak_mib},
                 {"peak_reset_after_warmup", r.peak_reset},
                 {"first_call_peak_mib", r.first_peak_mib},
                 {"idle_rss_mib", r.baseline_rss_mib}};
  section.rows.push_back(std::move(rss));
}

Section Bench::LargeBatches() {
  const int iterations = options_.large_iterations;
  Section section{
      "2",
      absl::StrCat("Large batches: Learn and LearnStream via "
                   "aggregatord vs the same bytes by Learn direct "
                   "to 1 learner (",
                   MiBText(options_.large_sample_bytes),
                   " MiB samples, LearnStream messages of ",
                   MiBText(options_.stream_message_bytes), " MiB; median of ",
                   iterations, " after 1 warm-up; fresh daemons per case)")};
  return Run(std::move(section), [&](Section& section) -> absl::Status {
    bool reset_failed = false;
    for (const int mib : options_.sizes_mib) {
      const int64_t samples =
          int64_t{mib} * (1 << 20) / options_.large_sample_bytes;
      Progress(absl::StrCat("  ", mib, " MiB: building the request"));
      const auto batch = BuildLargeBatch(samples, options_.large_sample_bytes,
                                         options_.stream_message_bytes);
      auto direct_learner = StartLearners(1, samples, env_);
      if (!direct_learner.ok()) return direct_learner.status();
      LargeLearnClient direct((*direct_learner)[0].address());
      pb::LearnReply reply;
      if (auto warm = direct.Learn(batch->buffer, &reply); !warm.ok()) {
        return warm.status();
      }
      std::vector<double> all_direct;
      for (const int count : options_.learner_counts) {
        if (samples % count != 0) {
          section.notes.push_back(absl::StrCat("skipped ", mib, " MiB over ",
                                               count, " learners: ", samples,
                                               " samples do not split evenly"));
          continue;
        }
        Progress(absl::StrCat("  ", mib, " MiB over ", count, " learner(s)"));
        auto result =
            RunLargeCase(*batch, count, direct, env_, options_.large_iterations,
                         {Relay::kLearn, Relay::kLearnStream});
        if (!result.ok()) {
          return absl::Status(
              result.status().code(),
              absl::StrCat(mib, " MiB over ", count,
                           " learners: ", result.status().message()));
        }
        for (const auto& [relay, r] : result->relays) {
          reset_failed |= !r.peak_reset;
          AddLargeRows(section, "", *batch, count, relay, r, result->direct_ms);
        }
        all_direct.push_back(result->direct_ms.median);
      }
      const Summary d = Summarize(all_direct);
      Row row{absl::StrCat("Learn ", mib, " MiB direct to 1 learner")};
      row.value = d.median;
      row.unit = "ms";
      row.comparison = absl::StrCat(
          FormatNumber(batch->payload_bytes / 1e6 / (d.median / 1e3)),
          " MB/s (median of the cases above)");
      row.details = {{"direct_ms_case_medians", all_direct}};
      section.rows.push_back(std::move(row));
    }
    if (absl::Status s = AddRefusedBodyRow(section, 128); !s.ok()) return s;
    section.notes.push_back(
        reset_failed
            ? "note: /proc/<pid>/clear_refs could not reset the peak: peak RSS "
              "includes the warm-up call"
            : "peak RSS: VmHWM over the timed calls (reset with clear_refs "
              "after the warm-up call); 'first call' is the peak up to and "
              "including the warm-up.");
    return absl::OkStatus();
  });
}

absl::Status Bench::AddRefusedBodyRow(Section& section, int mib) {
  Progress(absl::StrCat("  a refused ", mib, " MiB body of empty samples"));
  constexpr int kLearners = 4;
  auto learners = StartLearners(kLearners, 32, env_);
  if (!learners.ok()) return learners.status();
  auto daemon = StartDaemon(learners->Addresses(kLearners), env_);
  if (!daemon.ok()) return daemon.status();
  auto stub = pb::Learner::NewStub(Channel(daemon->address));
  grpc::ClientContext context;
  SetDeadline(&context, kSmallCallDeadline);
  pb::DataDemand demand;
  if (grpc::Status s = stub->GetData(&context, {}, &demand); !s.ok()) {
    return FromGrpc("GetData", s);
  }
  // A valid plan, then far more (empty) samples than it has: the scanner must
  // stop at sample 129, not index 64 Mi of them.
  auto batch = std::make_unique<LargeBatch>();
  pb::LearnRequest head;
  head.set_plan_id(demand.plan_id());
  head.SerializeToString(&batch->wire);
  const int64_t body = int64_t{mib} << 20;
  batch->wire.reserve(batch->wire.size() + body);
  for (int64_t i = 0; i < body / 2; ++i) batch->wire.append("\x0a\x00", 2);
  batch->payload_bytes = static_cast<int64_t>(batch->wire.size());
  grpc::Slice slice(batch->wire.data(), batch->wire.size(),
                    grpc::Slice::STATIC_SLICE);
  batch->buffer = grpc::ByteBuffer(&slice, 1);

  const pid_t pid = daemon->process->pid();
  auto idle = ProcStatusKiB(pid, "VmRSS");
  if (!idle.ok()) return idle.status();
  const bool reset = ResetPeakRss(pid).ok();
  LargeLearnClient client(daemon->address);
  pb::LearnReply reply;
  const auto started = Clock::now();
  auto refused = client.Learn(batch->buffer, &reply);
  const double ms = ToMs(Clock::now() - started);
  if (refused.ok()) {
    return absl::InternalError(
        absl::StrCat("a Learn of ", mib, " MiB of empty samples was accepted"));
  }
  auto peak = ProcStatusKiB(pid, "VmHWM");
  if (!peak.ok()) return peak.status();
  const double idle_mib = *idle / 1024.0;
  const double peak_mib = *peak / 1024.0;
  const double body_mib = batch->payload_bytes / kMiB;

  Row row{absl::StrCat("Learn of ", mib,
                       " MiB of empty samples, refused: daemon peak RSS")};
  row.value = peak_mib;
  row.unit = "MiB";
  row.ratio = (peak_mib - idle_mib) / body_mib;
  row.comparison =
      absl::StrCat("idle ", FormatNumber(idle_mib), " MiB + ",
                   Times(*row.ratio), " body; refused in ", FormatNumber(ms),
                   " ms: ", refused.status().message().substr(0, 80));
  const double limit = 1.2 * body_mib + idle_mib;
  row.target = absl::StrCat("≤ 1.2× body + idle (", FormatNumber(limit), ")");
  row.verdict = AtMost(peak_mib, limit);
  row.details = {{"peak_mib", peak_mib},
                 {"idle_rss_mib", idle_mib},
                 {"body_bytes", batch->payload_bytes},
                 {"refused_ms", ms},
                 {"peak_reset", reset},
                 {"status", std::string(refused.status().message())}};
  section.rows.push_back(std::move(row));
  return absl::OkStatus();
}

// Section 3 ------------------------------------------------------------------

Section Bench::FanOut() {
  const int iterations = options_.fanout_iterations;
  const int warmup = std::max(5, iterations / 10);
  Section section{
      "3", absl::StrCat("Fan-out: Learn of 16 × 64 B per learner "
                        "via aggregatord (",
                        iterations, " calls after ", warmup, " warm-up)")};
  return Run(std::move(section), [&](Section& section) -> absl::Status {
    std::vector<int> counts = options_.fanout_counts;
    if (counts.empty()) return absl::OkStatus();
    std::sort(counts.begin(), counts.end());
    Progress(absl::StrCat("  starting ", counts.back(), " learners"));
    auto learners = StartLearners(counts.back(), 16, env_);
    if (!learners.ok()) return learners.status();
    std::map<int, Summary> results;
    // Largest first: every case uses the first N learners, so all learners of
    // a case have run the same number of Learns and agree on learner_step (a
    // disagreement would be logged on every call, and logging is not what is
    // measured here).
    for (auto it = counts.rbegin(); it != counts.rend(); ++it) {
      const int count = *it;
      Progress(absl::StrCat("  ", count, " learner(s)"));
      auto daemon = StartDaemon(learners->Addresses(count), env_);
      if (!daemon.ok()) return daemon.status();
      fanout_ready_ms_[count] = daemon->ready_ms;
      auto stub = pb::Learner::NewStub(Channel(daemon->address));
      // A plan trains once: a GetData before each Learn, outside the clock.
      auto plan = [&]() -> absl::Status {
        grpc::ClientContext context;
        SetDeadline(&context, kSmallCallDeadline);
        pb::DataDemand demand;
        const grpc::Status s = stub->GetData(&context, {}, &demand);
        if (!s.ok()) return FromGrpc("GetData", s);
        if (demand.batch_size() != 16 * count) {
          return absl::InternalError(absl::StrCat("GetData demands ",
                                                  demand.batch_size(),
                                                  ", expected ", 16 * count));
        }
        return absl::OkStatus();
      };
      const pb::LearnRequest batch = SyntheticBatch(16 * count, 64, "s");
      pb::LearnReply reply;
      std::vector<double> times;
      for (int i = 0; i < warmup + iterations; ++i) {
        if (absl::Status s = plan(); !s.ok()) return s;
        grpc::ClientContext context;
        SetDeadline(&context, kSmallCallDeadline);
        const auto started = Clock::now();
        const grpc::Status s = stub->Learn(&context, batch, &reply);
        const auto finished = Clock::now();
        if (!s.ok()) return FromGrpc("Learn", s);
        if (i >= warmup) times.push_back(ToMs(finished - started));
      }
      if (absl::Status s = CheckReceived(reply, 16 * count, "aggregatord");
          !s.ok()) {
        return s;
      }
      if (const int warnings = daemon->process->warnings(); warnings > 0) {
        section.notes.push_back(absl::StrCat("note: ", count,
                                             " learners: aggregatord logged ",
                                             warnings, " warning(s)"));
      }
      // Disconnect first: section 5 measures exits with a client connected.
      stub.reset();
      auto exit = Terminate(*daemon, section,
                            absl::StrCat(count, " learners, after load"));
      if (!exit.ok()) return exit.status();
      fanout_exit_ms_[count] = *exit;
      results[count] = Summarize(std::move(times));
    }
    const double one = results.begin()->second.median;
    for (const auto& [count, s] : results) {
      Row row{absl::StrCat("Learn, ", count, " learner", count == 1 ? "" : "s",
                           " (", 16 * count, " samples), median")};
      row.value = s.median;
      row.unit = "ms";
      row.ratio = s.median / one;
      row.comparison =
          absl::StrCat("p99 ", FormatNumber(s.p99), " ms; ", Times(*row.ratio),
                       " the ", results.begin()->first, "-learner median");
      row.details = {{"learners", count}, {"ms", ToJson(s)}};
      section.rows.push_back(std::move(row));
    }
    return absl::OkStatus();
  });
}

// Section 4 ------------------------------------------------------------------

Section Bench::Supervisor() {
  Section section{"4",
                  "Supervisor: round trip (process, thread children), "
                  "RecvAll of three"};
  return Run(std::move(section), [&](Section& section) -> absl::Status {
    auto published = [&](const std::string& metric, double us, double target) {
      Row row{absl::StrCat("Python original: ", metric)};
      row.value = us;
      row.unit = "µs";
      row.comparison = kPublished;
      if (target > 0) {
        row.target = absl::StrCat("aggregatord ≤ ", target, " µs");
      }
      section.rows.push_back(std::move(row));
    };
    if (options_.supervisor_bench.empty()) {
      Row row{"supervisor round trip, RecvAll"};
      row.text = "not built yet";
      row.comparison = "no //tools:supervisor_bench in this tree";
      row.target = "≤ 25 µs process, ≤ 5 µs thread";
      section.rows.push_back(std::move(row));
      section.notes.push_back(
          "NOT MEASURED: //tools:supervisor_bench is not built yet (build it, "
          "or pass --supervisor-bench PATH); no numbers are shown for it.");
    } else {
      Progress(absl::StrCat("  running ", options_.supervisor_bench));
      SubprocessOptions run;
      run.argv = {options_.supervisor_bench};
      auto process = Subprocess::Start(run);
      if (!process.ok()) return process.status();
      const auto deadline = Clock::now() + kSupervisorBenchDeadline;
      std::string output;
      while (true) {
        auto line = (*process)->ReadLine(deadline);
        if (!line.ok()) {
          if (absl::IsOutOfRange(line.status())) break;
          return line.status();
        }
        absl::StrAppend(&output, *line, "\n");
      }
      std::string errors;
      while (true) {
        auto line = (*process)->ReadLine(deadline, /*from_stderr=*/true);
        if (!line.ok()) break;
        absl::StrAppend(&errors, *line, "\n");
      }
      auto exit = (*process)->Wait(deadline);
      if (!exit.ok()) return exit.status();
      section.notes.push_back(absl::StrCat("output of ",
                                           options_.supervisor_bench, " (",
                                           exit->ToString(), "), verbatim:"));
      section.notes.push_back(output);
      if (!exit->ok()) {
        section.notes.push_back(absl::StrCat("its stderr:\n", errors));
        return absl::InternalError(
            absl::StrCat("supervisor_bench exited with ", exit->ToString()));
      }
    }
    published("round trip, process child", 114, 25);
    published("round trip, thread child", 52, 5);
    published("RecvAll of three, process children", 485, 0);
    published("RecvAll of three, thread children", 193, 0);
    return absl::OkStatus();
  });
}

// Section 5 ------------------------------------------------------------------

Section Bench::StartUp() {
  const int cycles = options_.startup_cycles;
  Section section{
      "5", absl::StrCat("Start-up and shutdown: 4 learners already "
                        "answering; ",
                        cycles, " daemon start/stop cycles, then ",
                        options_.quick ? 1 : 2, " with a client connected")};
  return Run(std::move(section), [&](Section& section) -> absl::Status {
    auto learners = StartLearners(4, 32, env_);
    if (!learners.ok()) return learners.status();
    // "Learners up" means answering, not just listening: one call each.
    for (size_t i = 0; i < learners->size(); ++i) {
      auto stub = pb::Learner::NewStub(Channel((*learners)[i].address()));
      grpc::ClientContext context;
      SetDeadline(&context, kSmallCallDeadline);
      context.set_wait_for_ready(true);
      pb::Resource resource;
      const grpc::Status s = stub->GetResource(&context, {}, &resource);
      if (!s.ok()) return FromGrpc("GetResource on a learner", s);
    }
    // The last `connected_cycles` keep a coordinator's channel open (after a
    // call) while the daemon stops, as a coordinator would during a restart.
    const int connected_cycles = options_.quick ? 1 : 2;
    std::vector<double> ready, listening, in_daemon, exits, connected_exits;
    for (int cycle = 0; cycle < cycles + connected_cycles; ++cycle) {
      const bool connected = cycle >= cycles;
      auto daemon = StartDaemon(learners->Addresses(4), env_);
      if (!daemon.ok()) return daemon.status();
      ready.push_back(daemon->ready_ms);
      listening.push_back(daemon->listening_ms);
      if (daemon->log_ready_ms.has_value()) {
        in_daemon.push_back(*daemon->log_ready_ms);
      }
      // Serving means answering: one call through it before stopping.
      auto stub = pb::Learner::NewStub(Channel(daemon->address));
      {
        grpc::ClientContext context;  // holds the channel while it lives
        SetDeadline(&context, kSmallCallDeadline);
        pb::Resource resource;
        const grpc::Status s = stub->GetResource(&context, {}, &resource);
        if (!s.ok()) return FromGrpc("GetResource via aggregatord", s);
        if (resource.learners() != 4) {
          return absl::InternalError(absl::StrCat(
              "aggregatord reports ", resource.learners(), " learners, not 4"));
        }
      }
      if (!connected) stub.reset();  // the channel closes with the stub
      auto exit = Terminate(
          *daemon, section,
          connected ? "idle, client connected" : "idle, no client connected");
      if (!exit.ok()) return exit.status();
      (connected ? connected_exits : exits).push_back(*exit);
    }
    const Summary r = Summarize(ready);
    const Summary e = Summarize(exits);

    Row up{"ready: spawn → health SERVING, 4 learners, median"};
    up.value = r.median;
    up.unit = "ms";
    up.comparison = absl::StrCat("max ", FormatNumber(r.max), " ms");
    up.target = "≤ 100 ms";
    up.verdict = AtMost(r.median, 100);
    up.details = {{"ms", ToJson(r)}};
    section.rows.push_back(std::move(up));

    {
      const Summary l = Summarize(listening);
      Row row{"  spawn → \"listening\" line read (exec, load, bind)"};
      row.value = l.median;
      row.unit = "ms";
      row.details = {{"ms", ToJson(l)}};
      section.rows.push_back(std::move(row));
    }
    if (!in_daemon.empty()) {
      const Summary d = Summarize(in_daemon);
      Row row{"  daemon's log: \"starting\" → \"serving\""};
      row.value = d.median;
      row.unit = "ms";
      row.comparison = "log timestamps, 1 ms resolution";
      row.details = {{"ms", ToJson(d)}};
      section.rows.push_back(std::move(row));
    }
    Row python_up{"Python original: start-up"};
    python_up.value = kPythonStartupMs;
    python_up.unit = "ms";
    python_up.ratio = kPythonStartupMs / r.median;
    python_up.comparison = absl::StrCat(kPublished, "; aggregatord ",
                                        Times(*python_up.ratio), " faster");
    section.rows.push_back(std::move(python_up));

    Row down{"idle SIGTERM → exit, no client connected, median"};
    down.value = e.median;
    down.unit = "ms";
    down.comparison = absl::StrCat("max ", FormatNumber(e.max), " ms");
    down.target = "≤ 200 ms";
    down.verdict = AtMost(e.median, 200);
    down.details = {{"ms", ToJson(e)}};
    section.rows.push_back(std::move(down));

    const Summary c = Summarize(connected_exits);
    Row held{"idle SIGTERM → exit, coordinator connected, median"};
    held.value = c.median;
    held.unit = "ms";
    held.comparison = absl::StrCat("max ", FormatNumber(c.max),
                                   " ms; channel open, no call in flight");
    held.target = "≤ 200 ms";
    held.verdict = AtMost(c.median, 200);
    held.details = {{"ms", ToJson(c)}};
    section.rows.push_back(std::move(held));

    Row python_down{"Python original: close"};
    python_down.value = kPythonCloseMs;
    python_down.unit = "ms";
    python_down.ratio = kPythonCloseMs / std::max(e.median, c.median);
    python_down.comparison = absl::StrCat(kPublished, "; aggregatord ",
                                          Times(*python_down.ratio), " faster");
    section.rows.push_back(std::move(python_down));

    for (const auto& [count, ms] : fanout_ready_ms_) {
      Row row{absl::StrCat("ready with ", count, " learner",
                           count == 1 ? "" : "s", " (section 3, one start)")};
      row.value = ms;
      row.unit = "ms";
      row.comparison =
          absl::StrCat("SIGTERM → exit after load, client gone: ",
                       FormatNumber(fanout_exit_ms_[count]), " ms");
      section.rows.push_back(std::move(row));
    }
    return absl::OkStatus();
  });
}

// Section 6 ------------------------------------------------------------------

// The hosts of section 6, all on the namespace's loopback: the coordinator
// (the bench) at 127.0.0.1, aggregatord at 127.0.0.2, the learners at
// 127.0.0.3. What is sent to a host shares one class of the bandwidth limit,
// as its network link would: a batch to aggregatord crosses one link, the
// aggregator's slices to the learners (or the direct batch) another.
constexpr char kNetnsDaemonHost[] = "127.0.0.2";
constexpr char kNetnsLearnerHost[] = "127.0.0.3";

// Runs a command of the namespace's set-up, with a deadline.
absl::Status RunSetup(const std::vector<std::string>& argv) {
  SubprocessOptions run;
  run.argv = argv;
  auto process = Subprocess::Start(run);
  if (!process.ok()) return process.status();
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  std::string errors;
  while (true) {
    auto line = (*process)->ReadLine(deadline, /*from_stderr=*/true);
    if (!line.ok()) break;
    absl::StrAppend(&errors, *line, " ");
  }
  auto exit = (*process)->Wait(deadline);
  if (!exit.ok()) return exit.status();
  if (!exit->ok()) {
    return absl::InternalError(absl::StrCat(absl::StrJoin(argv, " "), ": ",
                                            exit->ToString(), ": ", errors));
  }
  return absl::OkStatus();
}

absl::Status LimitLoopback(const std::string& rate) {
  // A fresh namespace has nothing but lo: nothing can leave the machine.
  const std::vector<std::vector<std::string>> commands = {
      {"ip", "link", "set", "lo", "up"},
      {"tc", "qdisc", "add", "dev", "lo", "root", "handle", "1:", "htb",
       "default", "1", "r2q", "1000"},
      // The replies and acknowledgements: not limited.
      {"tc", "class", "add", "dev", "lo", "parent", "1:", "classid", "1:1",
       "htb", "rate", "100gbit", "burst", "4m", "cburst", "4m"},
      {"tc", "class", "add", "dev", "lo", "parent", "1:", "classid", "1:2",
       "htb", "rate", rate, "burst", "256k", "cburst", "256k"},
      {"tc", "class", "add", "dev", "lo", "parent", "1:", "classid", "1:3",
       "htb", "rate", rate, "burst", "256k", "cburst", "256k"},
      {"tc", "filter", "add", "dev", "lo", "parent", "1:", "protocol", "ip",
       "prio", "1", "u32", "match", "ip", "dst",
       absl::StrCat(kNetnsDaemonHost, "/32"), "flowid", "1:2"},
      {"tc", "filter", "add", "dev", "lo", "parent", "1:", "protocol", "ip",
       "prio", "1", "u32", "match", "ip", "dst",
       absl::StrCat(kNetnsLearnerHost, "/32"), "flowid", "1:3"},
  };
  for (const auto& command : commands) {
    if (absl::Status s = RunSetup(command); !s.ok()) return s;
  }
  return absl::OkStatus();
}

// This executable, to run again in the namespace.
std::string SelfExecutable() {
  char path[4096];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
  return n > 0 ? std::string(path, n) : "";
}

Section Bench::Network() {
  Section section{
      "6", absl::StrCat("A network that is not loopback: a batch over 4 "
                        "learners with each host's link limited to ",
                        options_.netns_rate,
                        " (tc htb on the loopback of a network namespace the "
                        "bench creates; median of ",
                        options_.netns_iterations, " after 1 warm-up)")};
  return Run(std::move(section), [&](Section& section) -> absl::Status {
    if (geteuid() != 0) {
      section.notes.push_back(
          "NOT MEASURED: a network namespace (unshare --net) and tc need "
          "root; run the bench as root for this section.");
      return absl::OkStatus();
    }
    auto out = dir_.Write("network-section.json", "");
    if (!out.ok()) return out.status();
    SubprocessOptions run;
    run.argv = {"unshare",
                "--net",
                "--",
                SelfExecutable(),
                "--netns-child-out",
                *out,
                "--daemon",
                options_.daemon,
                "--learner",
                options_.learner,
                "--netns-rate",
                options_.netns_rate,
                "--netns-iterations",
                absl::StrCat(options_.netns_iterations),
                "--sample-bytes",
                absl::StrCat(options_.large_sample_bytes),
                "--stream-message-bytes",
                absl::StrCat(options_.stream_message_bytes),
                "--netns-sizes-mib",
                absl::StrJoin(options_.netns_sizes_mib, ",")};
    for (const auto& [key, value] : env_.vars) {
      run.argv.push_back("--env");
      run.argv.push_back(absl::StrCat(key, "=", value));
    }
    run.capture_output = false;  // its progress goes where ours does
    auto child = Subprocess::Start(run);
    if (!child.ok()) return child.status();
    auto exit = (*child)->Wait(Clock::now() + std::chrono::minutes(10));
    if (!exit.ok()) {
      (*child)->Stop(std::chrono::seconds(2));
      return absl::DeadlineExceededError(
          "section 6's child did not finish within 10 minutes");
    }
    std::ifstream in(*out);
    std::stringstream text;
    text << in.rdbuf();
    const nlohmann::json json =
        nlohmann::json::parse(text.str(), nullptr,
                              /*allow_exceptions=*/false);
    if (json.is_discarded()) {
      return absl::InternalError(
          absl::StrCat("section 6's child (unshare --net) ended with ",
                       exit->ToString(), " and no result"));
    }
    auto measured = SectionFromJson(json);
    if (!measured.ok()) return measured.status();
    section.rows = std::move(measured->rows);
    section.notes = std::move(measured->notes);
    section.failed = measured->failed;
    return absl::OkStatus();
  });
}

Section Bench::NetworkInNamespace() {
  const int iterations = options_.netns_iterations;
  Section section{"6", "in the namespace"};
  return Run(std::move(section), [&](Section& section) -> absl::Status {
    if (absl::Status s = LimitLoopback(options_.netns_rate); !s.ok()) return s;
    for (const int mib : options_.netns_sizes_mib) {
      const int64_t samples =
          int64_t{mib} * (1 << 20) / options_.large_sample_bytes;
      const auto batch = BuildLargeBatch(samples, options_.large_sample_bytes,
                                         options_.stream_message_bytes);
      auto direct_learner = StartLearners(1, samples, env_, kNetnsLearnerHost);
      if (!direct_learner.ok()) return direct_learner.status();
      LargeLearnClient direct((*direct_learner)[0].address());
      pb::LearnReply reply;
      if (auto warm = direct.Learn(batch->buffer, &reply); !warm.ok()) {
        return warm.status();
      }
      Progress(absl::StrCat("  ", mib, " MiB over 4 learners at ",
                            options_.netns_rate));
      auto result = RunLargeCase(*batch, 4, direct, env_, iterations,
                                 {Relay::kLearn, Relay::kLearnStream},
                                 kNetnsLearnerHost, kNetnsDaemonHost);
      if (!result.ok()) return result.status();
      const Summary& d = result->direct_ms;
      Row one{absl::StrCat("Learn ", mib, " MiB direct to 1 learner")};
      one.value = d.median;
      one.unit = "ms";
      one.comparison = absl::StrCat(
          FormatNumber(batch->payload_bytes / 1e6 / (d.median / 1e3)),
          " MB/s over a ", options_.netns_rate, " link");
      one.details = {{"direct_ms", ToJson(d)}, {"rate", options_.netns_rate}};
      section.rows.push_back(std::move(one));
      for (const auto& [relay, r] : result->relays) {
        const size_t first = section.rows.size();
        AddLargeRows(section, "", *batch, 4, relay, r, d);
        Row& time = section.rows[first];
        time.details["rate"] = options_.netns_rate;
        if (relay == Relay::kLearnStream && mib == 64) {
          time.target = "≤ 1.35× direct";
          time.verdict = AtMost(*time.ratio, 1.35);
        } else {
          time.target =
              relay == Relay::kLearn ? "(store-and-forward ≈ 2×)" : "";
          time.verdict = Verdict::kNone;
        }
      }
    }
    section.notes.push_back(absl::StrCat(
        "hosts on the namespace's loopback: coordinator 127.0.0.1, "
        "aggregatord ",
        kNetnsDaemonHost, ", learners ", kNetnsLearnerHost,
        "; what is sent to a host shares one htb class of ",
        options_.netns_rate, " (its link), replies are not limited."));
    return absl::OkStatus();
  });
}

// Section A ------------------------------------------------------------------

// The allocators compared: each applies to the daemon and to every learner.
// aggregatord and example_learner link tcmalloc
// (//third_party/system:tcmalloc), so glibc's malloc cannot be chosen by
// environment any more; a preloaded allocator still takes precedence over the
// linked one. The glibc figures that led to linking tcmalloc are in
// tools/bench/BENCH.md.
std::vector<ChildEnv> AllocatorVariants(std::vector<std::string>* missing) {
  std::vector<ChildEnv> variants = {{"as built (tcmalloc)", {}}};
  const std::pair<const char*, const char*> preloads[] = {
      {"jemalloc", "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"},
      {"tcmalloc (full, preloaded)",
       "/usr/lib/x86_64-linux-gnu/libtcmalloc.so.4"},
  };
  for (const auto& [label, path] : preloads) {
    if (access(path, R_OK) == 0) {
      variants.push_back({label, {{"LD_PRELOAD", path}}});
    } else {
      missing->push_back(absl::StrCat(label, " (", path, " not installed)"));
    }
  }
  return variants;
}

Section Bench::Allocators() {
  const int iterations = options_.large_iterations;
  Section section{"A", absl::StrCat("Allocators in aggregatord and the "
                                    "learners: Learn over 4 learners (median "
                                    "of ",
                                    iterations, " after 1 warm-up)")};
  return Run(std::move(section), [&](Section& section) -> absl::Status {
    std::vector<std::string> missing;
    const std::vector<ChildEnv> variants = AllocatorVariants(&missing);
    const int64_t sample = options_.large_sample_bytes;
    const auto batch64 = BuildLargeBatch(int64_t{64} * (1 << 20) / sample,
                                         sample, options_.stream_message_bytes);
    const auto batch256 =
        BuildLargeBatch(int64_t{256} * (1 << 20) / sample, sample,
                        options_.stream_message_bytes);
    for (const ChildEnv& variant : variants) {
      for (const LargeBatch* batch : {batch64.get(), batch256.get()}) {
        Progress(absl::StrCat("  ", variant.label, ": ",
                              MiBText(batch->payload_bytes),
                              " MiB over 4 learners"));
        auto direct_learner = StartLearners(1, batch->samples, variant);
        if (!direct_learner.ok()) return direct_learner.status();
        LargeLearnClient direct((*direct_learner)[0].address());
        pb::LearnReply reply;
        if (auto warm = direct.Learn(batch->buffer, &reply); !warm.ok()) {
          return warm.status();
        }
        auto result = RunLargeCase(*batch, 4, direct, variant, iterations,
                                   {Relay::kLearn});
        if (!result.ok()) {
          return absl::Status(
              result.status().code(),
              absl::StrCat(variant.label, ": ", result.status().message()));
        }
        const size_t first = section.rows.size();
        AddLargeRows(section, variant.label + ": ", *batch, 4, Relay::kLearn,
                     result->relays.at(Relay::kLearn), result->direct_ms);
        for (size_t i = first; i < section.rows.size(); ++i) {
          section.rows[i].details["allocator"] = variant.label;
          section.rows[i].details["env"] = variant.vars;
        }
      }
    }
    for (const ChildEnv& variant : variants) {
      if (variant.vars.empty()) continue;
      section.notes.push_back(absl::StrCat(variant.label, ": ",
                                           variant.vars[0].first, "=",
                                           variant.vars[0].second));
    }
    for (const std::string& m : missing) {
      section.notes.push_back(absl::StrCat("not compared: ", m));
    }
    return absl::OkStatus();
  });
}

// main -----------------------------------------------------------------------

// The bench's own directory (bazel-bin/tools/bench), where a sibling target's
// binary lands once built.
std::string OwnDirectory() {
  const std::string exe = SelfExecutable();
  return exe.substr(0, exe.rfind('/'));
}

absl::Status ResolveBinaries(const char* argv0, BenchOptions& options) {
  const ToolPaths paths(argv0, "bench");
  if (options.daemon.empty())
    options.daemon = paths.Locate("daemon/aggregatord");
  if (options.learner.empty()) {
    options.learner = paths.Locate("tools/examples/example_learner");
  }
  if (options.supervisor_bench.empty()) {
    options.supervisor_bench = paths.Locate("tools/bench/supervisor_bench");
    const std::string sibling = OwnDirectory() + "/supervisor_bench";
    if (options.supervisor_bench.empty() && Executable(sibling)) {
      options.supervisor_bench = sibling;
    }
  }
  absl::StatusOr<std::string> daemon =
      paths.Require(options.daemon, "aggregatord", "--daemon");
  if (!daemon.ok()) return daemon.status();
  absl::StatusOr<std::string> learner =
      paths.Require(options.learner, "example_learner", "--learner");
  if (!learner.ok()) return learner.status();
  options.daemon = *std::move(daemon);
  options.learner = *std::move(learner);
  return absl::OkStatus();
}

absl::StatusOr<ChildEnv> ParseEnv(const BenchOptions& options) {
  ChildEnv env;
  std::vector<std::string> shown;
  for (const std::string& entry : options.env) {
    const size_t eq = entry.find('=');
    if (eq == std::string::npos || eq == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--env '", entry, "': expected KEY=VALUE"));
    }
    env.vars.emplace_back(entry.substr(0, eq), entry.substr(eq + 1));
    shown.push_back(entry);
  }
  if (!options.preload.empty()) {
    if (access(options.preload.c_str(), R_OK) != 0) {
      return absl::NotFoundError(
          absl::StrCat("--preload '", options.preload, "' is not readable"));
    }
    env.vars.emplace_back("LD_PRELOAD", options.preload);
    shown.push_back(absl::StrCat("LD_PRELOAD=", options.preload));
  }
  if (!shown.empty()) env.label = absl::StrJoin(shown, " ");
  return env;
}

nlohmann::json OptionsJson(const BenchOptions& o, const ChildEnv& env) {
  return {{"quick", o.quick},
          {"small_iterations", o.small_iterations},
          {"fanout_iterations", o.fanout_iterations},
          {"large_iterations", o.large_iterations},
          {"startup_cycles", o.startup_cycles},
          {"sizes_mib", o.sizes_mib},
          {"learner_counts", o.learner_counts},
          {"fanout_counts", o.fanout_counts},
          {"large_sample_bytes", o.large_sample_bytes},
          {"stream_message_bytes", o.stream_message_bytes},
          {"breakdown_iterations", o.breakdown_iterations},
          {"baseline_daemon", o.baseline_daemon},
          {"netns_rate", o.netns_rate},
          {"netns_iterations", o.netns_iterations},
          {"netns_sizes_mib", o.netns_sizes_mib},
          {"sections", o.sections},
          {"compare_allocators", o.compare_allocators},
          {"daemon", o.daemon},
          {"learner", o.learner},
          {"supervisor_bench", o.supervisor_bench},
          {"child_env", env.label},
          {"child_env_vars", env.vars}};
}

int Main(int argc, char** argv) {
  BenchOptions options;
  CLI::App app{
      "bench: measures aggregatord against issue 6 (small calls, large "
      "batches, fan-out, supervisor, start-up) with real processes"};
  app.add_flag("--quick", options.quick,
               "a short run (about 30 s): fewer iterations everywhere");
  auto* small = app.add_option("--iterations", options.small_iterations,
                               "timed small calls per method and target")
                    ->check(CLI::PositiveNumber);
  auto* fanout =
      app.add_option("--fanout-iterations", options.fanout_iterations,
                     "timed Learn calls per fan-out case")
          ->check(CLI::PositiveNumber);
  auto* large = app.add_option("--large-iterations", options.large_iterations,
                               "timed calls per large-batch case")
                    ->check(CLI::PositiveNumber);
  auto* cycles = app.add_option("--startup-cycles", options.startup_cycles,
                                "daemon start/stop cycles in section 5")
                     ->check(CLI::PositiveNumber);
  app.add_option("--sizes-mib", options.sizes_mib, "large batch sizes in MiB")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  auto* counts = app.add_option("--learner-counts", options.learner_counts,
                                "learner counts for large batches (--quick: "
                                "4 only)")
                     ->delimiter(',')
                     ->check(CLI::PositiveNumber);
  app.add_option("--fanout-counts", options.fanout_counts,
                 "learner counts for fan-out")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  app.add_option("--sample-bytes", options.large_sample_bytes,
                 "bytes per sample in large batches")
      ->check(CLI::PositiveNumber);
  app.add_option("--sections", options.sections,
                 "which sections to run, e.g. 125 (default 123456)");
  app.add_option("--stream-message-bytes", options.stream_message_bytes,
                 "bytes of samples per LearnStream message (sections 2, 6)")
      ->check(CLI::PositiveNumber);
  auto* breakdown =
      app.add_option("--breakdown-iterations", options.breakdown_iterations,
                     "section 1: calls asking the daemon for its timestamps, "
                     "per method")
          ->check(CLI::PositiveNumber);
  app.add_option("--baseline-daemon", options.baseline_daemon,
                 "section 1: another aggregatord build timed beside this one "
                 "(e.g. main's), call by call");
  app.add_option("--netns-rate", options.netns_rate,
                 "section 6: each host's link (tc rate, e.g. 1gbit, 10gbit)");
  auto* netns_iterations =
      app.add_option("--netns-iterations", options.netns_iterations,
                     "section 6: timed calls per relay")
          ->check(CLI::PositiveNumber);
  app.add_option("--netns-sizes-mib", options.netns_sizes_mib,
                 "section 6: batch sizes in MiB (default 64)")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  app.add_option("--netns-child-out", options.netns_child_out,
                 "(internal) run section 6 here and write it to this file")
      ->group("");
  app.add_flag("--compare-allocators", options.compare_allocators,
               "run only section A: as built (tcmalloc) against preloaded "
               "jemalloc and full tcmalloc, 64 and 256 MiB over 4 learners");
  app.add_option("--daemon", options.daemon,
                 "aggregatord binary (default: from the runfiles)");
  app.add_option("--learner", options.learner,
                 "example_learner binary (default: from the runfiles)");
  app.add_option("--supervisor-bench", options.supervisor_bench,
                 "supervisor_bench binary (default: built next to bench)");
  app.add_option("--env", options.env,
                 "KEY=VALUE for the daemon and learners (repeatable), e.g. "
                 "TCMALLOC_RELEASE_RATE=0");
  app.add_option("--preload", options.preload,
                 "LD_PRELOAD for the daemon and learners, e.g. "
                 "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2");
  app.add_option("--json", options.json_path,
                 "results file (default: bench-results.json in the directory "
                 "bazel run was called from, else the current one)");
  CLI11_PARSE(app, argc, argv);

  if (options.quick) {
    if (small->count() == 0) options.small_iterations = 200;
    if (fanout->count() == 0) options.fanout_iterations = 30;
    if (large->count() == 0) options.large_iterations = 1;
    if (cycles->count() == 0) options.startup_cycles = 2;
    // The targets' cases only: 64 MiB over 4 learners and 256 MiB RSS.
    if (counts->count() == 0) options.learner_counts = {4};
    if (breakdown->count() == 0) options.breakdown_iterations = 100;
    if (netns_iterations->count() == 0) options.netns_iterations = 1;
  }
  if (options.compare_allocators) options.sections = "A";
  if (options.json_path.empty()) options.json_path = "bench-results.json";
  options.json_path = UserPath(options.json_path);
  options.daemon = UserPath(options.daemon);
  options.learner = UserPath(options.learner);
  options.supervisor_bench = UserPath(options.supervisor_bench);
  options.preload = UserPath(options.preload);
  options.baseline_daemon = UserPath(options.baseline_daemon);

  if (absl::Status s = ResolveBinaries(argv[0], options); !s.ok()) {
    std::fprintf(stderr, "bench: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  auto env = ParseEnv(options);
  if (!env.ok()) {
    std::fprintf(stderr, "bench: %s\n",
                 std::string(env.status().message()).c_str());
    return 2;
  }
  auto dir = TempDir::Create();
  if (!dir.ok()) {
    std::fprintf(stderr, "bench: %s\n", dir.status().ToString().c_str());
    return 2;
  }

  if (!options.netns_child_out.empty()) {
    // Section 6's child, in its network namespace: the section as JSON.
    Bench bench(options, *env, std::move(*dir));
    const Section section = bench.NetworkInNamespace();
    std::ofstream out(options.netns_child_out, std::ios::trunc);
    out << SectionJson(section).dump() << "\n";
    out.close();
    return out && !section.failed ? 0 : 1;
  }

  Report report;
  report.machine = ReadMachineInfo();
  report.options = OptionsJson(options, *env);
  Progress(absl::StrCat("daemon ", options.daemon, "; learner ",
                        options.learner, "; child env: ", env->label));
  const auto started = Clock::now();
  {
    Bench bench(options, *env, std::move(*dir));
    const std::string& s = options.sections;
    auto wants = [&](char id) { return s.find(id) != std::string::npos; };
    if (wants('1')) report.sections.push_back(bench.SmallCalls());
    if (wants('2')) report.sections.push_back(bench.LargeBatches());
    if (wants('3')) report.sections.push_back(bench.FanOut());
    if (wants('4')) report.sections.push_back(bench.Supervisor());
    if (wants('5')) report.sections.push_back(bench.StartUp());
    if (wants('6')) report.sections.push_back(bench.Network());
    if (wants('A')) report.sections.push_back(bench.Allocators());
  }
  const double seconds =
      std::chrono::duration<double>(Clock::now() - started).count();
  report.options["wall_seconds"] = seconds;

  std::string text = report.Text();
  absl::StrAppend(
      &text, "\nchild env: ",
      options.compare_allocators ? "per allocator (section A)" : env->label,
      "; ran ", FormatNumber(seconds), " s; results in ", options.json_path,
      "\n");
  std::fputs(text.c_str(), stdout);
  std::fflush(stdout);

  std::ofstream json(options.json_path, std::ios::trunc);
  json << report.Json().dump(2) << "\n";
  json.close();
  if (!json) {
    std::fprintf(stderr, "bench: cannot write %s\n", options.json_path.c_str());
    return 1;
  }
  const bool failed =
      std::any_of(report.sections.begin(), report.sections.end(),
                  [](const Section& section) { return section.failed; });
  return failed ? 1 : 0;
}

}  // namespace
}  // namespace aggregator

int main(int argc, char** argv) { return aggregator::Main(argc, argv); }
