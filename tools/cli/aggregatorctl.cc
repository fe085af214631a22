// aggregatorctl: the coordinator side of the Learner API, and the operator side
// of AggregatorAdmin, on the command line. Talks to an aggregator or a single
// learner.
//
//   aggregatorctl [--target ADDR] [--admin ADDR] [--timeout SECONDS]
//                 [--tls-ca FILE [--tls-cert FILE --tls-key FILE]
//                  [--tls-server-name NAME]] COMMAND
//     resource | start [--task-info FILE.json] | demand | close
//     learn --samples N --bytes B [--plan-id ID]
//     run --steps K [--bytes B]      GetData -> Learn K times, with a summary
//       (learn and run send a batch over --stream-threshold bytes by
//        LearnStream, in messages of --stream-message-bytes)
//     status                         learners, workers and learner sources
//                                    (AggregatorAdmin)
//     health [--service NAME] [--live]  exit 0 when SERVING (--live: when it
//                                    answers at all), 1 otherwise (probes)
//     reload                         re-read the configuration file
// A failed call prints its error, then each learner an aggregator says failed
// it: "failed learner ID (ADDRESS): CODE: message".
// status and reload go to --admin (the daemon's admin.listen; default:
// --target's host at 22274, the default admin.listen), the others to
// --target (its listen). With any --tls-* both are called over TLS.
#include <google/protobuf/util/json_util.h>
#include <grpcpp/grpcpp.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "lib/learners/failed_learners.h"
#include "proto/admin.grpc.pb.h"
#include "proto/learner.grpc.pb.h"
#include "tests/testing/synthetic_batch.h"
#include "tools/cli/learn_client.h"

namespace {

namespace pb = aggregator::v1;
using Clock = std::chrono::steady_clock;
using aggregator::LearnBatch;
using aggregator::SyntheticBatch;

struct Options {
  std::string target = "127.0.0.1:22272";  // config/aggregator.yaml's listen
  std::string admin = "127.0.0.1:22274";   // and its admin.listen
  std::string tls_ca;
  std::string tls_cert;
  std::string tls_key;
  std::string tls_server_name;
  double timeout_seconds = 60;
  std::string task_info_file;
  int64_t samples = 0;
  int64_t bytes = 64;
  std::string plan_id;
  int64_t steps = 10;
  std::string health_service;
  bool health_live = false;
  aggregator::LearnOptions learn;
};

std::unique_ptr<grpc::ClientContext> Context(const Options& options) {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() +
                        std::chrono::microseconds(static_cast<int64_t>(
                            options.timeout_seconds * 1e6)));
  return context;
}

std::string Json(const google::protobuf::Message& message) {
  std::string out;
  google::protobuf::util::JsonPrintOptions print;
  print.add_whitespace = true;
  print.always_print_primitive_fields = true;
  (void)google::protobuf::util::MessageToJsonString(message, &out, print);
  return out;
}

std::string CodeName(int code) {
  return absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
}

// The error line, then one line per learner the error details say failed
// (an aggregator attaches them: proto/learner.proto, FailedLearners).
int Fail(const char* what, const grpc::Status& status) {
  std::fprintf(stderr, "aggregatorctl: %s failed: %s: %s\n", what,
               CodeName(status.error_code()).c_str(),
               status.error_message().c_str());
  const pb::FailedLearners failed = aggregator::ReadFailedLearners(status);
  for (const pb::FailedLearner& learner : failed.learners()) {
    std::fprintf(stderr, "failed learner %s (%s): %s: %s\n",
                 learner.id().c_str(), learner.address().c_str(),
                 CodeName(learner.code()).c_str(), learner.message().c_str());
  }
  return 1;
}

