#!/usr/bin/env python3
"""Every bad input of tests/apps/bad_inputs/*.py against the `loom` binary, as a careless user or
a hostile environment would give it, each under a time limit and a memory bound.

A case passes when loom exits with status 1 and prints a message matching the case's pattern
(the message names the problem: the key, the path, the value). Anything else is counted by
what it was:
  crash     killed by a signal, exit status other than 0 and 1, "internal error", an uncaught
            exception ("terminate called") or a sanitizer report
  hang      still running after the time limit (then killed with its process group)
  memory    peak resident memory above the bound (or out of address space under the limit)
  accepted  exit status 0: the input was taken where an error was due
  unclear   exit status 1 with a message that does not name the problem

Each file tests/apps/bad_inputs/cases_<class>.py holds one class of input: a function
cases(fx) returning Case rows (fx: the Fixtures below: scratch files, a trained checkpoint).
A new reader adds a file of its own, nothing else.

  run.py --loom build/loom [--work DIR] [--all] [--list] [--class NAME] [--jobs N]

Without --all only the quick cases run (what CTest runs); --all adds the slow ones (they train
first, or start mpirun). --list prints every case with its result and message.
"""
import argparse
import concurrent.futures
import importlib.util
import json
import os
import re
import resource
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent.parent

TIME_LIMIT_S = 20           # a case still running after this is a hang
RSS_BOUND = 256 << 20       # peak resident memory of the process (tree) a case may use
ADDRESS_SPACE = 4 << 30     # RLIMIT_AS: an unbounded allocation fails instead of taking the machine

CRASH_PATTERNS = re.compile(r"internal error|terminate called|Segmentation fault|AddressSanitizer|"
                            r"runtime error:|core dumped|Aborted|std::bad_alloc")


@dataclass
class Case:
    what: str                   # the input, as the table shows it
    args: list                  # loom's arguments
    expect: str                 # regular expression the message must match (it names the problem)
    slow: bool = False          # trains a model first or starts mpirun: not in the quick (CTest) set
    ranks: int = 0              # > 0: started by mpirun -np ranks
    env: dict = field(default_factory=dict)
    klass: str = ""
    stdin: str = ""             # a path opened as loom's stdin (a directory too); "": none


