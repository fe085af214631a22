// learner_sources[].orchestrator against an HTTP server in the test that
// follows DI-orchestrator's replica API (GET /v1alpha1/replicas, POST
// /v1alpha1/replicas/failed), and that can also fail: HTTP 500, a body that is
// not JSON, "success": false, a reply that never comes.
#include "lib/discovery/orchestrator_source.h"

#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <fstream>
#include <future>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "lib/discovery/discovery_loop.h"
#include "proto/admin.grpc.pb.h"
#include "tests/testing/log_capture.h"
#include "tests/testing/test_cluster.h"

namespace aggregator::testing {
namespace {

namespace pb = aggregator::v1;
using nlohmann::json;
using std::chrono::seconds;

constexpr char kNamespace[] = "ns";
constexpr char kName[] = "agg-0";

// What the server does with a request.
enum class Reply {
  kOk,
  kHttp500,
  kGarbage,  // 200 with a body that is not JSON
  kRefused,  // 200 with "success": false
  kNoData,   // 200, "success": true, but no data.learners
  kHang,     // no reply until the mode changes (or 30 s)
  kRaw,      // 200 with the body of SetRawBody
};

class FakeOrchestrator {
 public:
  FakeOrchestrator() {
    server_.Get("/v1alpha1/replicas", [this](const httplib::Request& request,
                                             httplib::Response& response) {
      Serve(request, response, /*get=*/true);
    });
    server_.Post(
        "/v1alpha1/replicas/failed",
        [this](const httplib::Request& request, httplib::Response& response) {
          Serve(request, response, /*get=*/false);
        });
    port_ = server_.bind_to_any_port("127.0.0.1");
    REQUIRE(port_ > 0);
    thread_ = std::thread([this] { server_.listen_after_bind(); });
  }
  ~FakeOrchestrator() {
    SetReplies(Reply::kOk, Reply::kOk);  // releases hanging requests
    server_.stop();
    thread_.join();
  }

  std::string url() const {
    return "http://127.0.0.1:" + std::to_string(port_);
  }
  OrchestratorSourceConfig Config() const {
    OrchestratorSourceConfig config;
    config.url = url();
    config.pod_namespace = kNamespace;
    config.name = kName;
    config.refresh = milliseconds(100);
    config.timeout = milliseconds(500);
    config.report_failed_after = milliseconds(300);
    return config;
  }

  void SetLearners(std::vector<std::string> learners) {
    std::lock_guard<std::mutex> lock(mu_);
    learners_ = std::move(learners);
  }
  void SetRawBody(std::string body) {
    std::lock_guard<std::mutex> lock(mu_);
    raw_body_ = std::move(body);
  }
  void SetReplies(Reply get, Reply post) {
    std::lock_guard<std::mutex> lock(mu_);
    get_reply_ = get;
    post_reply_ = post;
    changed_.notify_all();
  }
  // The next POSTs get these replies, one each, before SetReplies' (no
  // kHang).
  void QueuePostReplies(std::vector<Reply> replies) {
    std::lock_guard<std::mutex> lock(mu_);
    post_queue_.insert(post_queue_.end(), replies.begin(), replies.end());
  }
  int gets() {
    std::lock_guard<std::mutex> lock(mu_);
    return gets_;
  }
  // The bodies of the failure reports, each as sent.
  std::vector<json> reports() {
    std::lock_guard<std::mutex> lock(mu_);
    return reports_;
  }