int Run(pb::Learner::Stub& stub, const Options& options) {
  std::vector<double> latencies;
  int64_t samples = 0;
  const auto started = Clock::now();
  for (int64_t step = 0; step < options.steps; ++step) {
    pb::DataDemand demand;
    grpc::Status status = stub.GetData(Context(options).get(), {}, &demand);
    if (!status.ok()) return Fail("GetData", status);
    pb::LearnRequest batch =
        SyntheticBatch(demand.batch_size(), options.bytes,
                       "step" + std::to_string(step) + "-");
    batch.set_plan_id(demand.plan_id());
    pb::LearnReply reply;
    const auto learn_started = Clock::now();
    bool streamed = false;
    status = LearnBatch(
        stub, [&] { return Context(options); }, batch, options.learn, &reply,
        &streamed);
    if (!status.ok()) return Fail(streamed ? "LearnStream" : "Learn", status);
    latencies.push_back(
        std::chrono::duration<double, std::milli>(Clock::now() - learn_started)
            .count());
    samples += demand.batch_size();
    const int width = 30;
    const int done = static_cast<int>(width * (step + 1) / options.steps);
    std::fprintf(stderr, "\r[%s%s] %lld/%lld steps",
                 std::string(done, '#').c_str(),
                 std::string(width - done, ' ').c_str(),
                 static_cast<long long>(step + 1),
                 static_cast<long long>(options.steps));
  }
  std::fprintf(stderr, "\n");
  const double seconds =
      std::chrono::duration<double>(Clock::now() - started).count();
  std::sort(latencies.begin(), latencies.end());
  const double p50 = latencies.empty() ? 0 : latencies[latencies.size() / 2];
  std::printf(
      "steps %lld  samples %lld  time %.3f s  %.0f samples/s  %.1f MB/s  "
      "learn p50 %.3f ms\n",
      static_cast<long long>(options.steps), static_cast<long long>(samples),
      seconds, samples / seconds,
      static_cast<double>(samples) * static_cast<double>(options.bytes) / 1e6 /
          seconds,
      p50);
  return 0;
}

// "running" for WORKER_STATE_RUNNING, "ready" for LEARNER_STATE_READY.
std::string StateName(std::string name) {
  name = name.substr(name.rfind('_') + 1);
  for (char& c : name) c = static_cast<char>(std::tolower(c));
  return name;
}