class Fixtures:
    """Scratch files and checkpoints the cases point loom at; created on first use."""

    def __init__(self, loom, work):
        self.loom = loom
        self.work = Path(work)
        self.data = str(ROOT / "data" / "tinyshakespeare.txt")
        self.cora_config = str(ROOT / "configs" / "cora.toml")
        self.tiny = ["--n-layer", "1", "--n-head", "2", "--n-embd", "16", "--block-size", "16", "--batch-size", "2",
                     "--threads", "1", "--peak-gflops", "100", "--eval-batches", "1", "--data", self.data]
        self._lock = threading.Lock()
        self._trained = {}
        self._count = 0

    def path(self, name):
        with self._lock:
            self._count += 1
            p = self.work / f"{self._count:03d}-{name}"
        return str(p)

    def file(self, name, content):
        p = self.path(name)
        Path(p).write_bytes(content.encode() if isinstance(content, str) else content)
        return p

    def fifo(self, name):
        p = self.path(name)
        os.mkfifo(p)
        return p

    def directory(self, name):
        p = self.path(name)
        os.makedirs(p)
        return p

    def symlink(self, name, target):
        p = self.path(name)
        os.symlink(target, p)
        return p

    def link_loop(self, name):
        p = self.path(name)
        os.symlink(os.path.basename(p), p)
        return p

    def sparse(self, name, size):
        p = self.path(name)
        with open(p, "wb") as f:
            f.truncate(size)
        return p

    def out(self, name="run"):
        return ["--out-dir", self.path(name)]

    def trained(self, fmt, name="", args=()):
        """A run directory holding one checkpoint of the tiny model ('single' or 'sharded'),
        trained once per format (and per name, a variant trained with these extra args); each
        call returns a fresh copy the case may damage."""
        key = fmt + (f"-{name}" if name else "")
        with self._lock:
            if key not in self._trained:
                d = self.work / f"trained-{key}"
                r = subprocess.run([self.loom, "train", *self.tiny, *args, "--steps", "1", "--checkpoint-format", fmt,
                                    "--out-dir", str(d)], capture_output=True, text=True)
                if r.returncode != 0:
                    raise RuntimeError(f"training the {key} fixture failed:\n{r.stdout}{r.stderr}")
                self._trained[key] = d
        copy = self.path(f"run-{key}")
        shutil.copytree(self._trained[key], copy, symlinks=True)
        return copy

    def trained_gcn(self):
        """A run directory holding one checkpoint of a GCN (on Cora), trained once."""
        with self._lock:
            if "gcn" not in self._trained:
                d = self.work / "trained-gcn"
                r = subprocess.run([self.loom, "train", "--model", "gcn", "--data", str(ROOT / "data" / "cora"),
                                    "--steps", "1", "--threads", "1", "--out-dir", str(d)], capture_output=True, text=True)
                if r.returncode != 0:
                    raise RuntimeError(f"training the GCN fixture failed:\n{r.stdout}{r.stderr}")
                self._trained["gcn"] = d
        return str(self._trained["gcn"])

    # A single-file checkpoint: 8-byte header length, JSON header, tensor data.
    @staticmethod
    def checkpoint_file(run):
        return str(Path(run) / os.readlink(Path(run) / "latest"))

    @staticmethod
    def read_safetensors(path):
        b = Path(path).read_bytes()
        n = struct.unpack("<Q", b[:8])[0]
        return json.loads(b[8:8 + n]), b[8 + n:]

    @staticmethod
    def write_safetensors(path, header, data, raw_header=None):
        h = raw_header if raw_header is not None else json.dumps(header).encode()
        Path(path).write_bytes(struct.pack("<Q", len(h)) + h + data)

    def edit_checkpoint(self, name, edit):
        """A copy of the single-file run whose checkpoint header went through edit(header) (which
        may return (header, data) to change the data as well)."""
        run = self.trained("single")
        path = self.checkpoint_file(run)
        header, data = self.read_safetensors(path)
        out = edit(header)
        if isinstance(out, tuple):
            header, data = out
        self.write_safetensors(path, header, data)
        return run

    def edit_manifest(self, name, edit):
        """A copy of the sharded run whose manifest went through edit(manifest)."""
        run = self.trained("sharded")
        m = Path(run) / os.readlink(Path(run) / "latest") / "manifest.json"
        manifest = json.loads(m.read_text())
        out = edit(manifest)
        m.write_text(out if isinstance(out, str) else json.dumps(out, indent=1))
        return run

    def sharded_checkpoint_dir(self, run):
        return str(Path(run) / os.readlink(Path(run) / "latest"))


def load_classes(only=None):
    classes = []
    for f in sorted(HERE.glob("cases_*.py")):
        name = f.stem[len("cases_"):]
        if only and name not in only:
            continue
        spec = importlib.util.spec_from_file_location(f.stem, f)
        mod = importlib.util.module_from_spec(spec)
        sys.path.insert(0, str(HERE))
        spec.loader.exec_module(mod)
        classes.append((getattr(mod, "CLASS", name), mod.cases))
    return classes


def limit_memory():
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def run_case(loom, case, mpirun):
    cmd = [loom, *case.args]
    if case.ranks:
        cmd = [mpirun, "--oversubscribe", "--bind-to", "none", "-np", str(case.ranks), *cmd]
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_mpi_yield_when_idle="1", **case.env)
    with tempfile.TemporaryFile() as out:
        start = time.monotonic()
        stdin = os.open(case.stdin, os.O_RDONLY) if case.stdin else subprocess.DEVNULL
        try:
            p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=stdin, env=env,
                                 preexec_fn=limit_memory, start_new_session=True)
        finally:
            if case.stdin:
                os.close(stdin)
        timed_out = threading.Event()

        def kill():
            timed_out.set()
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

        timer = threading.Timer(TIME_LIMIT_S, kill)
        timer.start()
        _, status, usage = os.wait4(p.pid, 0)
        timer.cancel()
        p.returncode = os.waitstatus_to_exitcode(status)
        seconds = time.monotonic() - start
        out.seek(0)
        text = out.read().decode(errors="replace")
    rss = usage.ru_maxrss * 1024
    code = p.returncode
    if timed_out.is_set():
        verdict = "hang"
    elif code < 0 or code >= 2 or CRASH_PATTERNS.search(text):
        verdict = "crash"
    elif rss > RSS_BOUND or "out of memory" in text:
        verdict = "memory"
    elif code == 0:
        verdict = "accepted"
    elif not re.search(case.expect, text):
        verdict = "unclear"
    else:
        verdict = "ok"
    lines = [l for l in text.splitlines() if l.strip()]
    message = next((l for l in lines if "loom: " in l and "error" in l), lines[0] if lines else "")
    return {"verdict": verdict, "code": code, "seconds": seconds, "rss": rss, "message": message.strip(), "output": text}


