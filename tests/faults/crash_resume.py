"""Crash and resume, end to end: a rank killed with SIGKILL mid-run ends the whole job within
30 s with a message naming the lost rank; `--resume auto` continues from the newest complete
checkpoint; a crash between writing a checkpoint and renaming it into place leaves `latest`
on the previous checkpoint, which loads; and the final losses and parameters equal an
uninterrupted run's bit for bit. The runs after the first write their checkpoints behind
training (--checkpoint-async): the crash then hits the writer thread while training steps on.
usage: crash_resume.py LOOM DATA WORKDIR"""
import glob
import os
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from loom_runs import MPIRUN, fail, must_run, rank_pid, same_run, train_args  # noqa: E402

STEPS, EVERY = 200, 10
work = sys.argv[3]
ref, run_dir = os.path.join(work, "reference"), os.path.join(work, "crashed")
for d in (ref, run_dir):
    shutil.rmtree(d, ignore_errors=True)
layout = ["--dp", "2"]
# Single-file checkpoints: the crash hook sits between writing a file and renaming it, and
# the final tensors are compared file to file. (A sharded checkpoint whose writer died before
# its manifest is skipped the same way: tests/train/test_sharded_checkpoint.cpp.)
saving = ["--checkpoint-every", str(EVERY), "--checkpoint-format", "single"]


def checkpoint(step):
    return os.path.join(run_dir, f"checkpoint-{step:08d}.safetensors")


def finish_within(job, seconds, what):
    try:
        out, _ = job.communicate(timeout=seconds)
    except subprocess.TimeoutExpired:
        job.kill()
        fail(f"{what}: the job still runs {seconds} s later (a hang)")
    return out


# The uninterrupted run.
must_run(2, train_args(ref, layout, STEPS, saving))

# 1. SIGKILL rank 1 once the checkpoint of step 40 exists.
job = subprocess.Popen([*MPIRUN, "-n", "2", *train_args(run_dir, layout, STEPS, [*saving, "--resume", "auto"])],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
deadline = time.time() + 120
while not os.path.exists(checkpoint(2 * EVERY)):
    if job.poll() is not None or time.time() > deadline:
        fail("the run ended or stalled before its second checkpoint:\n" + job.communicate()[0])
    time.sleep(0.002)
victim = rank_pid(job.pid, 1)
if victim is None:
    fail("cannot find rank 1 among mpirun's children")
os.kill(victim, signal.SIGKILL)
killed_at = time.time()
out = finish_within(job, 30, "after SIGKILL of rank 1")
print(f"1. rank 1 killed; the job ended {time.time() - killed_at:.1f} s later with status {job.returncode}")
if job.returncode == 0:
    fail("the job succeeded although rank 1 was killed:\n" + out)
if "no complete checkpoint" not in out or "starting fresh" not in out:
    fail("--resume auto did not say it starts fresh:\n" + out)
if "rank 1" not in out:
    fail("the failure message does not name the lost rank 1:\n" + out)
if os.path.exists(checkpoint(STEPS)):
    fail("the run finished before rank 1 was killed: nothing was tested")
print("   the message names it: " + next(line for line in out.splitlines() if "rank 1" in line).strip())

# 2. Resume, then crash rank 0 after writing a later checkpoint but before renaming it, the
# checkpoints now written behind training.
saving = [*saving, "--checkpoint-async"]
latest_before = os.readlink(os.path.join(run_dir, "latest"))
crash_step = 15 * EVERY
env = dict(os.environ, LOOM_TEST_CRASH_BEFORE_RENAME=f"checkpoint-{crash_step:08d}")
job = subprocess.Popen([*MPIRUN, "-n", "2", *train_args(run_dir, layout, STEPS, [*saving, "--resume", "auto"])],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
out = finish_within(job, 180, "the crash while checkpointing")
if job.returncode == 0:
    fail("the job survived a crash while checkpointing:\n" + out)
if f"resumed from {os.path.realpath(os.path.join(run_dir, latest_before))}" not in out:
    fail(f"the restart did not resume from {latest_before}:\n" + out)
latest = os.readlink(os.path.join(run_dir, "latest"))
if latest != os.path.basename(checkpoint(crash_step - EVERY)):
    fail(f"`latest` points at {latest} after the crash, want the previous checkpoint")
if os.path.exists(checkpoint(crash_step)) or not glob.glob(os.path.join(run_dir, f".checkpoint-{crash_step:08d}*.tmp.*")):
    fail("the interrupted checkpoint was not left as an unrenamed temporary file")
print(f"2. resumed from {latest_before}; rank 0 died writing step {crash_step}: `latest` still names {latest}")

# 3. Resume again (from the checkpoint before the crash) and finish: same as uninterrupted.
out = must_run(2, train_args(run_dir, layout, STEPS, [*saving, "--resume", "auto"]))
if f"resumed from {os.path.realpath(checkpoint(crash_step - EVERY))} at step {crash_step - EVERY}" not in out:
    fail("the second restart did not resume from the checkpoint before the crash:\n" + out)
same_run(run_dir, ref, STEPS)
print("crash and resume: PASSED")