int Status(const std::shared_ptr<grpc::Channel>& channel,
           const Options& options) {
  auto admin = pb::AggregatorAdmin::NewStub(channel);
  pb::AggregatorStatus status;
  grpc::Status rpc = admin->GetStatus(Context(options).get(), {}, &status);
  if (!rpc.ok()) return Fail("GetStatus", rpc);
  std::printf("aggregatord %s  %s  config %s (generation %lld)  up %llds\n",
              status.version().c_str(), status.ready() ? "ready" : "NOT READY",
              status.config_path().c_str(),
              static_cast<long long>(status.config_generation()),
              static_cast<long long>(status.uptime().seconds()));
  // LEARN ms: the median and 99th percentile of its last 256 Learns.
  // PLANS: its standing (in, out, rejoining); FLAGS: what is noticed of it
  // (straggler; late:Nms while late, straggler.late_after), "-" for nothing.
  std::printf("%-16s %-24s %-11s %8s %8s %15s %-10s %-10s  %s\n", "LEARNER",
              "ADDRESS", "STATE", "CALLS", "FAILURES", "LEARN ms p50/p99",
              "PLANS", "FLAGS", "LAST ERROR");
  for (const auto& learner : status.learners()) {
    // "out: why" goes in front of the last error: it is why it is out.
    const std::string& standing = learner.standing();
    const size_t colon = standing.find(':');
    const std::string plans = standing.substr(0, colon);
    std::vector<std::string> noticed;
    if (learner.straggler()) noticed.push_back("straggler");
    if (learner.late_ms() > 0) {
      noticed.push_back(absl::StrCat("late:", learner.late_ms(), "ms"));
    }
    const std::string flags =
        noticed.empty() ? "-" : absl::StrJoin(noticed, ",");
    std::string detail = learner.last_error();
    if (colon != std::string::npos) {
      detail =
          standing.substr(colon + 2) + (detail.empty() ? "" : "; ") + detail;
    }
    const std::string times = absl::StrFormat(
        "%.1f/%.1f", learner.learn_p50_ms(), learner.learn_p99_ms());
    std::printf("%-16s %-24s %-11s %8lld %8lld %15s %-10s %-10s  %s\n",
                learner.id().c_str(), learner.address().c_str(),
                StateName(pb::LearnerState_Name(learner.state())).c_str(),
                static_cast<long long>(learner.calls()),
                static_cast<long long>(learner.failures()), times.c_str(),
                plans.empty() ? "in" : plans.c_str(), flags.c_str(),
                detail.c_str());
  }
  if (status.workers_size() > 0) {
    std::printf("\n%-16s %5s %8s %-10s %8s  %s\n", "WORKER", "INDEX", "PID",
                "STATE", "RESTARTS", "LAST ERROR");
    for (const auto& worker : status.workers()) {
      std::printf("%-16s %5d %8d %-10s %8d  %s\n", worker.name().c_str(),
                  worker.index(), worker.pid(),
                  StateName(pb::WorkerState_Name(worker.state())).c_str(),
                  worker.restarts(), worker.last_error().c_str());
    }
  }
  if (status.sources_size() > 0) {
    // REFRESHED: how long ago its last successful refresh ended; ERRORS:
    // failed refreshes of all; REPORTED: learners reported failed to it.
    std::printf("\n%-12s %-44s %8s %10s %11s %8s  %s\n", "SOURCE", "TARGET",
                "LEARNERS", "REFRESHED", "ERRORS", "REPORTED", "LAST ERROR");
    for (const auto& source : status.sources()) {
      const std::string refreshed =
          source.has_since_last_refresh()
              ? absl::StrFormat("%.1fs ago",
                                source.since_last_refresh().seconds() +
                                    source.since_last_refresh().nanos() / 1e9)
              : "never";
      const std::string errors =
          absl::StrFormat("%d/%d", source.errors(), source.refreshes());
      std::printf("%-12s %-44s %8d %10s %11s %8lld  %s\n",
                  source.kind().c_str(), source.target().c_str(),
                  source.members_size(), refreshed.c_str(), errors.c_str(),
                  static_cast<long long>(source.reported_failed()),
                  source.last_error().c_str());
      if (source.members_size() > 0) {
        std::vector<std::string> members(source.members().begin(),
                                         source.members().end());
        std::printf("%-12s learners: %s\n", "",
                    absl::StrJoin(members, ", ").c_str());
      }
    }
  }
  return 0;
}

int Health(const std::shared_ptr<grpc::Channel>& channel,
           const Options& options) {
  auto health = grpc::health::v1::Health::NewStub(channel);
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(options.health_service);
  grpc::health::v1::HealthCheckResponse response;
  grpc::Status rpc = health->Check(Context(options).get(), request, &response);
  if (!rpc.ok()) return Fail("health check", rpc);
  std::printf("%s\n", grpc::health::v1::HealthCheckResponse::ServingStatus_Name(
                          response.status())
                          .c_str());
  return options.health_live ||
                 response.status() ==
                     grpc::health::v1::HealthCheckResponse::SERVING
             ? 0
             : 1;
}

// The whole of a small file (a PEM file), or an error naming it.
bool ReadSmallFile(const std::string& path, std::string* out) {
  std::ifstream file(path, std::ios::binary);
  std::stringstream text;
  text << file.rdbuf();
  if (!file) {
    std::fprintf(stderr, "aggregatorctl: cannot read %s\n", path.c_str());
    return false;
  }
  *out = text.str();
  return true;
}

