"""The status page (GET / on the metrics listener) in a real browser: Debian's
chromium, headless, loads it from a live aggregatord with two example learners as
workers and a hostile learner whose GetResource fails with a <script>/<img onerror>
payload. The rendered DOM shows every learner and its state and the payload as text;
no script ran (the title is the page's, no element was added) and no element came
from the payload. A screenshot is written to the test's outputs
(config/monitoring/status-page.png is one)."""

import html.parser
import os
import subprocess
import unittest
import urllib.request
from concurrent import futures

import grpc
import testutil

MARK = "pwned"
PAYLOAD = (f"<script>document.title='{MARK}';document.body.appendChild("
           f"document.createElement('marquee'))</script>"
           f"<img src=x onerror=\"document.title='{MARK}';document.body.appendChild("
           f"document.createElement('marquee'))\">")


def hostile_learner(port: int) -> grpc.Server:
    """A learner whose every call fails with PAYLOAD as its message."""
    def fail(request, context):
        context.abort(grpc.StatusCode.INTERNAL, PAYLOAD)

    handlers = {name: grpc.unary_unary_rpc_method_handler(fail)
                for name in ("GetResource", "StartTask", "GetData", "Learn", "CloseTask")}
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("aggregator.v1.Learner", handlers),))
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    return server


class Dom(html.parser.HTMLParser):
    """What the browser's DOM holds: elements by tag, the title, the learner rows
    (cell texts)."""

    def __init__(self) -> None:
        super().__init__()
        self.tags = {}
        self.title = ""
        self.rows = []
        self._in_title = False
        self._row = None
        self._cell = None

    def handle_starttag(self, tag, attrs):
        self.tags[tag] = self.tags.get(tag, 0) + 1
        attrs = dict(attrs)
        if tag == "title":
            self._in_title = True
        elif tag == "tr" and attrs.get("class") == "learner":
            self._row = []
        elif tag == "td" and self._row is not None:
            self._cell = ""

    def handle_endtag(self, tag):
        if tag == "title":
            self._in_title = False
        elif tag == "td" and self._row is not None and self._cell is not None:
            self._row.append(self._cell)
            self._cell = None
        elif tag == "tr" and self._row is not None:
            self.rows.append(self._row)
            self._row = None

    def handle_data(self, data):
        if self._in_title:
            self.title += data
        if self._cell is not None:
            self._cell += data


def chromium(*args: str) -> str:
    profile = testutil.temp_dir()
    result = subprocess.run(
        ["chromium", "--headless", "--no-sandbox", "--disable-gpu",
         "--no-first-run", f"--user-data-dir={profile}", *args],
        capture_output=True, text=True, timeout=60)
    if result.returncode != 0:
        raise AssertionError(f"chromium {args} exited {result.returncode}:\n{result.stderr}")
    return result.stdout


class StatusPageTest(unittest.TestCase):
    def test_page_in_a_browser(self):
        ports = testutil.free_port_run(3)
        hostile = hostile_learner(ports + 2)
        daemon = testutil.Daemon(f"""
listen: "127.0.0.1:0"
metrics: {{listen: "127.0.0.1:0"}}
admin: {{listen: "127.0.0.1:0"}}
connect: {{backoff: {{initial: 50ms, max: 500ms}}}}
learners:
  - {{id: hostile, address: "127.0.0.1:{ports + 2}"}}
workers:
  - name: learner
    command: [tools/examples/example_learner, --listen, "127.0.0.1:{{port}}"]
    replicas: 2
    port_base: {ports}
    learner: true
""")
        try:
            line = daemon.wait_for_line("status page on http://")
            url = line.split("status page on ", 1)[1].split()[0]

            def page_settled():
                with urllib.request.urlopen(url, timeout=5) as response:
                    text = response.read().decode()
                return (text.count("state ready") == 2 and MARK in text) and text

            served = testutil.wait_until(page_settled,
                                         "two ready learners and the hostile one's error")

            # A virtual-time budget lets timers, image errors and the like run
            # (under the page's 5 s refresh).
            dom_text = chromium("--virtual-time-budget=3000", "--dump-dom", url)
            dom = Dom()
            dom.feed(dom_text)
            learners = {row[0]: row[2] for row in dom.rows}
            print("learners in the rendered DOM:", learners)
            self.assertEqual(learners.get("learner-0"), "ready")
            self.assertEqual(learners.get("learner-1"), "ready")
            self.assertIn(learners.get("hostile"), ("connecting", "failed"))
            print("DOM checks: title", repr(dom.title), "; elements",
                  {t: dom.tags.get(t, 0) for t in ("script", "img", "marquee", "tr")})
            self.assertEqual(dom.title, "aggregatord status", "a script changed the title")
            for tag in ("script", "img", "marquee"):
                self.assertNotIn(tag, dom.tags, f"a <{tag}> element is in the DOM")
            hostile_row = [row for row in dom.rows if row[0] == "hostile"][0]
            self.assertIn(PAYLOAD, hostile_row[-1], "the payload is shown as text")
            for table in ("daemon", "learners", "workers", "sources"):
                self.assertIn(f'id="{table}"', dom_text)
            self.assertNotIn("<script", served)

            outputs = os.environ.get("TEST_UNDECLARED_OUTPUTS_DIR") or testutil.temp_dir()
            shot = os.path.join(outputs, "status-page.png")
            chromium("--hide-scrollbars", "--window-size=1280,760",
                     f"--screenshot={shot}", url)
            with open(shot, "rb") as f:
                self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
            print(f"screenshot: {shot} ({os.path.getsize(shot)} bytes)")
        finally:
            hostile.stop(0)
            self.assertEqual(daemon.stop(), 0)


if __name__ == "__main__":
    raise SystemExit(testutil.main())
