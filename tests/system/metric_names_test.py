"""Every metric name that config/monitoring's alerting rules and Grafana dashboard use
is served by a live aggregatord (two example learners as workers, a DNS learner
source, a few training steps): a renamed metric fails this test, not an operator's
alert or dashboard. Histogram series count as served by their family
(X_bucket, X_sum, X_count)."""

import json
import re
import subprocess
import unittest
import urllib.request

import testutil
import yaml

RULES = "config/monitoring/aggregator.rules.yml"
DASHBOARD = "config/monitoring/aggregator-dashboard.json"
PROMQL_WORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and",
                "or", "unless", "bool", "offset", "inf", "nan"}


def metric_names(expr: str) -> set:
    """The metric names a PromQL expression selects (not its functions, label names,
    strings, ranges or keywords)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'', '""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)       # label matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)       # ranges (and $__rate_interval)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)",
                  " ", text)                       # label lists
    names = set()
    for match in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", text):
        before = text[:match.start()]
        after = text[match.end():]
        if before and (before[-1].isdigit() or before[-1] in ".$"):
            continue  # 1e3, $variable
        if re.match(r"\s*\(", after) or match.group(0).lower() in PROMQL_WORDS:
            continue  # a function or aggregation, a keyword
        names.add(match.group(0))
    return names


def used_names() -> dict:
    """Metric name -> where it is used."""
    used = {}
    with open(RULES) as f:
        for group in yaml.safe_load(f)["groups"]:
            for rule in group["rules"]:
                for name in metric_names(rule["expr"]):
                    used.setdefault(name, []).append(f"rule {rule['alert']}")
    with open(DASHBOARD) as f:
        dashboard = json.load(f)
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            for name in metric_names(target["expr"]):
                used.setdefault(name, []).append(f"panel {panel['title']!r}")
    for variable in dashboard["templating"]["list"]:
        query = variable.get("definition", "")
        for selector in re.findall(r"label_values\(([^,]+),", query):
            for name in metric_names(selector):
                used.setdefault(name, []).append(f"variable ${variable['name']}")
    return used


def served_names(body: str) -> set:
    served = set()
    for line in body.splitlines():
        match = re.match(r"# TYPE (\S+) histogram", line)
        if match:
            served |= {match.group(1) + suffix for suffix in ("_bucket", "_sum", "_count")}
        elif line and not line.startswith("#"):
            served.add(re.match(r"[^{\s]+", line).group(0))
    return served


def config(port_base: int, dead_port: int) -> str:
    return f"""
listen: "127.0.0.1:0"
min_learners: 2
metrics: {{listen: "127.0.0.1:0"}}
admin: {{listen: "127.0.0.1:0"}}
connect: {{backoff: {{initial: 50ms, max: 500ms}}}}
learner_sources:
  - dns: {{name: learners.test., port: 22300, refresh: 100ms,
           nameserver: "127.0.0.1:{dead_port}", timeout: 200ms}}
workers:
  - name: learner
    command: [tools/examples/example_learner, --listen, "127.0.0.1:{{port}}"]
    replicas: 2
    port_base: {port_base}
    learner: true
"""


class MetricNamesTest(unittest.TestCase):
    def test_parser(self):
        self.assertEqual(
            metric_names('histogram_quantile(0.99, sum by (rpc, le) (rate('
                         'a_seconds_bucket{job=~"$job",x="y z"}[$__rate_interval])))'
                         ' / on (instance) group_left b_total > 1e3 and c offset 5m'),
            {"a_seconds_bucket", "b_total", "c"})

    def test_every_metric_used_is_served(self):
        used = used_names()
        self.assertGreater(len(used), 15, used)
        ports = testutil.free_port_run(3)
        daemon = testutil.Daemon(config(ports, ports + 2))
        try:
            line = daemon.wait_for_line("metrics on http://")
            url = line.split("metrics on ", 1)[1].split()[0]
            testutil.wait_until(
                lambda: "2 of 2 learner(s) ready" in "\n".join(
                    l for l in daemon.lines if l), "two ready learners")
            subprocess.run(["tools/cli/aggregatorctl", "--target", daemon.address,
                            "--admin", daemon.admin_address, "run", "--steps", "3"],
                           check=True, timeout=testutil.LONG_WAIT)
            missing = {}

            def all_served():
                with urllib.request.urlopen(url, timeout=5) as response:
                    served = served_names(response.read().decode())
                missing.clear()
                missing.update({n: w for n, w in used.items() if n not in served})
                return not missing

            try:
                testutil.wait_until(all_served, "every metric used to be served",
                                    timeout=10)
            except AssertionError:
                self.fail("used by config/monitoring but not served: " +
                          "; ".join(f"{n} ({', '.join(w)})" for n, w in missing.items()))
            print(f"{len(used)} metric names used, all served: {', '.join(sorted(used))}")
        finally:
            self.assertEqual(daemon.stop(), 0)


if __name__ == "__main__":
    raise SystemExit(testutil.main())
