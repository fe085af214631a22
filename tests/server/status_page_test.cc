// The status page's HTML: every learner, worker and source with its state,
// and text from peers (ids, addresses, error texts) escaped, never markup.
#include "lib/server/status_page.h"

#include <catch2/catch.hpp>

using namespace aggregator;

namespace {

const char kPayload[] =
    "<script>document.title='pwned'</script>"
    "<img src=x onerror=\"document.title='pwned'\">";

ServerStatus HostileStatus() {
  ServerStatus status;
  LearnerSnapshot good;
  good.id = "learner-0";
  good.address = HostPort::Tcp("127.0.0.1", 22300);
  good.state = LearnerState::kReady;
  good.calls = 12;
  LearnerSnapshot bad;
  bad.id = "evil\"><b>x</b>";
  bad.address = HostPort::Tcp("127.0.0.1", 22301);
  bad.state = LearnerState::kFailed;
  bad.last_error = kPayload;
  status.learners = {good, bad};
  status.plans["learner-0"].straggler = true;
  status.plans["learner-0"].learn_p50_ms = 1.5;
  status.plans[bad.id].standing = std::string("out: ") + kPayload;
  WorkerSnapshot worker;
  worker.name = "learner";
  worker.pid = 4242;
  worker.state = WorkerState::kRunning;
  worker.restarts = 3;
  worker.last_error = kPayload;
  status.workers = {worker};
  SourceSnapshot source;
  source.kind = "dns";
  source.target = "learners.test.:22300";
  source.last_error = kPayload;
  status.sources = {source};
  status.config_path = "/etc/aggregator/<aggregator>.yaml";
  status.config_generation = 7;
  return status;
}

}  // namespace

TEST_CASE("HtmlEscape escapes what could open markup or leave an attribute") {
  CHECK(HtmlEscape("<a href=\"x\" title='y'>&</a>") ==
        "&lt;a href=&quot;x&quot; title=&#39;y&#39;&gt;&amp;&lt;/a&gt;");
  CHECK(HtmlEscape("learner-0 127.0.0.1:22300") == "learner-0 127.0.0.1:22300");
}

TEST_CASE("The status page shows everything, escaped, with no script") {
  StatusPageFacts facts;
  facts.version = "0.1.0";
  facts.aggregator_id = "host/abcd";
  facts.uptime = std::chrono::seconds(3725);
  facts.membership_generation = 4;
  facts.min_learners = 2;
  const std::string html = RenderStatusPage(HostileStatus(), facts);
  CHECK_THAT(html, Catch::Contains("http-equiv=\"refresh\""));
  CHECK_THAT(html, Catch::Contains("1h 2m"));
  CHECK_THAT(html, Catch::Contains("<td>7</td>"));  // config generation
  CHECK_THAT(html, Catch::Contains("<td>4</td>"));  // membership generation
  CHECK_THAT(html, Catch::Contains("1 of 2 (min_learners 2)"));
  CHECK_THAT(html, Catch::Contains("/etc/aggregator/&lt;aggregator&gt;.yaml"));
  CHECK_THAT(html, Catch::Contains("<td class=\"id\">learner-0</td>"));
  CHECK_THAT(html, Catch::Contains("<td class=\"state ready\">ready</td>"));
  CHECK_THAT(html, Catch::Contains("<td class=\"id\">evil&quot;&gt;&lt;b&gt;"
                                   "x&lt;/b&gt;</td>"));
  CHECK_THAT(html, Catch::Contains("<td class=\"state failed\">failed</td>"));
  CHECK_THAT(html, Catch::Contains("1.5 ms"));
  CHECK_THAT(html, Catch::Contains("<td>4242</td>"));
  CHECK_THAT(html, Catch::Contains("learners.test.:22300"));
  CHECK_THAT(html, Catch::Contains("&lt;script&gt;document.title=&#39;pwned"));
  // No markup from the payload: no script, img or b element, no handler.
  CHECK_THAT(html, !Catch::Contains("<script"));
  CHECK_THAT(html, !Catch::Contains("<img"));
  CHECK_THAT(html, !Catch::Contains("<b>"));
  CHECK_THAT(html, !Catch::Contains("onerror=\""));
  // Nothing fetched from elsewhere.
  CHECK_THAT(html, !Catch::Contains("<link"));
  CHECK_THAT(html, !Catch::Contains("http://"));
  CHECK_THAT(html, !Catch::Contains("https://"));
}
