#include "tools/bench/bench.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "proto/learner_names.h"
#include "tests/testing/synthetic_batch.h"

namespace aggregator::bench {

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

std::string SelfExecutable() {
  char path[4096];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
  return n > 0 ? std::string(path, n) : "";
}

namespace {

// A ByteBuffer over wire[begin, end), which must outlive it.
grpc::ByteBuffer StaticBuffer(const std::string& wire, size_t begin,
                              size_t end) {
  grpc::Slice slice(wire.data() + begin, end - begin,
                    grpc::Slice::STATIC_SLICE);
  return grpc::ByteBuffer(&slice, 1);
}

}  // namespace

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

namespace {

// One large call's state: its context with kLargeCallDeadline set, what it
// answers, and when it started (the clock starts once the call is set up).
struct LargeCall {
  LargeCall() {
    context.set_deadline(deadline);
    started = Clock::now();
  }
  grpc::ClientContext context;
  const std::chrono::system_clock::time_point deadline =
      std::chrono::system_clock::now() + kLargeCallDeadline;
  grpc::ByteBuffer response;
  grpc::Status status;
  Clock::time_point started;
};

}  // namespace

absl::StatusOr<double> LargeLearnClient::Learn(const grpc::ByteBuffer& request,
                                               pb::LearnReply* reply) {
  LargeCall c;
  auto call = stub_.PrepareUnaryCall(&c.context, kLearnMethod, request, &cq_);
  call->StartCall();
  (void)Step([&](void* tag) { call->Finish(&c.response, &c.status, tag); },
             &c.context, c.deadline);
  return Answer("Learn", Clock::now() - c.started, c.status, &c.response,
                reply);
}

absl::StatusOr<double> LargeLearnClient::LearnStream(
    const std::vector<grpc::ByteBuffer>& messages, pb::LearnReply* reply) {
  LargeCall c;
  auto call = stub_.PrepareCall(&c.context, kLearnStreamMethod, &cq_);
  // Each step waits for its own tag; a failed one (the call is over) skips
  // to Finish, which says why.
  auto step = [&](const std::function<void(void*)>& start) {
    return Step(start, &c.context, c.deadline);
  };
  bool ok = step([&](void* tag) { call->StartCall(tag); });
  for (const grpc::ByteBuffer& message : messages) {
    if (!ok) break;
    ok = step([&](void* tag) { call->Write(message, tag); });
  }
  if (ok) ok = step([&](void* tag) { call->WritesDone(tag); });
  if (ok) (void)step([&](void* tag) { call->Read(&c.response, tag); });
  (void)step([&](void* tag) { call->Finish(&c.status, tag); });
  return Answer("LearnStream", Clock::now() - c.started, c.status, &c.response,
                reply);
}

bool LargeLearnClient::Step(const std::function<void(void*)>& start,
                            grpc::ClientContext* context,
                            std::chrono::system_clock::time_point deadline) {
  int tag_value = 0;
  start(&tag_value);
  void* tag = nullptr;
  bool ok = false;
  if (cq_.AsyncNext(&tag, &ok, deadline) != grpc::CompletionQueue::GOT_EVENT) {
    context->TryCancel();
    (void)cq_.Next(&tag, &ok);
    return false;
  }
  return ok;
}

absl::StatusOr<double> LargeLearnClient::Answer(const char* method,
                                                Clock::duration took,
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

}  // namespace aggregator::bench
