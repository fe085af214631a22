"""Fault injection on the elastic CartPole (config/examples/cartpole_dqn_elastic.yaml:
three DQN replicas under on_learner_failure: shrink): what a hung or a killed replica
costs the training loop.

    fault_run.py --stop-every 20 --duration 240     # one replica SIGSTOPped every 20 s
    fault_run.py --kill-every 12 --duration 180     # one replica SIGKILLed every 12 s
    fault_run.py --schedule stop@0,stop@6,cont@12,kill@16 --duration 24   # any sequence
    fault_run.py --train --stop-every 45 --kill-every 30 --plot faults.png

It starts aggregatord (bazel-bin/daemon/aggregatord, or --aggregatord) on the example
config with free ports, waits for the three replicas, and drives them: by default a
coordinator stepping GetData + Learn as fast as it can on random CartPole transitions;
with --train the real DQN coordinator (coordinator.py --elastic) until it reaches its
target. Faults start after --warmup-steps steps and --warmup seconds. At each fault a
replica that an earlier SIGSTOP froze is SIGCONTed (after the new fault's signal, so it
comes back while another is hung); a SIGSTOP takes the next replica in turn, a SIGKILL
the next one in the group that is not the one just continued. Signals go to the
worker's process group, as a frozen or lost host would take the whole learner.

Per fault it reports, from the coordinator's steps (a step: GetData, then Learn):
  next Learn   fault -> the end of the first successful Learn of a step begun after it
  lost         failed steps in between (the one in flight at the fault too)
  whole        fault -> the first successful Learn over all three replicas
  rejoin plan  the SIGCONT -> the first GetData whose plan has the continued replica
  rejoin Learn the SIGCONT -> the first successful Learn with it
then each column's median. --json writes everything (the CI test reads it).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Dict, List, Optional

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", "..", "..", ".."))  # repository or runfiles
sys.path.insert(0, HERE)
from dqn import encode_transition  # noqa: E402
from learner_aggregator import AggregatorClient, AggregatorError, Sample  # noqa: E402

CONFIG = "config/examples/cartpole_dqn_elastic.yaml"
REPLICAS = 3


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--stop-every", type=float, default=0, help="seconds between SIGSTOPs")
    p.add_argument("--kill-every", type=float, default=0, help="seconds between SIGKILLs")
    p.add_argument("--kill-first", type=float, default=None,
                   help="seconds after the warm-up of the first SIGKILL (default: --kill-every)"
                   " when SIGSTOPs run too, else 0")
    p.add_argument("--schedule", help="instead: KIND@SECONDS,... (KIND stop, kill or cont: "
                   "only SIGCONT the stopped replica; seconds after the warm-up)")
    p.add_argument("--duration", type=float, default=120.0,
                   help="seconds of faults (--train: until the coordinator ends)")
    p.add_argument("--warmup-steps", type=int, default=300,
                   help="successful steps over the three replicas before the first fault")
    p.add_argument("--warmup", type=float, default=2.0,
                   help="then seconds of steps before the first fault")
    p.add_argument("--train", action="store_true",
                   help="run coordinator.py --elastic (DQN to --target-return) instead of "
                   "the stepping loop")
    p.add_argument("--seed", type=int, default=0, help="--train: the coordinator's seed")
    p.add_argument("--max-env-steps", type=int, default=100_000, help="--train")
    p.add_argument("--plot", help="--train: PNG of return against env steps and seconds, "
                   "faults marked")
    p.add_argument("--replot", metavar="REPORT", help="only draw --plot again from the --json "
                   "REPORT of a --train run")
    p.add_argument("--aggregatord", help="default: bazel-bin/daemon/aggregatord, else "
                   "daemon/aggregatord (runfiles)")
    p.add_argument("--config-edit", action="append", default=[], metavar="REGEX=TEXT",
                   help="also replace REGEX by TEXT in the config (once), e.g. "
                   "'late_after: auto=late_after: off' after --config-append")
    p.add_argument("--config-append", action="append", default=[], metavar="YAML",
                   help="append these lines to the config, e.g. 'straggler: {late_after: off}'")
    p.add_argument("--dir", help="where the config, the daemon's log and the task files go "
                   "(default: a new temporary directory)")
    p.add_argument("--json", help="write the steps, faults and figures here")
    p.add_argument("--quiet", action="store_true", help="no line per fault while running")
    return p.parse_args(argv)


def schedule_of(args: argparse.Namespace) -> List[tuple]:
    """[(seconds after the warm-up, "stop" | "kill")], in time order."""
    if args.schedule:
        events = []
        for item in args.schedule.split(","):
            kind, _, at = item.strip().partition("@")
            if kind not in ("stop", "kill", "cont") or not at:
                raise SystemExit(f"fault_run: --schedule item {item!r} is not stop@S, kill@S "
                                 f"or cont@S")
            events.append((float(at), kind))
        return sorted(events)
    events = []
    if args.stop_every > 0:
        events += [(t, "stop") for t in np.arange(0, args.duration, args.stop_every)]
    if args.kill_every > 0:
        first = args.kill_first if args.kill_first is not None else (
            args.kill_every if args.stop_every > 0 else 0.0)
        events += [(t, "kill") for t in np.arange(first, args.duration, args.kill_every)]
    if not events and not args.train:
        raise SystemExit("fault_run: no faults: give --stop-every, --kill-every or --schedule")
    return sorted((float(t), kind) for t, kind in events)


def free_port_run(count: int) -> int:
    """A port p with p .. p+count-1 free on loopback now."""
    for _ in range(100):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            base = probe.getsockname()[1]
        if base + count > 65535:
            continue
        held = []
        try:
            for port in range(base, base + count):
                s = socket.socket()
                held.append(s)
                s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for s in held:
                s.close()
    raise SystemExit("fault_run: no 3 consecutive free loopback ports")


def config_text(args: argparse.Namespace) -> str:
    with open(os.path.join(ROOT, CONFIG)) as f:
        text = f.read()
    edits = [(r'listen: "127\.0\.0\.1:22280"', 'listen: "127.0.0.1:0"'),
             (r'listen: "127\.0\.0\.1:22284"', 'listen: "127.0.0.1:0"'),
             (r"port_base: 22320", f"port_base: {free_port_run(REPLICAS)}")]
    edits += [tuple(edit.split("=", 1)) for edit in args.config_edit]
    for pattern, new in edits:
        text, count = re.subn(pattern, new, text)
        if count != 1:
            raise SystemExit(f"fault_run: {CONFIG} has {count} matches of {pattern!r}, not 1")
    return text + "".join(line + "\n" for line in args.config_append)


class Daemon:
    """aggregatord as a process; its log (with its workers') into a file."""

    def __init__(self, binary: str, directory: str, text: str) -> None:
        self.config = os.path.join(directory, "aggregator.yaml")
        with open(self.config, "w") as f:
            f.write(text)
        self.log_path = os.path.join(directory, "aggregatord.log")
        self.lines: List[str] = []
        self._changed = threading.Condition()
        self.process = subprocess.Popen([binary, "--config", self.config], cwd=ROOT,
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        text=True, bufsize=1)
        threading.Thread(target=self._collect, daemon=True).start()
        self.address = self._after("aggregatord listening on ")
        self.admin = self._after("admin on ")

    def _collect(self) -> None:
        with open(self.log_path, "w") as log:
            for line in self.process.stdout:
                log.write(line)
                log.flush()
                with self._changed:
                    self.lines.append(line)
                    self._changed.notify_all()
        with self._changed:
            self.lines.append("")
            self._changed.notify_all()

    def _after(self, needle: str, timeout: float = 60.0) -> str:
        deadline = time.monotonic() + timeout
        with self._changed:
            index = 0
            while True:
                for line in self.lines[index:]:
                    if line == "":
                        raise SystemExit(f"fault_run: aggregatord ended; see {self.log_path}")
                    if needle in line:
                        return line.split(needle, 1)[1].split()[0]
                index = len(self.lines)
                left = deadline - time.monotonic()
                if left <= 0:
                    raise SystemExit(f"fault_run: no '{needle}' from aggregatord in "
                                     f"{timeout:.0f}s; see {self.log_path}")
                self._changed.wait(left)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def wait_until(condition, what: str, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise SystemExit(f"fault_run: no {what} after {timeout:.0f}s")
        time.sleep(0.1)


class Stepper:
    """The coordinator stepping GetData + Learn in a loop, on random transitions; each
    step recorded as {start, end, ok, members, generation, error}."""

    def __init__(self, address: str, task_dir: str) -> None:
        self.client = AggregatorClient(address, timeout=120.0)
        self.task_dir = task_dir
        self.steps: List[Dict[str, Any]] = []
        self.stop = threading.Event()
        rng = np.random.default_rng(0)
        self.pool = [encode_transition(rng.normal(size=4).astype(np.float32),
                                       int(rng.integers(2)), 1.0,
                                       rng.normal(size=4).astype(np.float32), False)
                     for _ in range(512)]
        self.rng = rng
        self.thread = threading.Thread(target=self._run, daemon=True, name="stepper")

    def start(self) -> None:
        self.client.start_task({
            "task_id": "fault-run", "buffer_id": "replay", "seed": 0, "lr": 1e-3,
            "gamma": 0.99, "target_update": 100, "weights_every": 50,
            "checkpoint": os.path.join(self.task_dir, "weights.pt")})
        self.thread.start()

    def _run(self) -> None:
        next_id = 0
        while not self.stop.is_set():
            step: Dict[str, Any] = {"start": time.monotonic(), "ok": False, "members": None}
            try:
                demand = self.client.get_data()
                membership = demand.get("membership") or {}
                step["members"] = list(membership.get("members", []))
                step["generation"] = int(membership.get("generation", 0))
                step["planned"] = time.monotonic()
                picks = self.rng.integers(len(self.pool), size=demand["batch_size"])
                samples = [Sample(self.pool[i], {"replay_unique_id": next_id + k, "weight": 1.0})
                           for k, i in enumerate(picks)]
                next_id += len(samples)
                self.client.learn(samples, demand["plan_id"])
                step["ok"] = True
            except AggregatorError as e:
                step["error"] = str(e).splitlines()[0][:300]
                # Nothing to plan over (fewer than min_learners): do not spin.
                if "UNAVAILABLE" in step["error"] and step["members"] is None:
                    time.sleep(0.02)
            step["end"] = time.monotonic()
            self.steps.append(step)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(180)
        try:
            self.client.close_task()
        except AggregatorError:
            pass
        self.client.close()


class Injector:
    """Sends the faults to the daemon's workers (found through its admin status)."""

    def __init__(self, admin: AggregatorClient, latest_members, log) -> None:
        self.admin = admin
        self.latest_members = latest_members  # () -> the newest plan's members
        self.log = log
        self.stopped: Optional[int] = None  # the index of the frozen replica
        self.next_stop = 0
        self.next_kill = 0
        self.faults: List[Dict[str, Any]] = []

    def _pid(self, index: int) -> Optional[int]:
        for worker in self.admin.status().get("workers", []):
            if int(worker.get("index", -1)) == index and int(worker.get("pid", 0)) > 0:
                return int(worker["pid"])
        return None

    def _signal(self, index: int, sig: int) -> bool:
        pid = self._pid(index)
        if pid is None:
            return False
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return False
        return True

    def fault(self, kind: str) -> Dict[str, Any]:
        """One fault: "stop" or "kill" a replica (continuing the stopped one after), or
        "cont": only continue the stopped one."""
        continued = self.stopped
        at = time.monotonic()
        if kind == "cont":
            record = {"kind": kind, "at": at, "victim": f"dqn-{continued}",
                      "sent": continued is not None}
        else:
            if kind == "stop":
                victim = self.next_stop % REPLICAS
                if victim == continued:
                    victim = (victim + 1) % REPLICAS
                self.next_stop = victim + 1
            else:
                members = set(self.latest_members() or [])
                candidates = [(self.next_kill + k) % REPLICAS for k in range(REPLICAS)]
                candidates = [i for i in candidates if i != continued]
                in_group = [i for i in candidates if f"dqn-{i}" in members]
                victim = (in_group or candidates)[0]
                self.next_kill = victim + 1
            at = time.monotonic()
            sent = self._signal(victim, signal.SIGSTOP if kind == "stop" else signal.SIGKILL)
            record = {"kind": kind, "at": at, "victim": f"dqn-{victim}", "sent": sent}
        self.stopped = victim if kind == "stop" and record["sent"] else None
        if continued is not None:  # after the new fault: it comes back while that one hangs
            record["continued"] = f"dqn-{continued}"
            record["continued_at"] = time.monotonic()
            self._signal(continued, signal.SIGCONT)
        self.faults.append(record)
        self.log(f"fault_run: t={at:.2f} "
                 + (f"SIG{kind.upper()} {record['victim']}" if kind != "cont" else "")
                 + (f", SIGCONT {record['continued']}" if "continued" in record else ""))
        return record

    def release(self) -> None:
        if self.stopped is not None:
            self._signal(self.stopped, signal.SIGCONT)
            self.stopped = None


def analyse(steps: List[Dict[str, Any]], faults: List[Dict[str, Any]],
            ended: float) -> List[Dict[str, Any]]:
    """Per fault: the figures the module docstring names (None: not within the run)."""
    rows = []
    for n, fault in enumerate(faults):
        at = fault["at"]
        until = faults[n + 1]["at"] if n + 1 < len(faults) else ended
        after = [s for s in steps if s["start"] >= at and s["start"] < until]
        ok = [s for s in after if s["ok"]]
        hit = [s for s in steps if s["end"] >= at and s["start"] < until]  # incl. in flight
        row = {"n": n + 1, "kind": fault["kind"], "victim": fault["victim"],
               "next_learn": None, "lost": None, "whole": None,
               "rejoin_plan": None, "rejoin_learn": None}
        if ok:
            row["next_learn"] = ok[0]["end"] - at
            row["lost"] = sum(1 for s in hit if not s["ok"] and s["start"] < ok[0]["start"])
        whole = [s for s in ok if len(s["members"] or []) == REPLICAS]
        if whole:
            row["whole"] = whole[0]["end"] - at
        if "continued" in fault:
            back, name = fault["continued_at"], fault["continued"]
            since = [s for s in steps if s["start"] >= back and s["start"] < until]
            planned = [s for s in since if name in (s["members"] or [])]
            if planned:
                row["rejoin_plan"] = planned[0]["planned"] - back
            learned = [s for s in planned if s["ok"]]
            if learned:
                row["rejoin_learn"] = learned[0]["end"] - back
            row["continued"] = name
        rows.append(row)
    return rows


COLUMNS = [("next_learn", "next Learn s"), ("lost", "lost"), ("whole", "whole s"),
           ("rejoin_plan", "rejoin plan s"), ("rejoin_learn", "rejoin Learn s")]


def medians(rows: List[Dict[str, Any]]) -> Dict[str, Dict[str, Any]]:
    """{kind: {column: median over the faults that have it, "<column>_missing": count}}."""
    out: Dict[str, Dict[str, Any]] = {}
    for kind in sorted({r["kind"] for r in rows}):
        mine = [r for r in rows if r["kind"] == kind]
        out[kind] = {"faults": len(mine)}
        for key, _ in COLUMNS:
            values = [r[key] for r in mine if r[key] is not None]
            out[kind][key] = statistics.median(values) if values else None
            out[kind][f"{key}_missing"] = len(mine) - len(values)
    return out


def table(rows: List[Dict[str, Any]], summary: Dict[str, Dict[str, Any]]) -> str:
    def cell(value, width=14):
        if value is None:
            return "-".rjust(width)
        return (f"{value:.2f}" if isinstance(value, float) else str(value)).rjust(width)
    head = f"{'#':>3} {'fault':<14}" + "".join(title.rjust(15) for _, title in COLUMNS)
    lines = [head]
    for r in rows:
        what = f"{r['kind']} {r['victim']}"
        lines.append(f"{r['n']:>3} {what:<14}" + "".join(" " + cell(r[k]) for k, _ in COLUMNS)
                     + (f"  (continued {r['continued']})" if "continued" in r else ""))
    for kind, figures in summary.items():
        lines.append(f"{'med':>3} {kind + ' x' + str(figures['faults']):<14}"
                     + "".join(" " + cell(figures[k]) for k, _ in COLUMNS))
    return "\n".join(lines)


def step_figures(steps: List[Dict[str, Any]]) -> Dict[str, Any]:
    ok = [s["end"] - s["start"] for s in steps if s["ok"]]
    return {"steps": len(steps), "ok": len(ok), "failed": len(steps) - len(ok),
            "median_ok_step_ms": round(1000 * statistics.median(ok), 2) if ok else None}


def run_stepping(args, daemon, injector, events) -> Dict[str, Any]:
    stepper = Stepper(daemon.address, args.dir)
    injector.latest_members = lambda: next(
        (s["members"] for s in reversed(stepper.steps) if s["ok"]), None)
    stepper.start()
    try:
        # The late rule's history (the last 256 answers) then no longer holds the first
        # Learns, which formed the gloo group and were slow.
        wait_until(lambda: sum(1 for s in stepper.steps if s["ok"]
                               and len(s["members"]) == REPLICAS) >= args.warmup_steps,
                   f"{args.warmup_steps} steps over three replicas", 300)
        time.sleep(args.warmup)  # a paced schedule, not a synchronisation
        origin = time.monotonic()
        for at, kind in events:
            delay = origin + at - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            injector.fault(kind)
        left = origin + args.duration - time.monotonic()
        if left > 0:
            time.sleep(left)
    finally:
        injector.release()
        ended = time.monotonic()
        stepper.close()
    return {"steps": stepper.steps, "ended": ended}


def run_training(args, daemon, injector, events) -> Dict[str, Any]:
    summary_path = os.path.join(args.dir, "summary.json")
    coordinator = subprocess.Popen(
        [sys.executable, os.path.join(HERE, "coordinator.py"), "--address", daemon.address,
         "--seed", str(args.seed), "--max-env-steps", str(args.max_env_steps), "--elastic",
         "--summary", summary_path, "--no-progress", "--timeout", "120"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output: List[str] = []
    threading.Thread(target=lambda: output.extend(coordinator.stdout), daemon=True).start()
    try:
        time.sleep(args.warmup)  # a paced schedule, not a synchronisation
        origin = time.monotonic()
        for at, kind in events:  # until the coordinator ends (the schedule is long)
            try:
                coordinator.wait(max(0.0, origin + at - time.monotonic()))
                break
            except subprocess.TimeoutExpired:
                injector.fault(kind)
    finally:
        injector.release()
        coordinator.wait(600)
    sys.stderr.write("".join(output[-60:]))
    with open(summary_path) as f:
        summary = json.load(f)
    return {"summary": summary, "coordinator_rc": coordinator.returncode}


def plot_training(path: str, summary: Dict[str, Any], faults: List[Dict[str, Any]]) -> None:
    """Return against env steps (as the coordinator's plot) and against seconds: while
    too few replicas are in the plans the actor goes on stepping untrained, fast, so
    the steps axis stretches those moments and the seconds axis shows what they cost."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    episodes = summary["episode_returns"]
    times = summary["episode_monotonic"]
    started = summary.get("started_monotonic", times[0])
    steps = [s for s, _ in episodes]
    returns = [r for _, r in episodes]
    window = 20
    means = [np.mean(returns[max(0, i - window + 1):i + 1]) for i in range(len(returns))]
    seconds = [t - started for t in times]
    shown = [f for f in faults if f["at"] <= times[-1]]
    fig, axes = plt.subplots(2, 1, figsize=(9, 8), dpi=100)
    styles = {"stop": ("tab:orange", "--", "SIGSTOP (the last one SIGCONTed)"),
              "kill": ("tab:red", "-", "SIGKILL (the stopped one SIGCONTed)"),
              "cont": ("tab:green", ":", "SIGCONT")}
    for ax, xs, where in ((axes[0], steps, lambda t: float(np.interp(t, times, steps))),
                          (axes[1], seconds, lambda t: t - started)):
        ax.plot(xs, returns, ".", alpha=0.35, label="episode return")
        ax.plot(xs, means, "-", label=f"mean of last {window}")
        ax.axhline(195, color="gray", linestyle="--", label="195")
        labelled = set()
        for n, fault in enumerate(shown):
            at = where(fault["at"])
            color, style, label = styles[fault["kind"]]
            ax.axvline(at, color=color, linestyle=style, alpha=0.7,
                       label=None if fault["kind"] in labelled else label)
            labelled.add(fault["kind"])
            ax.annotate(fault["victim"][-1], (at, 2 + 14 * (n % 2)), color=color, fontsize=7,
                        ha="right")
        ax.set_ylabel("return")
        ax.legend(loc="upper left", fontsize=8)
    axes[0].set_xlabel("environment steps (the fault's replica: its index)")
    axes[1].set_xlabel("seconds")
    stops = sum(1 for f in shown if f["kind"] == "stop")
    kills = sum(1 for f in shown if f["kind"] == "kill")
    reached = "195" if summary["solved"] else "not 195"
    axes[0].set_title(f"Elastic CartPole DQN, 3 replicas, {stops} SIGSTOPs and {kills} SIGKILLs:\n"
                      f"{reached} after {summary['env_steps']} env steps, "
                      f"{summary['train_steps']} training steps, {summary['wall_seconds']:.0f} s")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main() -> None:
    args = parse_args()
    if args.replot:
        with open(args.replot) as f:
            report = json.load(f)
        with open(report["summary"]) as f:
            plot_training(args.plot, json.load(f), report["faults"])
        return
    if args.train:
        args.duration = 24 * 3600.0  # faults until the coordinator ends
    events = schedule_of(args)
    args.dir = args.dir or tempfile.mkdtemp(prefix="fault_run.")
    os.makedirs(args.dir, exist_ok=True)
    binary = args.aggregatord or next(
        (b for b in ("bazel-bin/daemon/aggregatord", "daemon/aggregatord")
         if os.path.exists(os.path.join(ROOT, b))), None)
    if binary is None:
        raise SystemExit("fault_run: no aggregatord: bazel build //daemon:aggregatord, "
                         "or give --aggregatord")
    binary = os.path.join(ROOT, binary)

    def log(line: str) -> None:
        if not args.quiet:
            print(line, flush=True)

    load_before = os.getloadavg()
    daemon = Daemon(binary, args.dir, config_text(args))
    admin = AggregatorClient(daemon.address, admin_address=daemon.admin, timeout=30.0)
    try:
        def ready() -> bool:
            learners = admin.status().get("learners", [])
            return sum(1 for x in learners if x.get("state") == "LEARNER_STATE_READY") == REPLICAS
        wait_until(ready, "three ready replicas", 180)
        injector = Injector(admin, lambda: None, log)
        started = time.monotonic()
        if args.train:
            result = run_training(args, daemon, injector, events)
        else:
            result = run_stepping(args, daemon, injector, events)
        wall = time.monotonic() - started
    finally:
        admin.close()
        daemon.stop()
    report: Dict[str, Any] = {
        "command": " ".join(sys.argv), "load_before": load_before, "load_after": os.getloadavg(),
        "wall_seconds": round(wall, 1), "faults": injector.faults, "log": daemon.log_path}
    if args.train:
        summary = result["summary"]
        report["coordinator_rc"] = result["coordinator_rc"]
        report["training"] = {k: v for k, v in summary.items()
                              if k not in ("episode_returns", "episode_monotonic", "lost_steps")}
        report["training"]["lost_steps"] = len(summary["lost_steps"])
        report["summary"] = os.path.join(args.dir, "summary.json")
        print(json.dumps(report["training"], indent=2))
        if args.plot:
            plot_training(args.plot, summary, injector.faults)
    else:
        rows = analyse(result["steps"], injector.faults, result["ended"])
        figures = medians(rows)
        report.update(rows=rows, medians=figures, steps=step_figures(result["steps"]))
        print(table(rows, figures))
        print(json.dumps(report["steps"]))
        if args.json:
            report["step_records"] = result["steps"]
    print(f"load average {report['load_before'][0]:.2f} before, "
          f"{report['load_after'][0]:.2f} after; daemon log {daemon.log_path}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
