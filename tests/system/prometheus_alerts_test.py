"""config/monitoring/aggregator.rules.yml in a real Prometheus (Debian's, started
here on loopback; scrape and evaluation every second) scraping a live aggregatord
with one example learner: the learner is SIGKILLed and AggregatorLearnerNotReady is
seen pending, then firing through Prometheus' HTTP API within its `for:` (made 3 s in
the test's copy of the rules) plus two scrape intervals (a second more allowed for a loaded machine; 4.0-4.8 s
measured against the 5 s bound); the learner comes back on
its address and the alert resolves. Prints the timeline."""

import json
import os
import re
import signal
import socket
import subprocess
import time
import unittest
import urllib.parse
import urllib.request

import testutil

RULES = "config/monitoring/aggregator.rules.yml"
ALERT = "AggregatorLearnerNotReady"
FOR_SECONDS = 3
SCRAPE_SECONDS = 1
LOADED_SLACK_SECONDS = 1


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def get_json(url: str):
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.load(response)


class Prometheus:
    """Debian's prometheus with `rules` loaded, scraping `target` every second. Its
    port is picked free and released (Prometheus takes no port 0): a start that
    loses the port to another process is retried on another."""

    def __init__(self, directory: str, target: str, rules: str) -> None:
        config = os.path.join(directory, "prometheus.yml")
        with open(config, "w") as f:
            f.write(f"""
global:
  scrape_interval: {SCRAPE_SECONDS}s
  evaluation_interval: 1s
rule_files: [{rules}]
scrape_configs:
  - job_name: aggregator
    static_configs: [{{targets: ["{target}"]}}]
""")
        for attempt in range(5):
            port = free_port()
            self.url = f"http://127.0.0.1:{port}"
            self.log = open(os.path.join(directory, f"prometheus-{attempt}.log"), "w+")
            self.process = subprocess.Popen(
                ["prometheus", f"--config.file={config}",
                 f"--storage.tsdb.path={os.path.join(directory, f'data-{attempt}')}",
                 f"--web.listen-address=127.0.0.1:{port}"],
                stdout=self.log, stderr=subprocess.STDOUT)
            try:
                testutil.wait_until(self._ready, "Prometheus to be ready", timeout=20)
                return
            except AssertionError:
                self.log.seek(0)
                text = self.log.read()
                self.stop()
                if "address already in use" not in text:
                    raise AssertionError(f"prometheus did not start:\n{text}")
        raise AssertionError("prometheus lost its port 5 times")

    def _ready(self) -> bool:
        if self.process.poll() is not None:
            raise AssertionError("prometheus exited")
        try:
            with urllib.request.urlopen(self.url + "/-/ready", timeout=1) as response:
                return response.status == 200
        except OSError:
            return False

    def api(self, path: str, **params):
        query = ("?" + urllib.parse.urlencode(params)) if params else ""
        reply = get_json(f"{self.url}/api/v1/{path}{query}")
        assert reply["status"] == "success", reply
        return reply["data"]

    def alert_state(self, name: str, **labels) -> str:
        """"pending", "firing", or "" when the alert is not active."""
        for alert in self.api("alerts")["alerts"]:
            if alert["labels"].get("alertname") == name and all(
                    alert["labels"].get(k) == v for k, v in labels.items()):
                return alert["state"]
        return ""

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()


def start_learner(port: int) -> subprocess.Popen:
    return subprocess.Popen(["tools/examples/example_learner", "--listen",
                             f"127.0.0.1:{port}"])


class PrometheusAlertsTest(unittest.TestCase):
    def test_learner_alert_fires_and_resolves(self):
        directory = testutil.temp_dir()
        # The shipped rules with every `for:` made short: what is tested is the
        # rules' expressions and labels as Prometheus runs them.
        with open(RULES) as f:
            rules_text = re.sub(r"for: \d+[smh]", f"for: {FOR_SECONDS}s", f.read())
        rules = os.path.join(directory, "aggregator.rules.yml")
        with open(rules, "w") as f:
            f.write(rules_text)

        learner_port = free_port()
        learner = start_learner(learner_port)
        daemon = testutil.Daemon(f"""
listen: "127.0.0.1:0"
metrics: {{listen: "127.0.0.1:0"}}
admin: {{listen: "127.0.0.1:0"}}
connect: {{backoff: {{initial: 50ms, max: 200ms}}}}
learners:
  - {{id: learner-0, address: "127.0.0.1:{learner_port}"}}
""")
        prometheus = None
        try:
            line = daemon.wait_for_line("metrics on http://")
            target = line.split("metrics on http://", 1)[1].split("/")[0]
            prometheus = Prometheus(directory, target, rules)

            def learner_ready() -> bool:
                result = prometheus.api("query", query='aggregator_learner_ready{learner="learner-0"}')
                return bool(result["result"]) and result["result"][0]["value"][1] == "1"

            testutil.wait_until(learner_ready, "Prometheus to see learner-0 ready")
            self.assertEqual(prometheus.alert_state(ALERT), "")

            learner.send_signal(signal.SIGKILL)
            learner.wait()
            killed = time.monotonic()
            timeline = {"killed": 0.0}

            def reached(state: str):
                def check():
                    now = prometheus.alert_state(ALERT, learner="learner-0")
                    if now == "pending" and "pending" not in timeline:
                        timeline["pending"] = time.monotonic() - killed
                    return now == state
                return check

            testutil.wait_until(reached("firing"), f"{ALERT} to fire", timeout=30,
                                interval=0.05)
            timeline["firing"] = time.monotonic() - killed
            self.assertIn("pending", timeline, "never seen pending before firing")
            # The most it can take is `for:` + a scrape (to see the 0) + an
            # evaluation (to go pending), the 2 intervals; a second more is left
            # for a loaded machine (the scrape's and the API polls' own time).
            bound = FOR_SECONDS + 2 * SCRAPE_SECONDS
            self.assertLessEqual(timeline["firing"], bound + LOADED_SLACK_SECONDS,
                                 f"firing after {timeline['firing']:.2f}s > for + 2 scrapes")
            firing = [a for a in prometheus.api("alerts")["alerts"]
                      if a["labels"]["alertname"] == ALERT][0]
            self.assertEqual(firing["labels"]["severity"], "warning")
            self.assertIn("learner-0", firing["annotations"]["summary"])
            self.assertIn("aggregatorctl status", firing["annotations"]["description"])

            learner = start_learner(learner_port)
            back = time.monotonic()
            timeline["learner back"] = back - killed
            testutil.wait_until(lambda: prometheus.alert_state(ALERT) == "",
                                f"{ALERT} to resolve", timeout=30, interval=0.05)
            timeline["resolved"] = time.monotonic() - killed
            print("timeline (s after the kill): " + ", ".join(
                f"{event} {seconds:.2f}" for event, seconds in timeline.items()) +
                f"; for {FOR_SECONDS}s, scrape and evaluation every {SCRAPE_SECONDS}s,"
                f" firing bound {bound}s"
                f" ({'within' if timeline['firing'] <= bound else 'OVER, within the slack'})")
        finally:
            if prometheus is not None:
                prometheus.stop()
            learner.kill()
            learner.wait()
            self.assertEqual(daemon.stop(), 0)


if __name__ == "__main__":
    raise SystemExit(testutil.main())
