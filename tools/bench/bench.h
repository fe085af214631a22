// What the sections of tools/bench share: the options, deadlines and the Python
// original's figures, small helpers, the large-batch client, and Bench, whose
// sections are defined one file each (section1_small_calls.cc ...
// sectionA_allocators.cc; main in bench_main.cc). See BENCH.md for the rows.
#ifndef TOOLS_BENCH_BENCH_H_
#define TOOLS_BENCH_BENCH_H_

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/learner.grpc.pb.h"
#include "tools/bench/bench_processes.h"
#include "tools/bench/bench_report.h"

namespace aggregator::bench {

namespace pb = aggregator::v1;
using Clock = BenchClock;
using Milliseconds = std::chrono::duration<double, std::milli>;

constexpr double kMiB = 1024.0 * 1024.0;

// Deadlines: generous, because other builds may share the 2 cores.
constexpr std::chrono::seconds kStartDeadline(30);
constexpr std::chrono::seconds kSmallCallDeadline(10);
constexpr std::chrono::seconds kLargeCallDeadline(120);
constexpr std::chrono::seconds kExitDeadline(10);

// The Python original, measured by issue 6's author (not here).
constexpr char kPublished[] = "published, not measured here";
constexpr double kPythonResourceMs = 4.4;
constexpr double kPythonGetDataMs = 26;
constexpr double kPythonLearnMs = 28;
constexpr double kPythonStartupMs = 6100;
constexpr double kPythonCloseMs = 9000;

// The flags (bench_main.cc says what each means).
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
  // Section 7: worker replica counts, and the idle window the guards' CPU
  // is read over.
  std::vector<int> guard_replicas = {1, 50, 200};
  int guard_window_s = 10;
  std::string netns_child_out;  // set: this process is section 6's child
  std::string sections = "123456";
  bool compare_allocators = false;
  std::string daemon;
  std::string learner;
  std::string minimal_relay;
  std::string supervisor_bench;
  std::vector<std::string> env;
  std::string preload;
  std::string json_path;
};

// Progress on stderr, with the seconds since the first call.
void Progress(const std::string& text);

// "16" for whole numbers of MiB, else three figures.
std::string MiBText(double bytes);

std::string Times(double ratio);

double ToMs(Clock::duration d);

std::shared_ptr<grpc::Channel> Channel(const std::string& address);

void SetDeadline(grpc::ClientContext* context, std::chrono::seconds timeout);

absl::Status FromGrpc(const char* what, const grpc::Status& status);

// The sample count a Learn reply reports: the example learner's `received`,
// which the aggregator merges into one entry per learner.
int64_t ReceivedCount(const pb::LearnReply& reply);

absl::Status CheckReceived(const pb::LearnReply& reply, int64_t expected,
                           const std::string& where);

// This executable (section 6 runs it again in a network namespace).
std::string SelfExecutable();

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

std::unique_ptr<LargeBatch> BuildLargeBatch(int64_t samples,
                                            int64_t sample_bytes,
                                            int64_t message_bytes);

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
                               pb::LearnReply* reply);

  // One LearnStream; returns its wall time in ms.
  absl::StatusOr<double> LearnStream(
      const std::vector<grpc::ByteBuffer>& messages, pb::LearnReply* reply);

 private:
  // Starts one operation with a tag and waits for it: whether it succeeded.
  // Past the deadline the call is cancelled (the operation then completes,
  // and a Finish says DEADLINE_EXCEEDED or CANCELLED).
  bool Step(const std::function<void(void*)>& start,
            grpc::ClientContext* context,
            std::chrono::system_clock::time_point deadline);

  // The call's wall time in ms, or why it failed; the reply is parsed after
  // the clock has stopped.
  static absl::StatusOr<double> Answer(const char* method, Clock::duration took,
                                       const grpc::Status& status,
                                       grpc::ByteBuffer* response,
                                       pb::LearnReply* reply);

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

const char* RelayName(Relay relay);

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
  // Section 7 (not run by default: minutes with hundreds of replicas).
  Section IdleGuards();

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

}  // namespace aggregator::bench

#endif  // TOOLS_BENCH_BENCH_H_
