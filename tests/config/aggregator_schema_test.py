"""config/aggregator.schema.json: a valid draft-7 schema that accepts
config/aggregator.yaml, the example configurations and the ones inside the
Kubernetes ConfigMaps; flags a misspelt key at any depth; and lists, section
by section, exactly the keys the loader's readers accept (as printed by
config_keys_main from the C++ side)."""

import copy
import glob
import json
import os
import subprocess
import sys
import unittest

import jsonschema
import yaml

import testutil

SCHEMA = "config/aggregator.schema.json"
KEYS_TOOL = "tests/config/config_keys_main"


def load_schema():
    with open(SCHEMA, encoding="utf-8") as f:
        return json.load(f)


def example_configs():
    """(name, parsed document) of every aggregator configuration shipped."""
    configs = []
    for path in ["config/aggregator.yaml"] + sorted(glob.glob("config/examples/*.yaml")):
        with open(path, encoding="utf-8") as f:
            configs.append((path, yaml.safe_load(f)))
    # The ConfigMaps' *.yaml entries are aggregator configurations.
    for path in sorted(glob.glob("config/examples/kubernetes/*.yaml")):
        with open(path, encoding="utf-8") as f:
            for document in yaml.safe_load_all(f):
                if not document or document.get("kind") != "ConfigMap":
                    continue
                for key, text in (document.get("data") or {}).items():
                    if key.endswith(".yaml"):
                        configs.append((f"{path}: ConfigMap {document['metadata']['name']}"
                                        f" {key}", yaml.safe_load(text)))
    return configs


def schema_key_tables(node, path="", tables=None):
    """{path: set of keys} of every closed object in the schema, with the loader's
    path spelling ("" the top, "connect.backoff", "workers[]")."""
    if tables is None:
        tables = {}
    if not isinstance(node, dict):
        return tables
    if "properties" in node:
        tables.setdefault(path, set()).update(node["properties"])
        for key, child in node["properties"].items():
            schema_key_tables(child, f"{path}.{key}" if path else key, tables)
    if isinstance(node.get("items"), dict):
        schema_key_tables(node["items"], f"{path}[]", tables)
    for choice in node.get("anyOf", []) + node.get("oneOf", []):
        schema_key_tables(choice, path, tables)
    return tables


def closed_objects(node, path=""):
    """Paths of objects with properties whose additionalProperties is not false."""
    open_ones = []
    if isinstance(node, dict):
        if "properties" in node and node.get("additionalProperties") is not False:
            open_ones.append(path or "<top>")
        for key, child in node.get("properties", {}).items():
            open_ones += closed_objects(child, f"{path}.{key}" if path else key)
        if isinstance(node.get("items"), dict):
            open_ones += closed_objects(node["items"], f"{path}[]")
    return open_ones


class AggregatorSchemaTest(unittest.TestCase):

    def setUp(self):
        self.schema = load_schema()
        self.validator = jsonschema.Draft7Validator(self.schema)

    def test_schema_is_valid_draft7_and_closed(self):
        jsonschema.Draft7Validator.check_schema(self.schema)
        self.assertEqual(closed_objects(self.schema), [],
                         "objects without additionalProperties: false")

    def test_every_shipped_configuration_validates(self):
        configs = example_configs()
        names = [name for name, _ in configs]
        self.assertIn("config/aggregator.yaml", names)
        self.assertTrue(any("ConfigMap aggregator-config" in n for n in names), names)
        for name, config in configs:
            with self.subTest(config=name):
                errors = [f"{'.'.join(map(str, e.absolute_path))}: {e.message}"
                          for e in self.validator.iter_errors(config)]
                self.assertEqual(errors, [])
                print(f"valid: {name}", flush=True)

    def test_shipped_files_point_editors_at_the_schema(self):
        for path in ["config/aggregator.yaml"] + sorted(glob.glob("config/examples/*.yaml")):
            with open(path, encoding="utf-8") as f:
                first = f.readline().rstrip("\n")
            target = os.path.relpath(SCHEMA, os.path.dirname(path))
            self.assertEqual(first, f"# yaml-language-server: $schema={target}", path)

    def test_misspelt_keys_are_flagged(self):
        with open("config/aggregator.yaml", encoding="utf-8") as f:
            base = yaml.safe_load(f)
        cases = {
            "min_learner": lambda c: c.update(min_learner=1),
            "connect.backof": lambda c: c["connect"].update(backof={}),
            "connect.keepalive.tme": lambda c: c["connect"]["keepalive"].update(tme="1s"),
            "workers[0].replica": lambda c: c["workers"][0].update(replica=2),
            "learners[0].adress": lambda c: c.update(learners=[{"id": "a", "address": "h:1",
                                                               "adress": "h:2"}]),
            "learner_sources[0].dns.nme": lambda c: c.update(
                learner_sources=[{"dns": {"name": "x.", "port": 1, "nme": "y"}}]),
            "log.levle": lambda c: c["log"].update(levle="info"),
        }
        for where, misspell in cases.items():
            with self.subTest(key=where):
                config = copy.deepcopy(base)
                misspell(config)
                errors = list(self.validator.iter_errors(config))
                self.assertTrue(any("Additional properties are not allowed" in e.message
                                    for e in errors), [e.message for e in errors])
                print(f"flagged: {where}", flush=True)

    def test_schema_and_loader_agree_on_the_keys(self):
        loader = json.loads(subprocess.run([KEYS_TOOL], check=True, capture_output=True,
                                           text=True).stdout)
        loader = {path: set(keys) for path, keys in loader.items()}
        schema = schema_key_tables(self.schema)
        problems = []
        for path in sorted(set(loader) | set(schema)):
            only_loader = loader.get(path, set()) - schema.get(path, set())
            only_schema = schema.get(path, set()) - loader.get(path, set())
            if path not in schema:
                problems.append(f"section {path!r}: in the loader, not in the schema")
            elif path not in loader:
                problems.append(f"section {path!r}: in the schema, not in the loader")
            if only_loader:
                problems.append(f"{path!r}: keys only the loader knows: {sorted(only_loader)}")
            if only_schema:
                problems.append(f"{path!r}: keys only the schema knows: {sorted(only_schema)}")
        self.assertEqual(problems, [])
        print(f"keys agree: {len(loader)} sections, "
              f"{sum(len(k) for k in loader.values())} keys", flush=True)


if __name__ == "__main__":
    sys.exit(testutil.main())
