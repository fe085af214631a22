"""config/examples/kubernetes: valid Kubernetes objects (checked against the API's
schema as Debian's python3-kubernetes models carry it: every field known, of its
type, the required ones present), wired together as the examples rely on (Services
select the pods they mean, the dns sources name those Services and ports, the
ConfigMaps are mounted where the image reads them), every embedded aggregator.yaml
passes `aggregatord --check`, and the probes' commands do what they say on a running
aggregatord."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import unittest
from typing import Dict, List

import yaml
from kubernetes import client

import testutil

EXAMPLES = "config/examples/kubernetes"
AGGREGATORD = "daemon/aggregatord"
AGGREGATORCTL = "tools/cli/aggregatorctl"
MODELS = {
    ("v1", "Namespace"): "V1Namespace",
    ("v1", "Service"): "V1Service",
    ("v1", "ConfigMap"): "V1ConfigMap",
    ("apps/v1", "Deployment"): "V1Deployment",
}
DNS_1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def load(name: str) -> List[dict]:
    with open(os.path.join(EXAMPLES, name)) as f:
        return [doc for doc in yaml.safe_load_all(f) if doc is not None]


def differences(written, read_back, path: str = "") -> List[str]:
    """Where `read_back` (the object as the model kept it) lost or changed what was
    written: a field the schema does not have, or a value of another type."""
    if isinstance(written, dict):
        if not isinstance(read_back, dict):
            return [f"{path}: not a map in the schema"]
        out = []
        for key, value in written.items():
            if key not in read_back:
                out.append(f"{path}.{key}: not a field of the schema")
            else:
                out += differences(value, read_back[key], f"{path}.{key}")
        return out
    if isinstance(written, list):
        if not isinstance(read_back, list) or len(read_back) != len(written):
            return [f"{path}: not a list in the schema"]
        out = []
        for i, (a, b) in enumerate(zip(written, read_back)):
            out += differences(a, b, f"{path}[{i}]")
        return out
    if type(written) is not type(read_back) or written != read_back:
        return [f"{path}: {written!r} was read as {read_back!r}"]
    return []


def schema_problems(doc: dict) -> List[str]:
    """The model of the object's kind, built from it and serialized back; each field
    lost or changed on the way is a problem, and so is a missing required field
    (the model refuses it)."""
    where = f"{doc.get('kind')} {doc.get('metadata', {}).get('name')}"
    model = MODELS.get((doc.get("apiVersion"), doc.get("kind")))
    if model is None:
        return [f"{where}: no model for {doc.get('apiVersion')} {doc.get('kind')}"]
    api = client.ApiClient()
    try:
        obj = api._ApiClient__deserialize(doc, model)
    except (ValueError, TypeError) as e:
        return [f"{where}: {e}"]
    return [f"{where}{p}" for p in differences(doc, api.sanitize_for_serialization(obj))]


def by_kind(docs: List[dict], kind: str) -> Dict[str, dict]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def selects(selector: Dict[str, str], labels: Dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def pod_labels(deployment: dict) -> Dict[str, str]:
    return deployment["spec"]["template"]["metadata"]["labels"]


def container(deployment: dict) -> dict:
    containers = deployment["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1, deployment["metadata"]["name"]
    return containers[0]


def embedded_config(deployment: dict, config_maps: Dict[str, dict]) -> str:
    """The aggregator.yaml a Deployment's container reads: its ConfigMap volume,
    mounted at /etc/aggregator, with the key that lands at aggregator.yaml."""
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    mounts = [m for m in container(deployment)["volumeMounts"]
              if m["mountPath"] == "/etc/aggregator"]
    assert len(mounts) == 1, f"{deployment['metadata']['name']}: no mount at /etc/aggregator"
    source = volumes[mounts[0]["name"]]["configMap"]
    data = config_maps[source["name"]]["data"]
    key = "aggregator.yaml"
    for item in source.get("items", []):
        if item["path"] == "aggregator.yaml":
            key = item["key"]
    assert key in data, f"ConfigMap {source['name']} has no key {key}"
    return data[key]


def check_config(text: str) -> subprocess.CompletedProcess:
    directory = testutil.temp_dir()
    path = os.path.join(directory, "aggregator.yaml")
    with open(path, "w") as f:
        f.write(text)
    return subprocess.run([AGGREGATORD, "--check", "--config", path],
                          capture_output=True, text=True, timeout=30)


def dns_source(config: dict) -> dict:
    sources = config["learner_sources"]
    assert len(sources) == 1 and "dns" in sources[0], sources
    return sources[0]["dns"]


def headless_service_for(name: str, services: Dict[str, dict]) -> dict:
    """The Service a dns source's name resolves: <service>.<namespace>.svc.cluster.local.

    The name is written in full with the final '.', so the pod's search domains
    (ndots: 5) are not tried first, one lookup each."""
    match = re.fullmatch(r"([a-z0-9-]+)\.([a-z0-9-]+)\.svc\.cluster\.local\.", name)
    assert match, f"{name} is not a Service's full cluster DNS name ending with '.'"
    service = services[match.group(1)]
    assert service["metadata"]["namespace"] == match.group(2)
    assert service["spec"]["clusterIP"] == "None", f"{match.group(1)} is not headless"
    return service


class KubernetesExamplesTest(unittest.TestCase):
    def setUp(self) -> None:
        self.files = {name: load(name) for name in sorted(os.listdir(EXAMPLES))}
        self.all = [d for docs in self.files.values() for d in docs]
        self.services = by_kind(self.all, "Service")
        self.deployments = by_kind(self.all, "Deployment")
        self.config_maps = by_kind(self.all, "ConfigMap")

    def test_every_object_fits_the_schema(self) -> None:
        self.assertEqual(
            sorted(self.files),
            ["aggregator.yaml", "learners.yaml", "namespace.yaml", "tree.yaml"])
        problems = []
        for doc in self.all:
            problems += schema_problems(doc)
            name = doc["metadata"]["name"]
            if not DNS_1123_LABEL.match(name):
                problems.append(f"{doc['kind']} {name}: not a DNS-1123 label")
            if doc["kind"] != "Namespace" and doc["metadata"].get("namespace") != "training":
                problems.append(f"{doc['kind']} {name}: not in namespace training")
        self.assertEqual(problems, [])
        # The check itself catches what it should: a misspelt field, a value of the
        # wrong type, a required field missing.
        deployment = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: x}
spec:
  %s: 1
  selector: {matchLabels: {a: b}}
  template:
    metadata: {labels: {a: b}}
    spec: {containers: [{name: c, image: i, ports: [{containerPort: %s}]}]}
"""
        self.assertEqual(schema_problems(yaml.safe_load(deployment % ("replicas", "1"))), [])
        found = schema_problems(yaml.safe_load(deployment % ("replica", "1")))
        self.assertEqual(found, ["Deployment x.spec.replica: not a field of the schema"])
        found = schema_problems(yaml.safe_load(deployment % ("replicas", "x")))
        self.assertTrue(found and "invalid literal for int()" in found[0], found)
        found = schema_problems(yaml.safe_load("""
apiVersion: v1
kind: Service
metadata: {name: x}
spec: {ports: [{name: p}]}
"""))
        self.assertTrue(found and "`port`, must not be `None`" in found[0], found)

    def test_services_select_the_pods_they_mean(self) -> None:
        for name, deployment in self.deployments.items():
            self.assertTrue(
                selects(deployment["spec"]["selector"]["matchLabels"], pod_labels(deployment)),
                name)
        for name, service in self.services.items():
            chosen = [d for d in self.deployments.values()
                      if selects(service["spec"]["selector"], pod_labels(d))]
            self.assertTrue(chosen, f"Service {name} selects no pods")
            for port in service["spec"]["ports"]:
                for d in chosen:
                    ports = [p["containerPort"] for p in container(d)["ports"]]
                    self.assertIn(port["targetPort"], ports, f"{name} -> {d['metadata']['name']}")
        # The learners' headless Service, and each tree level's, pick only their own.
        self.assertEqual(
            [d for d in self.deployments if selects(self.services["learners"]["spec"]["selector"],
                                                    pod_labels(self.deployments[d]))],
            ["learners"])
        self.assertEqual(
            sorted(d for d in self.deployments
                   if selects(self.services["children"]["spec"]["selector"],
                              pod_labels(self.deployments[d]))),
            ["child-a", "child-b"])
        for group in ("a", "b"):
            self.assertEqual(
                [d for d in self.deployments
                 if selects(self.services[f"learners-{group}"]["spec"]["selector"],
                            pod_labels(self.deployments[d]))],
                [f"learners-{group}"])

    def test_learners_listen_where_their_service_points(self) -> None:
        for name in ("learners", "learners-a", "learners-b"):
            command = container(self.deployments[name])["command"]
            listen = command[command.index("--listen") + 1]
            port = self.services[name]["spec"]["ports"][0]["port"]
            self.assertEqual(listen, f"0.0.0.0:{port}")

    def test_every_embedded_configuration_is_valid_and_names_its_learners(self) -> None:
        checked = []
        for name, deployment in self.deployments.items():
            if container(deployment).get("command"):  # a learner
                continue
            text = embedded_config(deployment, self.config_maps)
            result = check_config(text)
            self.assertEqual(result.returncode, 0, f"{name}: {result.stdout}{result.stderr}")
            self.assertIn("OK", result.stdout + result.stderr)
            config = yaml.safe_load(text)
            source = dns_source(config)
            service = headless_service_for(source["name"], self.services)
            self.assertEqual(source["port"], service["spec"]["ports"][0]["port"], name)
            # Serves where its Services and probes expect it.
            listen_port = int(config["listen"].rsplit(":", 1)[1])
            self.assertIn(listen_port, [p["containerPort"] for p in container(deployment)["ports"]])
            self.assertEqual(config["admin"]["listen"], "127.0.0.1:22274")
            self.assertEqual(config["workers"], [])
            # SIGTERM drains for drain_timeout before the kubelet's SIGKILL.
            drain = int(config["drain_timeout"].rstrip("s"))
            grace = deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
            self.assertGreater(grace, drain, name)
            checked.append(name)
        self.assertEqual(sorted(checked), ["aggregator", "child-a", "child-b", "parent"])
        # A broken file fails the same check.
        self.assertNotEqual(check_config("learner_sources: [{dns: {port: 1}}]\n").returncode, 0)

    def test_the_image_reads_the_mounted_configuration(self) -> None:
        with open("config/Dockerfile") as f:
            entrypoint = re.search(r"^ENTRYPOINT (.*)$", f.read(), re.M).group(1)
        self.assertIn('"--config", "/etc/aggregator/aggregator.yaml"', entrypoint)
        for name, deployment in self.deployments.items():
            self.assertEqual(container(deployment)["image"], "learner-aggregator:latest")

    def test_probes_tell_ready_from_alive_on_a_running_aggregator(self) -> None:
        probes = {}
        for name, deployment in self.deployments.items():
            c = container(deployment)
            if "readinessProbe" in c and "exec" in c["readinessProbe"]:
                probes[name] = (c["readinessProbe"]["exec"]["command"],
                                c["livenessProbe"]["exec"]["command"])
        self.assertEqual(sorted(probes), ["aggregator", "child-a", "child-b", "parent"])
        readiness, liveness = probes["aggregator"]
        self.assertEqual(readiness[0], "aggregatorctl")
        self.assertEqual(readiness[-1], "health")
        self.assertEqual(liveness[-2:], ["health", "--live"])
        for name, pair in probes.items():
            self.assertEqual(pair, probes["aggregator"], name)

        # The aggregator's own configuration, on loopback: its DNS server is a closed
        # loopback port, so it finds no learner (the test sends nothing off-host).
        config = yaml.safe_load(embedded_config(self.deployments["aggregator"],
                                                self.config_maps))
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.bind(("127.0.0.1", 0))
            closed = probe.getsockname()[1]
        config["learner_sources"][0]["dns"]["nameserver"] = f"127.0.0.1:{closed}"
        config["listen"] = "127.0.0.1:0"
        config["admin"]["listen"] = "127.0.0.1:0"
        config["metrics"]["listen"] = ""
        daemon = testutil.Daemon(yaml.safe_dump(config))
        try:
            def run(command: List[str]) -> int:
                argv = [AGGREGATORCTL, "--target", daemon.address] + command[1:]
                return subprocess.run(argv, capture_output=True, text=True,
                                      timeout=30).returncode
            # No learner: not ready (out of the Service), but alive (not restarted).
            self.assertEqual(run(readiness), 1)
            self.assertEqual(run(liveness), 0)
        finally:
            self.assertEqual(daemon.stop(), 0)
        # Gone: neither.
        self.assertEqual(subprocess.run(
            [AGGREGATORCTL, "--target", daemon.address] + liveness[1:],
            capture_output=True, timeout=30).returncode, 1)


if __name__ == "__main__":
    sys.exit(testutil.main())
