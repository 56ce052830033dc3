#!/usr/bin/env bash
# The README's Slurm example, run for real: a throwaway one-node Slurm cluster on this machine
# (munged, slurmctld and slurmd as plain background processes, every file in WORK_DIR, no
# systemd), then scripts/slurm/loom.sbatch submitted to it unedited, scaled down by sbatch
# options (which override its #SBATCH lines), its environment knobs and extra train flags.
# The daemons are always stopped on exit, and every wait has a limit.
#   slurm_local.sh SOURCE_DIR LOOM_BINARY WORK_DIR
set -euo pipefail

src=$(realpath "$1")
loom=$(realpath "$2")
work=$3
export PATH=$PATH:/usr/sbin:/sbin  # the daemons live in sbin, outside a plain user's PATH

fail() {
  echo "FAIL: $*" >&2
  exit 1
}
for tool in munged slurmctld slurmd sbatch srun scontrol sinfo squeue scancel; do
  command -v "$tool" >/dev/null || fail "$tool is not installed (scripts/install-deps.sh installs Slurm and MUNGE)"
done

rm -rf "$work"
mkdir -p "$work"/{state,spool,munge,tmp}
work=$(realpath "$work")

# Two free TCP ports, so that this cluster never meets a real Slurm or a parallel run of this test.
read -r ctld_port slurmd_port < <(/usr/bin/python3 - <<'X'
import socket
socks = [socket.socket() for _ in range(2)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in socks))
X
)

pids=()
submitted=
teardown() {
  local rc=$?
  set +e
  # Jobs first (their slurmstepd outlives slurmd), then the daemons this script started.
  if [ -n "$submitted" ]; then
    timeout 10 scancel --quiet --full --user="$(id -un)" 2>/dev/null
    for _ in $(seq 10); do
      [ -z "$(timeout 5 squeue -h -o %i 2>/dev/null)" ] && break
      sleep 1
    done
  fi
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null; done
  for pid in "${pids[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null
  done
  exit "$rc"
}
trap teardown EXIT

# A daemon in the foreground of a background job: its pid is ours to stop, and what it prints
# (in the foreground the Slurm daemons log there too) goes to WORK_DIR/NAME.out.
start() {
  local name=$1
  shift
  "$@" >"$work/$name.out" 2>&1 &
  pids+=($!)
}

# Prints the end of each log named, then fails; for a daemon that died or never answered.
fail_with_logs() {
  local message=$1
  shift
  for log in "$@"; do
    echo "---- $log" >&2
    tail -n 30 "$log" >&2 || true
  done
  fail "$message"
}