// Plaintext, or TLS from the --tls-* files; null when one cannot be read.
std::shared_ptr<grpc::ChannelCredentials> Credentials(const Options& options) {
  if (options.tls_ca.empty() && options.tls_cert.empty() &&
      options.tls_server_name.empty()) {
    return grpc::InsecureChannelCredentials();
  }
  grpc::SslCredentialsOptions tls;
  if ((!options.tls_ca.empty() &&
       !ReadSmallFile(options.tls_ca, &tls.pem_root_certs)) ||
      (!options.tls_cert.empty() &&
       (!ReadSmallFile(options.tls_cert, &tls.pem_cert_chain) ||
        !ReadSmallFile(options.tls_key, &tls.pem_private_key)))) {
    return nullptr;
  }
  return grpc::SslCredentials(tls);
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  CLI::App app{
      "aggregatorctl: call an aggregator (or a learner) as a coordinator"};
  app.require_subcommand(1);
  app.add_option("-t,--target", options.target, "address of the aggregator")
      ->envname("AGGREGATOR_TARGET");
  auto* admin = app.add_option("--admin", options.admin,
                               "address of the aggregator's admin listener "
                               "(status, reload; default: --target's host "
                               "at port 22274)")
                    ->envname("AGGREGATOR_ADMIN");
  app.add_option("--tls-ca", options.tls_ca,
                 "CA certificates (PEM) to verify the aggregator "
                 "with: calls go over TLS");
  auto* tls_cert = app.add_option("--tls-cert", options.tls_cert,
                                  "our client certificate (PEM), for mTLS");
  auto* tls_key = app.add_option("--tls-key", options.tls_key,
                                 "the private key of --tls-cert (PEM)");
  tls_cert->needs(tls_key);
  tls_key->needs(tls_cert);
  app.add_option("--tls-server-name", options.tls_server_name,
                 "the name the aggregator's certificate must carry (default: "
                 "the address's host)");
  app.add_option("--timeout", options.timeout_seconds,
                 "deadline of each call, in seconds")
      ->check(CLI::PositiveNumber);
  auto* resource = app.add_subcommand("resource", "GetResource");
  auto* start = app.add_subcommand("start", "StartTask");
  start
      ->add_option("--task-info", options.task_info_file,
                   "JSON object sent as task_info")
      ->check(CLI::ExistingFile);
  auto* demand = app.add_subcommand("demand", "GetData");
  auto* learn = app.add_subcommand("learn", "Learn on a synthetic batch");
  learn->add_option("--samples", options.samples, "number of samples")
      ->required()
      ->check(CLI::NonNegativeNumber);
  learn->add_option("--bytes", options.bytes, "bytes of data per sample")
      ->check(CLI::NonNegativeNumber);
  learn->add_option("--plan-id", options.plan_id,
                    "the plan_id from `demand` (default: the latest)");
  auto* close = app.add_subcommand("close", "CloseTask");
  auto* run = app.add_subcommand("run", "GetData then Learn, --steps times");
  run->add_option("--steps", options.steps, "training steps")
      ->check(CLI::PositiveNumber);
  run->add_option("--bytes", options.bytes, "bytes of data per sample")
      ->check(CLI::NonNegativeNumber);
  for (CLI::App* sends : {learn, run}) {
    sends
        ->add_option("--stream-threshold", options.learn.stream_threshold_bytes,
                     "a batch of more bytes goes by LearnStream, so an "
                     "aggregator passes each learner its slice as it arrives")
        ->capture_default_str()
        ->check(CLI::NonNegativeNumber);
    sends
        ->add_option("--stream-message-bytes",
                     options.learn.stream_message_bytes,
                     "samples per LearnStream message, in bytes")
        ->capture_default_str()
        ->check(CLI::PositiveNumber);
  }
  auto* status =
      app.add_subcommand("status", "learners, workers and learner sources");
  auto* reload = app.add_subcommand(
      "reload", "re-read the aggregator's configuration file");
  auto* health = app.add_subcommand(
      "health", "exit 0 when the aggregator is SERVING, 1 otherwise");
  health->add_option("--service", options.health_service,
                     "a service name, e.g. aggregator.v1.Learner (default: "
                     "the whole server)");
  health->add_flag("--live", options.health_live,
                   "exit 0 when the aggregator answers at all, SERVING or not "
                   "(a liveness probe: not serving for want of learners is "
                   "no reason to restart it)");
  CLI11_PARSE(app, argc, argv);
  // Status and reload go to the daemon --target names, never to another one
  // that happens to hold the default admin port.
  if (admin->count() == 0) {
    const size_t colon = options.target.rfind(':');
    if (options.target.rfind("unix:", 0) == 0 || colon == std::string::npos) {
      if (status->parsed() || reload->parsed()) {
        std::fprintf(stderr,
                     "aggregatorctl: --target %s: pass --admin ADDR (the "
                     "daemon's admin.listen) for status and reload\n",
                     options.target.c_str());
        return 2;
      }
    } else {
      options.admin = options.target.substr(0, colon) + ":22274";
    }
  }

  const std::shared_ptr<grpc::ChannelCredentials> credentials =
      Credentials(options);
  if (credentials == nullptr) return 2;
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  if (!options.tls_server_name.empty()) {
    args.SetSslTargetNameOverride(options.tls_server_name);
  }
  auto channel = grpc::CreateCustomChannel(options.target, credentials, args);
  auto stub = pb::Learner::NewStub(channel);
  auto admin_channel = [&] {
    return grpc::CreateCustomChannel(options.admin, credentials, args);
  };

  if (resource->parsed()) {
    pb::Resource reply;
    grpc::Status s = stub->GetResource(Context(options).get(), {}, &reply);
    if (!s.ok()) return Fail("GetResource", s);
    std::printf("%s\n", Json(reply).c_str());
  } else if (start->parsed()) {
    pb::StartTaskRequest request;
    if (!options.task_info_file.empty()) {
      std::ifstream file(options.task_info_file);
      std::stringstream text;
      text << file.rdbuf();
      auto parsed = google::protobuf::util::JsonStringToMessage(
          text.str(), request.mutable_task_info());
      if (!parsed.ok()) {
        std::fprintf(stderr, "aggregatorctl: %s: not a JSON object: %s\n",
                     options.task_info_file.c_str(),
                     std::string(parsed.message()).c_str());
        return 2;
      }
    }
    pb::StartTaskReply reply;
    grpc::Status s = stub->StartTask(Context(options).get(), request, &reply);
    if (!s.ok()) return Fail("StartTask", s);
    std::printf("%s\n", Json(reply).c_str());
  } else if (demand->parsed()) {
    pb::DataDemand reply;
    grpc::Status s = stub->GetData(Context(options).get(), {}, &reply);
    if (!s.ok()) return Fail("GetData", s);
    std::printf("%s\n", Json(reply).c_str());
  } else if (learn->parsed()) {
    pb::LearnRequest request =
        SyntheticBatch(options.samples, options.bytes, "ctl-");
    request.set_plan_id(options.plan_id);
    pb::LearnReply reply;
    bool streamed = false;
    grpc::Status s = LearnBatch(
        *stub, [&] { return Context(options); }, request, options.learn, &reply,
        &streamed);
    if (!s.ok()) return Fail(streamed ? "LearnStream" : "Learn", s);
    std::printf("%s\n", Json(reply).c_str());
  } else if (close->parsed()) {
    pb::CloseTaskReply reply;
    grpc::Status s = stub->CloseTask(Context(options).get(), {}, &reply);
    if (!s.ok()) return Fail("CloseTask", s);
    std::printf("%s\n", Json(reply).c_str());
  } else if (run->parsed()) {
    return Run(*stub, options);
  } else if (status->parsed()) {
    return Status(admin_channel(), options);
  } else if (health->parsed()) {
    return Health(channel, options);
  } else if (reload->parsed()) {
    auto admin = pb::AggregatorAdmin::NewStub(admin_channel());
    pb::ReloadReply reply;
    grpc::Status s = admin->Reload(Context(options).get(), {}, &reply);
    if (!s.ok()) return Fail("Reload", s);
    std::printf("configuration generation %lld: %s\n",
                static_cast<long long>(reply.config_generation()),
                reply.summary().c_str());
  }
  return 0;
}