 private:
  void Serve(const httplib::Request& request, httplib::Response& response,
             bool get) {
    std::unique_lock<std::mutex> lock(mu_);
    Reply reply = get ? get_reply_ : post_reply_;
    if (!get && !post_queue_.empty()) {
      reply = post_queue_.front();
      post_queue_.pop_front();
    }
    if (get) {
      ++gets_;
      // The API's query: ?namespace=NS&aggregator=NAME.
      if (request.get_param_value("namespace") != kNamespace ||
          request.get_param_value("aggregator") != kName) {
        response.status = 400;
        response.set_content("bad query", "text/plain");
        return;
      }
    } else {
      reports_.push_back(json::parse(request.body, nullptr, false));
    }
    if (reply == Reply::kHang) {
      changed_.wait_for(lock, seconds(30), [&] {
        return (get ? get_reply_ : post_reply_) != Reply::kHang;
      });
      response.status = 503;
      return;
    }
    switch (reply) {
      case Reply::kHttp500:
        response.status = 500;
        response.set_content("internal error", "text/plain");
        return;
      case Reply::kGarbage:
        response.set_content("<html>\x01 not json", "text/html");
        return;
      case Reply::kRefused:
        response.set_content(json{{"success", false},
                                  {"code", 1},
                                  {"message", "no such job"},
                                  {"data", nullptr}}
                                 .dump(),
                             "application/json");
        return;
      case Reply::kRaw:
        response.set_content(raw_body_, "application/json");
        return;
      case Reply::kNoData:
        response.set_content(
            json{{"success", true}, {"code", 0}, {"message", ""}}.dump(),
            "application/json");
        return;
      default:
        break;
    }
    json data = {{"namespace", kNamespace},
                 {"coordinator", kName},
                 {"collectors", json::array()},
                 {"learners", get ? json(learners_) : json::array()}};
    response.set_content(
        json{{"success", true}, {"code", 0}, {"message", ""}, {"data", data}}
            .dump(),
        "application/json");
  }

  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable changed_;
  std::vector<std::string> learners_;
  Reply get_reply_ = Reply::kOk;
  Reply post_reply_ = Reply::kOk;
  std::deque<Reply> post_queue_;
  std::string raw_body_;
  int gets_ = 0;
  std::vector<json> reports_;
};

// The TCP sockets of this host on 127.0.0.1 (/proc/net/tcp), by state.
struct TcpSocket {
  int local_port;
  int remote_port;
  int state;         // 0x02 SYN_SENT, 0x0A LISTEN
  int64_t tx_queue;  // of a listener: its backlog
  int64_t rx_queue;  // of a listener: the connections it has not accepted
};
std::vector<TcpSocket> TcpSockets() {
  std::ifstream table("/proc/net/tcp");
  std::string line;
  std::getline(table, line);  // the header
  std::vector<TcpSocket> sockets;
  while (std::getline(table, line)) {
    std::istringstream fields(line);
    std::string slot, local, remote, state, queues;
    fields >> slot >> local >> remote >> state >> queues;
    auto port = [](const std::string& address) {
      return std::stoi(address.substr(address.find(':') + 1), nullptr, 16);
    };
    sockets.push_back(TcpSocket{
        port(local), port(remote), std::stoi(state, nullptr, 16),
        std::stoll(queues.substr(0, queues.find(':')), nullptr, 16),
        std::stoll(queues.substr(queues.find(':') + 1), nullptr, 16)});
  }
  return sockets;
}

// A listener on 127.0.0.1 that never accepts, its backlog full: the SYN of a
// connect to it is dropped, again and again, so the connect hangs until cut.
class FullListener {
 public:
  FullListener() : listener_(socket(AF_INET, SOCK_STREAM, 0)) {
    REQUIRE(listener_ >= 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(bind(listener_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) ==
            0);
    REQUIRE(listen(listener_, 0) == 0);
    socklen_t length = sizeof(addr);
    REQUIRE(getsockname(listener_, reinterpret_cast<sockaddr*>(&addr),
                        &length) == 0);
    port_ = ntohs(addr.sin_port);
    // Connections that complete but are never accepted, until the kernel
    // counts its accept queue as full (more queued than the backlog).
    while (!Full()) {
      REQUIRE(fillers_.size() < 16);
      const int filler = socket(AF_INET, SOCK_STREAM, 0);
      REQUIRE(filler >= 0);
      fillers_.push_back(filler);
      REQUIRE(connect(filler, reinterpret_cast<sockaddr*>(&addr),
                      sizeof(addr)) == 0);
    }
  }
  ~FullListener() {
    for (const int filler : fillers_) close(filler);
    close(listener_);
  }

  std::string url() const {
    return "http://127.0.0.1:" + std::to_string(port_);
  }
  // Connects to it in progress (SYN_SENT): hanging.
  int Connecting() const {
    int count = 0;
    for (const TcpSocket& socket : TcpSockets()) {
      count += socket.remote_port == port_ && socket.state == 0x02 ? 1 : 0;
    }
    return count;
  }

 private:
  bool Full() const {
    for (const TcpSocket& socket : TcpSockets()) {
      if (socket.local_port == port_ && socket.state == 0x0A) {
        return socket.rx_queue > socket.tx_queue;
      }
    }
    FAIL("the listener is not in /proc/net/tcp");
    return false;
  }

  const int listener_;
  int port_ = 0;
  std::vector<int> fillers_;
};

RequestLimits Within(milliseconds timeout,
                     const std::atomic<bool>* stop = nullptr) {
  return RequestLimits{Clock::now() + timeout, stop};
}

TEST_CASE(
    "OrchestratorSource follows DI-orchestrator's API, and names every "
    "kind of bad reply") {
  FakeOrchestrator orchestrator;
  orchestrator.SetLearners({"learner-0.ns:22300", "10.0.0.3:22301"});
  OrchestratorSource source(orchestrator.Config());
  auto learners = source.Fetch(Within(seconds(5)));
  INFO(learners.status().ToString());
  REQUIRE(learners.ok());
  REQUIRE(learners->size() == 2);
  CHECK((*learners)[0].ToString() == "learner-0.ns:22300");
  CHECK((*learners)[1].ToString() == "10.0.0.3:22301");
  // A host name is resolved (here from /etc/hosts), its addresses tried in
  // turn.
  OrchestratorSourceConfig named = orchestrator.Config();
  named.url = "http://localhost:" +
              orchestrator.url().substr(orchestrator.url().rfind(':') + 1);
  auto by_name = OrchestratorSource(named).Fetch(Within(seconds(5)));
  INFO(by_name.status().ToString());
  REQUIRE(by_name.ok());
  CHECK(*by_name == *learners);

  const std::string get = "GET " + orchestrator.url() +
                          "/v1alpha1/replicas?namespace=ns&aggregator=agg-0: ";
  struct Case {
    Reply reply;
    absl::StatusCode code;
    std::string message;
  };
  for (const Case& c : {
           Case{Reply::kHttp500, absl::StatusCode::kUnavailable,
                get + "HTTP 500: \"internal error\""},
           Case{Reply::kGarbage, absl::StatusCode::kDataLoss,
                get + "the reply is not JSON: \"<html>\\x01 not json\""},
           Case{Reply::kRefused, absl::StatusCode::kFailedPrecondition,
                get + "the orchestrator refused: code 1: no such job"},
           Case{Reply::kNoData, absl::StatusCode::kDataLoss,
                get + "the reply has no data.learners list: "
                      "\"{\\x22code\\x22:0,\\x22message\\x22:\\x22\\x22,"
                      "\\x22success\\x22:true}\""},
       }) {
    orchestrator.SetReplies(c.reply, Reply::kOk);
    auto failed = source.Fetch(Within(seconds(5)));
    CHECK(failed.status().code() == c.code);
    CHECK(failed.status().message() == c.message);
  }
  orchestrator.SetLearners({"learner-0.ns:22300", "no port"});
  orchestrator.SetReplies(Reply::kOk, Reply::kOk);
  CHECK_THAT(std::string(source.Fetch(Within(seconds(5))).status().message()),
             Catch::EndsWith("data.learners[1] \"\\x22no port\\x22\" is not "
                             "\"host:port\": missing \":port\""));

  // A reply that never comes: cut at the deadline; or at once on stop.
  orchestrator.SetReplies(Reply::kHang, Reply::kOk);
  auto start = Clock::now();
  auto hung = source.Fetch(Within(milliseconds(500)));
  CHECK(Seconds(Clock::now() - start) < 2.5);
  CHECK(hung.status().code() == absl::StatusCode::kDeadlineExceeded);
  CHECK_THAT(std::string(hung.status().message()),
             Catch::EndsWith("no complete reply within 500ms"));
  std::atomic<bool> stop{false};
  const int asked = orchestrator.gets();
  auto stopped = std::async(std::launch::async, [&] {
    return source.Fetch(Within(seconds(30), &stop));
  });
  // The server has the request, and holds it.
  REQUIRE(Eventually([&] { return orchestrator.gets() > asked; }));
  start = Clock::now();
  stop = true;
  CHECK(stopped.get().status().code() == absl::StatusCode::kCancelled);
  CHECK(Seconds(Clock::now() - start) < 2.0);
  orchestrator.SetReplies(Reply::kOk, Reply::kOk);

  // Nobody listening.
  OrchestratorSourceConfig gone = orchestrator.Config();
  gone.url = "http://127.0.0.1:" + std::to_string(ClosedPort());
  CHECK(OrchestratorSource(gone).Fetch(Within(seconds(5))).status().code() ==
        absl::StatusCode::kUnavailable);

  // A failure report names the pods, as DI-orchestrator deletes them by name.
  REQUIRE(source
              .ReportFailed({HostPort::Tcp("learner-0.ns", 22300),
                             HostPort::Tcp("learner-0.ns", 22301),
                             HostPort::Tcp("10.0.0.3", 22300)},
                            Within(seconds(5)))
              .ok());
  CHECK(orchestrator.reports() ==
        std::vector<json>{{{"namespace", "ns"},
                           {"coordinator", "agg-0"},
                           {"collectors", json::array()},
                           {"learners", {"learner-0", "10.0.0.3"}}}});
  orchestrator.SetReplies(Reply::kOk, Reply::kRefused);
  CHECK(source.ReportFailed({HostPort::Tcp("a.ns", 1)}, Within(seconds(5)))
            .message() == "POST " + orchestrator.url() +
                              "/v1alpha1/replicas/failed: the orchestrator "
                              "refused: code 1: no such job");
  CHECK(PodName(HostPort::Tcp("learner-3.training", 1), "training") ==
        "learner-3");
  CHECK(PodName(HostPort::Tcp("training", 1), "training") == "training");
}

// A JSON array nested `depth` deep.
std::string Nested(int depth) {
  return std::string(depth, '[') + std::string(depth, ']');
}

TEST_CASE(
    "A reply nested ~75,000 deep is refused while it is parsed, naming why, "
    "and the source keeps its learners (issue 26 item 1: SIGSEGV)") {
  FakeOrchestrator orchestrator;
  orchestrator.SetLearners({"learner-0.ns:22300"});
  DiscoveryLoop loop;
  loop.Apply({orchestrator.Config()});
  const std::vector<std::vector<HostPort>> members = {
      {HostPort::Tcp("learner-0.ns", 22300)}};
  REQUIRE(Eventually([&] { return loop.Members() == members; }));

  const std::string deep = Nested(75000);
  const std::string too_deep = "the reply nests deeper than 32 levels: ";
  // Deep where the learners are, in another data key, in a refusal's
  // message (dumped into the error), and in its code.
  for (const std::string& body : {
           R"({"success": true, "data": {"learners": )" + deep + "}}",
           R"({"success": true, "data": {"other": )" + deep +
               R"(, "learners": []}})",
           R"({"success": false, "code": 1, "message": )" + deep + "}",
           R"({"success": false, "code": )" + deep + "}",
       }) {
    orchestrator.SetRawBody(body);
    orchestrator.SetReplies(Reply::kRaw, Reply::kRaw);
    const int64_t errors = loop.Status().at(0).errors;
    REQUIRE(Eventually([&] { return loop.Status().at(0).errors > errors; }));
    CHECK_THAT(loop.Status().at(0).last_error, Catch::Contains(too_deep));
    CHECK(loop.Members() == members);  // kept
    OrchestratorSource source(orchestrator.Config());
    auto fetched = source.Fetch(Within(seconds(5)));
    CHECK(fetched.status().code() == absl::StatusCode::kDataLoss);
    CHECK_THAT(std::string(fetched.status().message()),
               Catch::Contains(too_deep));
    CHECK_THAT(
        std::string(
            source.ReportFailed({HostPort::Tcp("a.ns", 1)}, Within(seconds(5)))
                .message()),
        Catch::Contains(too_deep));
  }
  // 32 levels is the most taken: a refusal's message at depth 31 is named.
  auto shallow = ParseReplicasReply(
      200, R"({"success": false, "code": 1, "message": )" + Nested(31) + "}");
  CHECK(shallow.status().message() ==
        "the orchestrator refused: code 1: " + Nested(31));
  orchestrator.SetReplies(Reply::kOk, Reply::kOk);
  orchestrator.SetLearners({"learner-1.ns:22300"});
  REQUIRE(Eventually([&] {
    return loop.Members() == std::vector<std::vector<HostPort>>{
                                 {HostPort::Tcp("learner-1.ns", 22300)}};
  }));
}

TEST_CASE(
    "A request to a server that never accepts is cut at its timeout, or "
    "soon after a stop; a source whose refresh hangs so is removed or "
    "stopped at once") {
  FullListener server;
  FakeOrchestrator orchestrator;  // for its configuration
  OrchestratorSourceConfig config = orchestrator.Config();
  config.url = server.url();
  OrchestratorSource source(config);
  auto start = Clock::now();
  auto cut = source.Fetch(Within(milliseconds(500)));
  const double took = Seconds(Clock::now() - start);
  CHECK(cut.status().code() == absl::StatusCode::kDeadlineExceeded);
  CHECK_THAT(std::string(cut.status().message()),
             Catch::EndsWith("no complete reply within 500ms"));
  CHECK(took < 1.5);

  // A stop while it connects (cpp-httplib connects holding the lock its own
  // stop() takes: that waited for the connect's timeout, 30 s here).
  std::atomic<bool> stop{false};
  auto stopped = std::async(std::launch::async, [&] {
    return source.Fetch(Within(seconds(30), &stop));
  });
  REQUIRE(Eventually([&] { return server.Connecting() > 0; }));
  start = Clock::now();
  stop = true;
  CHECK(stopped.get().status().code() == absl::StatusCode::kCancelled);
  const double after_stop = Seconds(Clock::now() - start);
  CHECK(after_stop < 1.0);

  // The loop's thread joins that request when its source is removed (a
  // reload, under the server's reload lock) and at Stop() (SIGTERM).
  config.timeout = milliseconds(30000);
  DiscoveryLoop loop;
  loop.Apply({config});
  REQUIRE(Eventually([&] { return server.Connecting() > 0; }));
  start = Clock::now();
  loop.Apply({});
  const double removed = Seconds(Clock::now() - start);
  CHECK(removed < 1.0);
  REQUIRE(Eventually([&] { return server.Connecting() == 0; }));
  loop.Apply({config});
  REQUIRE(Eventually([&] { return server.Connecting() > 0; }));
  start = Clock::now();
  loop.Stop();
  const double stop_took = Seconds(Clock::now() - start);
  CHECK(stop_took < 1.0);
  std::printf(
      "HTTP to a server that never accepts: cut %.3f s after its start at a "
      "0.5 s timeout, %.0f ms after a stop; a source whose refresh hung so "
      "(timeout 30 s) was removed in %.0f ms, stopped in %.0f ms\n",
      took, after_stop * 1000, removed * 1000, stop_took * 1000);
}

double SourceMetric(AggregatorServer& server, const std::string& name) {
  for (const auto& family : server.metrics().collectable()->Collect()) {
    if (family.name != name) continue;
    for (const auto& metric : family.metric) {
      return family.type == prometheus::MetricType::Counter
                 ? metric.counter.value
                 : metric.gauge.value;
    }
  }
  return -1;
}

TEST_CASE(
    "Learners the orchestrator lists join; one it drops leaves once its "
    "call finishes; a failing orchestrator keeps the last learners") {
  CaptureSink& logs = CapturedLogs();
  // l1 holds its Learn until released (ExampleLearner::Stop), so the call is
  // in flight for as long as the test needs, and neither side cuts it.
  ExampleLearnerOptions held_learn;
  held_learn.delay = milliseconds(60000);
  held_learn.delay_on = "Learn";
  auto l0 = StartLearner();
  auto l1 = StartLearner(held_learn);
  auto l2 = StartLearner();
  FakeOrchestrator orchestrator;
  orchestrator.SetLearners({l0->address, l1->address, l2->address});
  AggregatorConfig config = FastConfig({}, 1);
  config.service.call_timeout = milliseconds(60000);
  config.learner_sources = {orchestrator.Config()};
  auto aggregator = StartAggregator(config);
  REQUIRE(Eventually([&] {
    return PoolIds(*aggregator) ==
           std::vector<std::string>{l0->address, l1->address, l2->address};
  }));
  auto stub = LearnerStub(aggregator->address());

  // l1 is dropped while a Learn is in flight to it: the call finishes, the
  // next plans are over l0 and l2 (the original crashed here).
  pb::DataDemand demand;
  REQUIRE(stub->GetData(Deadline().get(), {}, &demand).ok());
  auto learn = std::async(std::launch::async, [&] {
    pb::LearnRequest batch = Batch(static_cast<int>(demand.batch_size()), "a");
    batch.set_plan_id(demand.plan_id());
    pb::LearnReply reply;
    return stub->Learn(Deadline(milliseconds(60000)).get(), batch, &reply);
  });
  // Released however the test ends, before `learn` waits for the call.
  struct Release {
    ExampleLearner* learner;
    ~Release() { learner->Stop(); }
  } release{l1->learner.get()};
  REQUIRE(Eventually([&] { return l1->learner->calls() >= 2; }));
  orchestrator.SetLearners({l0->address, l2->address});
  REQUIRE(Eventually([&] {
    return PoolIds(*aggregator) ==
           std::vector<std::string>{l0->address, l2->address};
  }));
  // Out of the pool with its Learn still held: the call is drained, not cut.
  CHECK(learn.wait_for(milliseconds(0)) == std::future_status::timeout);
  l1->learner->Stop();
  const grpc::Status in_flight = learn.get();
  INFO(in_flight.error_message());
  CHECK(in_flight.ok());
  REQUIRE(stub->GetData(Deadline().get(), {}, &demand).ok());
  CHECK(demand.batch_size() == 64);

  // Every kind of failure, in one episode: the learners stay; logged once.
  const std::string failed_line = "learner source orchestrator " +
                                  orchestrator.url() +
                                  " ns/agg-0: refresh failed";
  const size_t logged = logs.Count(failed_line);
  for (Reply reply :
       {Reply::kHttp500, Reply::kGarbage, Reply::kRefused, Reply::kHang}) {
    const int64_t errors = aggregator->discovery().Status().at(0).errors;
    orchestrator.SetReplies(reply, Reply::kOk);
    REQUIRE(Eventually(
        [&] {
          return aggregator->discovery().Status().at(0).errors >= errors + 2;
        },
        milliseconds(10000)));
    CHECK(PoolIds(*aggregator) ==
          std::vector<std::string>{l0->address, l2->address});
  }
  CHECK(stub->GetData(Deadline().get(), {}, &demand).ok());
  // While it fails, status says why.
  auto admin = pb::AggregatorAdmin::NewStub(grpc::CreateChannel(
      aggregator->admin_address(), grpc::InsecureChannelCredentials()));
  pb::AggregatorStatus status;
  REQUIRE(admin->GetStatus(Deadline().get(), {}, &status).ok());
  REQUIRE(status.sources_size() == 1);
  CHECK(status.sources(0).kind() == "orchestrator");
  CHECK(status.sources(0).target() == orchestrator.url() + " ns/agg-0");
  CHECK(std::vector<std::string>(status.sources(0).members().begin(),
                                 status.sources(0).members().end()) ==
        std::vector<std::string>{l0->address, l2->address});
  CHECK_THAT(status.sources(0).last_error(),
             Catch::Contains("no complete reply within 500ms"));
  CHECK(status.sources(0).has_since_last_refresh());
  CHECK(status.sources(0).errors() >= 8);
  CHECK(logs.Count(failed_line) == logged + 1);  // the episode's first only
  // It fails every refresh meanwhile: the metric lies between two looks.
  const int64_t errors_before = aggregator->discovery().Status().at(0).errors;
  const double errors_metric =
      SourceMetric(*aggregator, "aggregator_source_errors_total");
  const int64_t errors_after = aggregator->discovery().Status().at(0).errors;
  CHECK(errors_before <= errors_metric);
  CHECK(errors_metric <= errors_after);

  // It answers again, with l1 back: appended after the others.
  orchestrator.SetLearners({l1->address, l0->address, l2->address});
  orchestrator.SetReplies(Reply::kOk, Reply::kOk);
  REQUIRE(Eventually(
      [&] {
        return PoolIds(*aggregator) ==
               std::vector<std::string>{l0->address, l2->address, l1->address};
      },
      milliseconds(10000)));
  CHECK(aggregator->discovery().Status().at(0).last_error.empty());
  CHECK(SourceMetric(*aggregator, "aggregator_source_learners") == 3);
}

TEST_CASE(
    "A learner that stays failed is reported to the orchestrator once per "
    "failure episode, and again after a failed report") {
  FakeOrchestrator orchestrator;
  const int port = ClosedPort();
  // (An IP address: Debian's c-ares 1.18 leaks a little on each lookup of
  // "localhost" that gRPC makes, which LeakSanitizer reports.)
  const std::string address = "127.0.0.1:" + std::to_string(port);
  auto good = StartLearner();
  orchestrator.SetLearners({good->address, address});
  // The first report fails (HTTP 500): it is sent again, after 100 ms.
  orchestrator.QueuePostReplies({Reply::kHttp500});
  AggregatorConfig config = FastConfig({}, 1);
  config.learner_sources = {orchestrator.Config()};
  auto aggregator = StartAggregator(config);

  const json expected = {{"namespace", "ns"},
                         {"coordinator", "agg-0"},
                         {"collectors", json::array()},
                         {"learners", {"127.0.0.1"}}};
  REQUIRE(Eventually([&] { return orchestrator.reports().size() == 2; },
                     milliseconds(10000)));
  // Accepted: no more reports while it stays failed.
  const int gets = orchestrator.gets();
  REQUIRE(Eventually([&] { return orchestrator.gets() >= gets + 10; },
                     milliseconds(10000)));
  CHECK(orchestrator.reports() == std::vector<json>{expected, expected});
  CHECK(StateOf(*aggregator, address) == LearnerState::kFailed);
  SourceSnapshot source = aggregator->discovery().Status().at(0);
  CHECK(source.reported == 1);
  CHECK(source.report_errors == 1);

  // It comes back (the orchestrator replaced it): the episode ends.
  auto replaced = StartLearner({}, "127.0.0.1:" + std::to_string(port));
  REQUIRE(Eventually(
      [&] { return StateOf(*aggregator, address) == LearnerState::kReady; },
      milliseconds(10000)));
  const int ready_gets = orchestrator.gets();
  REQUIRE(Eventually([&] { return orchestrator.gets() >= ready_gets + 2; }));
  // It fails again: a new episode, reported once more.
  replaced->Shutdown();
  REQUIRE(Eventually([&] { return orchestrator.reports().size() == 3; },
                     milliseconds(10000)));
  const int later = orchestrator.gets();
  REQUIRE(Eventually([&] { return orchestrator.gets() >= later + 10; },
                     milliseconds(10000)));
  CHECK(orchestrator.reports().size() == 3);
  CHECK(orchestrator.reports().back() == expected);
  CHECK(aggregator->discovery().Status().at(0).reported == 2);
  CHECK(SourceMetric(*aggregator, "aggregator_source_failed_reports_total") ==
        2);
}

}  // namespace
}  // namespace aggregator::testing
