"""Shared helpers of the fault tests: start `loom train` under mpirun, read the losses of a
run's metrics.jsonl and the tensors of a checkpoint (the safetensors layout read by hand:
8-byte little-endian header length, JSON header, raw data), so a test compares two runs
exactly without trusting the code under test."""
import glob
import json
import os
import struct
import subprocess
import sys

LOOM, DATA = sys.argv[1], sys.argv[2]
MPIRUN = ["mpirun", "--oversubscribe", "--bind-to", "none"]


def fail(message):
    print("FAIL: " + message, flush=True)
    sys.exit(1)


def train_args(out_dir, layout, steps, extra=()):
    return [LOOM, "train", "--data", DATA, *layout, "--n-layer", "2", "--n-head", "2", "--n-embd", "16",
            "--block-size", "16", "--batch-size", "2", "--steps", str(steps), "--eval-batches", "1",
            "--threads", "1", "--peak-gflops", "100", "--log-every", "1", "--out-dir", out_dir, *extra]


def run(ranks, args, mpi_options=(), env=None, timeout=240):
    """Runs to completion; returns (exit status, combined output)."""
    p = subprocess.run([*MPIRUN, *mpi_options, "-n", str(ranks), *args], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=timeout, env=env)
    return p.returncode, p.stdout


def must_run(ranks, args, mpi_options=(), env=None):
    status, out = run(ranks, args, mpi_options, env)
    if status != 0:
        fail(f"exit status {status}:\n{out}")
    return out


def rank_pid(launcher_pid, rank):
    """The pid of world rank `rank` among mpirun's children."""
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            with open(stat) as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            if ppid != launcher_pid:
                continue
            with open(stat[:-4] + "environ", "rb") as f:
                if f"OMPI_COMM_WORLD_RANK={rank}".encode() in f.read().split(b"\0"):
                    return int(stat.split("/")[2])
        except (OSError, ValueError, IndexError):
            continue
    return None


def losses(out_dir):
    """{step: [loss, ...]} of every train record (a step run twice, before a crash and after
    the resume, appears twice)."""
    out = {}
    with open(os.path.join(out_dir, "metrics.jsonl")) as f:
        for line in f:
            r = json.loads(line)
            if r["kind"] == "train":
                out.setdefault(r["step"], []).append(r["loss"])
    return out


def tensors(path):
    """{name: raw bytes} of a checkpoint file."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    data = blob[8 + n:]
    return {k: data[v["data_offsets"][0]:v["data_offsets"][1]] for k, v in header.items() if k != "__metadata__"}


def checkpoint_tensors(run_dir, step):
    """{name: raw bytes} of a run's checkpoint at step: a single file, or a sharded directory's
    rank files (keys "rank-NNNNN.safetensors:<tensor>"; two runs of one layout hold the same
    pieces in the same files)."""
    single = os.path.join(run_dir, f"checkpoint-{step:08d}.safetensors")
    if os.path.isfile(single):
        return tensors(single)
    sharded, out = os.path.join(run_dir, f"checkpoint-{step:08d}"), {}
    for f in sorted(os.listdir(sharded)):
        if f.endswith(".safetensors"):
            out.update({f + ":" + k: v for k, v in tensors(os.path.join(sharded, f)).items()})
    return out


def same_run(got_dir, want_dir, steps):
    """Every logged loss and every final tensor of got_dir equals want_dir's, bit for bit."""
    want, got = losses(want_dir), losses(got_dir)
    if sorted(got) != list(range(1, steps + 1)):
        fail(f"{got_dir}: logged steps {sorted(got)}, want 1..{steps}")
    for step, values in got.items():
        for v in values:
            if v != want[step][0]:
                fail(f"{got_dir}: loss at step {step} is {v!r}, the reference run's is {want[step][0]!r}")
    name = f"checkpoint-{steps:08d}"
    a, b = checkpoint_tensors(got_dir, steps), checkpoint_tensors(want_dir, steps)
    if sorted(a) != sorted(b):
        fail(f"{name}: tensor names differ")
    for k in a:
        if a[k] != b[k]:
            fail(f"{name}: tensor {k} differs from the reference run's")
    print(f"{got_dir}: {steps} steps' losses and {len(a)} final tensors equal the reference run's", flush=True)
