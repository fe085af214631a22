#!/usr/bin/env bash
# config/monitoring: the alerting rules pass `promtool check rules` and their unit
# tests (`promtool test rules`); the Grafana dashboard is importable (a datasource
# input and variable, every panel on it, no hard-coded instance) and each of its
# expressions is valid PromQL (checked by promtool as recording rules).
set -euo pipefail
dir=config/monitoring
promtool check rules "$dir/aggregator.rules.yml"
promtool test rules "$dir/aggregator.test.yml"
work="${TEST_TMPDIR:-$(mktemp -d)}"
/usr/bin/python3 - "$dir/aggregator-dashboard.json" "$work/dashboard.rules.yml" <<'PY'
import json, re, sys
import yaml
dashboard = json.load(open(sys.argv[1]))
problems = []
inputs = [i["name"] for i in dashboard.get("__inputs", []) if i.get("type") == "datasource"]
if not inputs:
    problems.append("no datasource in __inputs")
variables = {v["name"]: v for v in dashboard["templating"]["list"]}
if variables.get("datasource", {}).get("type") != "datasource":
    problems.append("no datasource template variable")
expressions = []
for panel in dashboard["panels"]:
    if panel["type"] == "row":
        continue
    if panel.get("datasource", {}).get("uid") != "${datasource}":
        problems.append(f"panel {panel['title']!r} is not on ${{datasource}}")
    for target in panel["targets"]:
        expr = target["expr"]
        expressions.append(expr)
        if target.get("datasource", {}).get("uid") != "${datasource}":
            problems.append(f"a query of {panel['title']!r} is not on ${{datasource}}")
        if 'instance=~"$instance"' not in expr:
            problems.append(f"{panel['title']!r}: {expr} is not filtered by $instance")
text = json.dumps(dashboard)
for hard in re.findall(r'instance=~?\\"[^$\\][^\\]*\\"', text):
    problems.append(f"hard-coded instance: {hard}")
for problem in problems:
    print("dashboard:", problem)
# Grafana's own variables stand for what a query would get.
concrete = [e.replace("$__rate_interval", "5m").replace("$job", ".*").replace("$instance", ".*")
            for e in expressions]
rules = {"groups": [{"name": "dashboard", "rules": [
    {"record": f"dashboard:expr{i}", "expr": e} for i, e in enumerate(concrete)]}]}
yaml.safe_dump(rules, open(sys.argv[2], "w"))
print(f"dashboard: {len(expressions)} expressions in {len(dashboard['panels'])} panels")
sys.exit(1 if problems else 0)
PY
promtool check rules "$work/dashboard.rules.yml"
echo "monitoring config OK"