VERDICTS = ["ok", "crash", "hang", "memory", "accepted", "unclear"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--loom", required=True)
    ap.add_argument("--mpirun", default=shutil.which("mpirun") or "mpirun")
    ap.add_argument("--work", help="scratch directory (default: a fresh temporary one)")
    ap.add_argument("--all", action="store_true", help="also the slow cases (training first, mpirun)")
    ap.add_argument("--list", action="store_true", help="print every case with its result")
    ap.add_argument("--class", dest="only", action="append", help="only this class (repeatable)")
    ap.add_argument("--jobs", type=int, default=2)
    a = ap.parse_args()
    loom = str(Path(a.loom).resolve())
    work = Path(a.work) if a.work else Path(tempfile.mkdtemp(prefix="loom_bad_inputs_"))
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    fx = Fixtures(loom, work)

    cases, left_out = [], 0
    for klass, make in load_classes(a.only):
        for c in make(fx):
            c.klass = klass
            if a.all or not c.slow:
                cases.append(c)
            else:
                left_out += 1
    start = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(a.jobs) as pool:
        results = list(pool.map(lambda c: run_case(loom, c, a.mpirun), cases))
    elapsed = time.monotonic() - start

    by_class = {}
    for c, r in zip(cases, results):
        by_class.setdefault(c.klass, []).append((c, r))
    if a.list:
        print("| class | input | result | message |\n|---|---|---|---|")
        for c, r in zip(cases, results):
            msg = r["message"].replace("|", "\\|")[:160]
            what = c.what.replace("|", "\\|")
            print(f"| {c.klass} | {what} | {r['verdict']} (exit {r['code']}) | {msg} |")
        print()
    print("| class | inputs | " + " | ".join(VERDICTS) + " | peak RSS | slowest |")
    print("|---|---|" + "---|" * len(VERDICTS) + "---|---|")
    total = {v: 0 for v in VERDICTS}
    for klass, rows in by_class.items():
        counts = {v: sum(1 for _, r in rows if r["verdict"] == v) for v in VERDICTS}
        for v in VERDICTS:
            total[v] += counts[v]
        rss = max(r["rss"] for _, r in rows) / (1 << 20)
        slowest = max(r["seconds"] for _, r in rows)
        print(f"| {klass} | {len(rows)} | " + " | ".join(str(counts[v]) for v in VERDICTS) +
              f" | {rss:.0f} MiB | {slowest:.1f} s |")
    print(f"| all | {len(cases)} | " + " | ".join(str(total[v]) for v in VERDICTS) +
          f" | {max((r['rss'] for r in results), default=0) / (1 << 20):.0f} MiB | |")
    print(f"\nbounds: {TIME_LIMIT_S} s a case, peak RSS {RSS_BOUND >> 20} MiB, address space {ADDRESS_SPACE >> 30} GiB; "
          f"{len(cases)} cases in {elapsed:.0f} s with {a.jobs} at a time" +
          ("" if a.all else f"; the quick set (--all adds {left_out} slow cases)"))
    bad = [(c, r) for c, r in zip(cases, results) if r["verdict"] != "ok"]
    for c, r in bad:
        print(f"\nFAIL [{c.klass}] {c.what}: {r['verdict']} (exit {r['code']}, {r['seconds']:.1f} s, "
              f"{r['rss'] >> 20} MiB)\n  loom {' '.join(c.args)}\n  expected: {c.expect}\n  printed: "
              + "\n  ".join(r["output"].strip().splitlines()[-8:]))
    if not a.work:
        shutil.rmtree(work, ignore_errors=True)
    print("\nbad inputs: PASSED" if not bad else f"\nbad inputs: {len(bad)} FAILED")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
