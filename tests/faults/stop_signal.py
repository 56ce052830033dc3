"""A run stopped by a signal, end to end: SIGUSR1 to mpirun (which forwards it to every rank)
and SIGTERM to one rank alone (as a scheduler or a user's `kill` may) each stop the whole job
after the same step on every rank, with a checkpoint of that step saved, `latest` naming it, a
line saying what stopped it, and the exit status 128 + the signal; `--resume latest` then
finishes the run with every loss and final tensor equal to an uninterrupted run's bit for bit.
A second SIGINT stops a single-process run at once, as Ctrl-C twice does.
usage: stop_signal.py LOOM DATA WORKDIR"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from loom_runs import MPIRUN, fail, must_run, rank_pid, same_run, train_args  # noqa: E402

STEPS = 400
work = sys.argv[3]
layout = ["--dp", "2"]
saving = ["--checkpoint-format", "single"]
ref = os.path.join(work, "reference")


def logged_step(run_dir):
    """The last train step metrics.jsonl records (0 before the first)."""
    try:
        with open(os.path.join(run_dir, "metrics.jsonl")) as f:
            steps = [json.loads(line)["step"] for line in f if '"train"' in line]
    except (OSError, ValueError):
        return 0
    return steps[-1] if steps else 0


def wait_for_step(job, run_dir, step):
    """Returns once the run has logged `step` (its handlers are in place by then: they are
    installed when the loop starts)."""
    deadline = time.time() + 120
    while logged_step(run_dir) < step:
        if job.poll() is not None or time.time() > deadline:
            fail(f"the run ended or stalled before step {step}:\n" + job.communicate()[0])
        time.sleep(0.002)


def signal_after_a_few_steps(job, run_dir, send, after=0):
    """send() once the run has logged step after + 5, then its output once it ended."""
    wait_for_step(job, run_dir, after + 5)
    send()
    try:
        out, _ = job.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        job.kill()
        fail("the job still runs 60 s after the signal (a hang)")
    return out


def check_stopped(run_dir, out, status, name, want_status):
    match = re.search(rf"stopped by {name} after step (\d+) of {STEPS}: saved (\S+);", out)
    if match is None:
        fail(f"no 'stopped by {name} after step N' line:\n{out}")
    step = int(match.group(1))
    if status != want_status:
        fail(f"exit status {status} after {name}, want {want_status} (128 + the signal):\n{out}")
    saved = os.path.join(run_dir, f"checkpoint-{step:08d}.safetensors")
    if match.group(2) != saved or not os.path.isfile(saved):
        fail(f"the stop says it saved {match.group(2)}, want {saved} on disk")
    if os.readlink(os.path.join(run_dir, "latest")) != os.path.basename(saved):
        fail(f"`latest` does not name the stop's checkpoint {saved}")
    if step >= STEPS or os.path.exists(os.path.join(run_dir, f"checkpoint-{STEPS:08d}.safetensors")):
        fail("the run reached its end before the signal: nothing was tested")
    if logged_step(run_dir) != step:
        fail(f"metrics.jsonl ends at step {logged_step(run_dir)}, the stop was after step {step}")
    return step


def start(run_dir, extra=()):
    return subprocess.Popen([*MPIRUN, "-n", "2", *train_args(run_dir, layout, STEPS, [*saving, *extra])],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


shutil.rmtree(work, ignore_errors=True)
must_run(2, train_args(ref, layout, STEPS, saving))

# 1. SIGUSR1 to mpirun, which forwards it to every rank (sbatch --signal=USR1@T does the same).
run_dir = os.path.join(work, "usr1")
job = start(run_dir)
out = signal_after_a_few_steps(job, run_dir, lambda: os.kill(job.pid, signal.SIGUSR1))
step = check_stopped(run_dir, out, job.returncode, "SIGUSR1", 128 + signal.SIGUSR1)
print(f"1. SIGUSR1 to mpirun: both ranks stopped after step {step}, saved it, status {job.returncode}")

# 2. Resume it, then SIGTERM to rank 1 alone: rank 0 stops after the same step.
job = start(run_dir, ["--resume", "latest"])


def terminate_rank_1():
    victim = rank_pid(job.pid, 1)
    if victim is None:
        fail("cannot find rank 1 among mpirun's children")
    os.kill(victim, signal.SIGTERM)


out = signal_after_a_few_steps(job, run_dir, terminate_rank_1, after=step)
resumed = check_stopped(run_dir, out, job.returncode, "SIGTERM", 128 + signal.SIGTERM)
if resumed <= step:
    fail(f"the resumed run stopped after step {resumed}, not after the first stop's {step}")
print(f"2. SIGTERM to rank 1 alone: rank 0 stopped after the same step {resumed} (its line says so)")

# 3. Resume to the end: the same losses and tensors as the run nothing stopped.
out = must_run(2, train_args(run_dir, layout, STEPS, [*saving, "--resume", "latest"]))
if f"at step {resumed}" not in out:
    fail(f"the last resume did not start at step {resumed}:\n{out}")
same_run(run_dir, ref, STEPS)

# 4. One process, SIGINT twice: the second ends it at once (killed by SIGINT, no stop line).
# A model whose steps take a good part of a second, so the second SIGINT lands inside the step
# the first one asked to finish.
run_dir = os.path.join(work, "twice")
wide = ["--n-layer", "4", "--n-embd", "256", "--block-size", "256", "--batch-size", "8"]
job = subprocess.Popen([*train_args(run_dir, [], 1000), *wide], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True)
wait_for_step(job, run_dir, 1)
job.send_signal(signal.SIGINT)
seen = []
for line in job.stdout:  # the first one's acknowledgement, then the second
    seen.append(line)
    if "SIGINT received: stopping after this step" in line:
        job.send_signal(signal.SIGINT)
        break
out = "".join(seen) + job.communicate(timeout=60)[0]
if job.returncode != -signal.SIGINT or "stopped by" in out:
    fail(f"a second SIGINT did not end the run at once (status {job.returncode}):\n{out}")
print(f"4. a second SIGINT ended the single-process run at once (after step {logged_step(run_dir)})")
print("stop signal: PASSED")