# MUNGE signs Slurm's messages; a random key of our own and a socket in the work directory.
# --force: munged otherwise refuses a key or socket below directories that others may write to,
# which a build tree may have (the key is thrown away with the cluster).
munge_socket=$work/munge/munge.socket
[ ${#munge_socket} -lt 100 ] || fail "work directory path too long for a UNIX socket: $munge_socket"
head -c 1024 /dev/urandom >"$work/munge/munge.key"
chmod 600 "$work/munge/munge.key"
start munged munged --foreground --force --socket="$munge_socket" --key-file="$work/munge/munge.key" \
  --pid-file="$work/munge/munged.pid" --seed-file="$work/munge/munged.seed"
for _ in $(seq 50); do [ -S "$munge_socket" ] && break; sleep 0.1; done
[ -S "$munge_socket" ] || fail_with_logs "munged did not create $munge_socket within 5 s" "$work/munged.out"

# The node as slurmd sees it (CPUs, sockets, cores, threads), so Slurm does not drain it.
host=$(hostname -s)
hardware=$(timeout 10 slurmd -C | head -n 1 | sed 's/^NodeName=[^ ]* //') || fail "slurmd -C could not describe this node"
export SLURM_CONF=$work/slurm.conf
cat >"$SLURM_CONF" <<X
ClusterName=loomtest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$munge_socket
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
# The pmix plug-in's per-step files go here rather than /tmp, where a parallel run would meet them.
TmpFS=$work/tmp
# No mail program in a minimal root; slurmctld complains unless this names one.
MailProg=/bin/true
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
# The daemons also print to NAME.out; slurmstepd (one per job step) logs only to slurmd.log.
SlurmctldLogFile=$work/slurmctld.log
SlurmdLogFile=$work/slurmd.log
# No cgroups in a container: track processes by parent id and do not bind tasks.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SchedulerType=sched/builtin
# Count hardware threads, so a task with --cpus-per-task=1 takes one even on a hyper-threaded CI machine.
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
# sbatch --wait polls every 2 s only while MinJobAge is this short.
MinJobAge=4
NodeName=$host NodeAddr=127.0.0.1 $hardware State=UNKNOWN
PartitionName=test Nodes=$host Default=YES MaxTime=10 State=UP
X

# slurmd (22.05) always loads a cgroup plug-in, and its default (autodetect) fails where
# /sys/fs/cgroup is not mounted, as in a chroot; cgroup/v1 loads without it and, with the
# plug-ins above, is never used.
echo "CgroupPlugin=cgroup/v1" >"$work/cgroup.conf"

start slurmctld slurmctld -D -f "$SLURM_CONF"
start slurmd slurmd -D -N "$host" -f "$SLURM_CONF"

# Ready when the node is idle: slurmctld answers and slurmd has registered with it.
state=
for _ in $(seq 60); do
  for pid in "${pids[@]}"; do
    kill -0 "$pid" 2>/dev/null || fail_with_logs "a daemon exited at start" "$work"/{munged,slurmctld,slurmd}.out
  done
  state=$(timeout 5 sinfo -h -n "$host" -o %T 2>/dev/null || true)
  [ "$state" = idle ] && break
  sleep 0.5
done
[ "$state" = idle ] || fail_with_logs "node $host not idle within 30 s (state '$state')" "$work"/slurm{ctld,d}.out
echo "slurm cluster up: node $host idle ($hardware)"

# The example, as a user submits it from the repository root, scaled to 1 node x 2 tasks.
# Its environment knobs point it at this build and this work directory; the arguments after
# the script are appended to its `loom train` line, where the last repeated flag wins.
job_log=$work/job.log
submitted=1
set +e
LOOM=$loom LOOM_OUT_DIR=$work/run LOOM_NET_IF=lo \
  timeout 180 sbatch --wait --nodes=1 --ntasks-per-node=2 --cpus-per-task=1 --time=5 \
  --chdir="$src" --output="$job_log" "$src/scripts/slurm/loom.sbatch" \
  --dp 1 --pp 1 --tp 2 --micro-batches 1 --n-layer 1 --n-head 2 --n-embd 16 --block-size 16 \
  --batch-size 2 --steps 3 --eval-batches 1
job_rc=$?
set -e
echo "---- job log $job_log"
cat "$job_log" || true
echo "----"
[ "$job_rc" -eq 0 ] || fail_with_logs "sbatch --wait ended with $job_rc (124: timed out)" "$work"/slurm{ctld,d}.log

# Both ranks trained as one tp 2 job: the last step, tensor-parallel traffic, each rank's place
# in the layout, the metrics and the report the script writes afterwards.
grep -Eq 'step +3/3 \| loss .*tp comm [0-9]+ ms' "$job_log" || fail "no 'step 3/3' line with tp traffic in the job log"
for rank in "rank 0 (dp 0, pp 0, tp 0)" "rank 1 (dp 0, pp 0, tp 1)"; do
  grep -qF "\"$rank\"" "$work/run/memory.json" || fail "$work/run/memory.json does not list \"$rank\""
done
[ "$(grep -c '"kind":"train"' "$work/run/metrics.jsonl")" -ge 2 ] || fail "$work/run/metrics.jsonl has no train steps"
[ -s "$work/run/report.html" ] || fail "the script wrote no $work/run/report.html"

# Stopped as its time limit would stop it: SIGUSR1 to the job's steps (what the script's
# `#SBATCH --signal=USR1@300` asks Slurm for ahead of the limit; scancel sends it now) stops
# both ranks after one step with a checkpoint; the script writes the report and says how to
# continue; the same LOOM_OUT_DIR submitted again resumes there and trains on.
stop_log=$work/stop.log
train_flags=(--dp 1 --pp 1 --tp 2 --micro-batches 1 --n-layer 1 --n-head 2 --n-embd 16 --block-size 16 --batch-size 2
             --eval-batches 1)
job=$(LOOM=$loom LOOM_OUT_DIR=$work/stopped LOOM_NET_IF=lo \
  timeout 30 sbatch --parsable --nodes=1 --ntasks-per-node=2 --cpus-per-task=1 --time=5 \
  --chdir="$src" --output="$stop_log" "$src/scripts/slurm/loom.sbatch" "${train_flags[@]}" --steps 1000000)
trained_steps() { grep -c '"kind":"train"' "$work/stopped/metrics.jsonl" 2>/dev/null || true; }
for _ in $(seq 600); do [ "$(trained_steps)" -ge 5 ] && break; sleep 0.1; done
[ "$(trained_steps)" -ge 5 ] || fail_with_logs "job $job logged no 5 steps within 60 s" "$stop_log"
timeout 10 scancel --signal=USR1 "$job"
for _ in $(seq 600); do [ -z "$(timeout 5 squeue -h -j "$job" -o %i 2>/dev/null)" ] && break; sleep 0.1; done
echo "---- job log $stop_log"
cat "$stop_log" || true
echo "----"
stopped_at=$(sed -n 's/.*stopped by SIGUSR1 after step \([0-9]*\) of 1000000: saved.*/\1/p' "$stop_log")
[ -n "$stopped_at" ] || fail "job $job: no 'stopped by SIGUSR1 after step N' line"
grep -q "loom: stopped before the time limit with a checkpoint" "$stop_log" || fail "the script did not say how to continue"
[ -s "$work/stopped/report.html" ] || fail "the script wrote no report after the stop"
continued=$((stopped_at + 2))
LOOM=$loom LOOM_OUT_DIR=$work/stopped LOOM_NET_IF=lo \
  timeout 180 sbatch --wait --nodes=1 --ntasks-per-node=2 --cpus-per-task=1 --time=5 \
  --chdir="$src" --output="$work/continued.log" "$src/scripts/slurm/loom.sbatch" "${train_flags[@]}" --steps "$continued" ||
  fail_with_logs "the continued job failed" "$work/continued.log"
grep -q "resumed from .* at step $stopped_at" "$work/continued.log" || fail_with_logs "the continued job did not resume at step $stopped_at" "$work/continued.log"
grep -Eq "step +$continued/$continued \|" "$work/continued.log" || fail_with_logs "the continued job did not reach step $continued" "$work/continued.log"
echo "stopped by SIGUSR1 after step $stopped_at, resumed there and trained to step $continued"
echo "slurm sbatch: PASSED"
