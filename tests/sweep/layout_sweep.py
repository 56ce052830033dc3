#!/usr/bin/env python3
"""Random layouts, drawn from a seed the way users combine options, each run under
`mpirun loom verify` and classified.

The equivalence tables hold chosen rows; this draws the combinations between them: a rank
count of 1 to --max-ranks (odd ones too) factored into dp x pp x cp x tp (or a 3D grid x dp x pp x cp),
ZeRO 0-3 and HSDP, sequence parallelism, each pipeline schedule, pp_layers, recompute, bf16,
bf16 gradient reductions, the all-reduce algorithms and bucket sizes, mixtures of experts over
ep, hidden and attention dropout, selective recompute, cp's splits, SGD, free-running, an emulated link, tiny shapes that sometimes do not
divide, and Plexus's GCN on a grid. Most draws keep the constraints the docs state (so they
run); a share ignores them (so the refusals are seen).

Each case ends as one of:
  PASS      verify: equivalent to the serial run
  REFUSED   non-zero exit with `loom: error...` naming the problem (read the message: a
            refusal of what the docs say works is a bug)
  MISMATCH  verify ran and reported a difference past its tolerances
  CRASH     a signal, an abort, an MPI error, or an exit without loom's message
  HANG      past --timeout, or the watchdog ended the job (re-run to tell a slow machine)
  EXPECTED  a bf16 mismatch (bf16 compute or gradients reduced in bf16) docs/verify.md
            documents (what loom verify allows): free-running
            runs drift, a mixture of experts whose router's ranking matters (top-k < E, or a
            capacity that drops) can flip a near-tie, a GCN on a grid rounds other products
            than the serial GCN, a width (n_embd) below 8 leaves sums that cancel; the same
            layout is run again re-anchored, then in fp32, and must pass

Usage: python3 tests/sweep/layout_sweep.py [--seed S] [--cases N] [--max-ranks R]
       [--timeout SECONDS] [--steps N] [--loom build/loom] [--mpirun mpirun] [--only I,J]
       [--show-output] [--list]
A case is reproduced by its seed and index (--seed S --only I) or by the command printed.
Exit status: 0 when no case is MISMATCH, CRASH or HANG.
"""
import argparse
import os
import random
import re
import shlex
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1", "OMPI_MCA_mpi_yield_when_idle": "1",
       "OMP_NUM_THREADS": "1"}
CLASSES = ["PASS", "REFUSED", "EXPECTED", "MISMATCH", "CRASH", "HANG"]
BUGS = {"MISMATCH", "CRASH", "HANG"}


def factorizations(n, parts):
    """Every ordered way of writing n as a product of `parts` factors."""
    if parts == 1:
        return [[n]]
    return [[d] + rest for d in range(1, n + 1) if n % d == 0 for rest in factorizations(n // d, parts - 1)]


def divisors(n):
    return [d for d in range(1, n + 1) if n % d == 0]


def composition(rng, total, parts):
    """`total` split into `parts` positive integers at random."""
    cuts = sorted(rng.sample(range(1, total), parts - 1))
    return [b - a for a, b in zip([0] + cuts, cuts + [total])]


def draw_gcn(rng, ranks):
    args = ["--model", "gcn", "--data", os.path.join(ROOT, "data", "cora"),
            "--gcn-layers", str(rng.choice([1, 2, 2, 3])), "--gcn-hidden", str(rng.choice([8, 12, 16]))]
    if ranks > 1 or rng.random() < 0.5:
        args += ["--tp-3d", ",".join(map(str, rng.choice(factorizations(ranks, 3))))]
        if rng.random() < 0.3:
            args += ["--graph-aggregation-chunks", str(rng.randint(2, 4))]
        if rng.random() < 0.3:
            args += ["--tp-3d-overlap", "off"]
    if rng.random() < 0.3:
        args += ["--precision", "bf16"]
    return args


def draw_gpt(rng, ranks, strict):
    """One GPT layout over `ranks` ranks; `strict` keeps the constraints the docs state."""
    a = {}
    flags = []
    grid = None
    if rng.random() < 0.2:
        # A grid, with dp, pp (a pipeline of grids) and cp (ring attention around grids).
        dp, pp, cp, grid_ranks = rng.choice(factorizations(ranks, 4))
        grid = rng.choice(factorizations(grid_ranks, 3))
        tp = 1
    else:
        dp, pp, cp, tp = rng.choice(factorizations(ranks, 4))
    chunks = 1
    schedule = None
    if pp > 1:
        schedule = rng.choice(["1f1b", "gpipe", "interleaved"])
        if schedule == "interleaved":
            chunks = rng.choice([2, 2, 3])
    # Shapes: heads of a width that tp (or the grid's rows) usually divides.
    split_heads = tp * (grid[0] if grid else 1)
    n_head = rng.choice([1, 2, 3, 4, 6])
    if strict and n_head % split_heads:
        n_head = split_heads * rng.choice([1, 2])
    head_dim = rng.choice([4, 6, 8])
    n_embd = n_head * head_dim
    block = rng.choice([8, 12, 16, 24, 32])
    if strict:
        unit = 2 * cp * (tp if cp > 1 else 1)
        while block % unit or (tp > 1 and block % tp):
            block += 1
    n_layer = rng.choice([1, 2, 3, 4])
    if strict:
        n_layer = max(n_layer, pp * chunks)
    micro_batches = rng.randint(1, 4)
    if strict and schedule == "interleaved" and micro_batches % pp:
        micro_batches = pp * rng.choice([1, 2])
    a.update({"--n-layer": n_layer, "--n-head": n_head, "--n-embd": n_embd, "--block-size": block,
              "--batch-size": rng.randint(1, 3), "--micro-batches": micro_batches})
    for k, v in (("--dp", dp), ("--pp", pp), ("--cp", cp), ("--tp", tp)):
        if v > 1:
            a[k] = v
    if grid:
        a["--tp-3d"] = ",".join(map(str, grid))
        if rng.random() < 0.3:
            a["--tp-3d-overlap"] = "off"
    if schedule:
        a["--schedule"] = schedule
        if chunks > 1:
            a["--chunks"] = chunks
        if rng.random() < 0.3 and n_layer > pp * chunks:
            a["--pp-layers"] = ",".join(map(str, composition(rng, n_layer, pp * chunks)))
    zero_choices = [0, 1, 2, 3]
    zero = rng.choice(zero_choices if dp > 1 else [0, 0] + zero_choices)
    if zero:
        a["--zero"] = zero
        if zero == 3 and rng.random() < 0.3:
            a["--zero3-reshard"] = "step"
        if dp >= 2 and rng.random() < 0.4:
            a["--hsdp-shard"] = rng.choice([d for d in divisors(dp) if 1 < d < dp] or [1, dp])
    if tp > 1 and rng.random() < 0.5:
        flags.append("--sequence-parallel")
    if tp > 1 and rng.random() < 0.2:
        a["--tp-overlap"] = "off"
    if cp > 1 and rng.random() < 0.4:
        a["--cp-split"] = "contiguous"
    if rng.random() < 0.25:
        flags.append("--recompute")
    if rng.random() < 0.25:
        a["--precision"] = "bf16"
    if dp > 1 and rng.random() < 0.2:
        a["--grad-reduce-dtype"] = "bf16"
    elif dp > 1 and rng.random() < 0.3:
        a["--allreduce"] = rng.choice(["ring", "tree", "rhd", "param-server"] if not zero else ["ring"])
    if rng.random() < 0.35:  # on a grid shared out over its plane, or whole where it does not divide them
        E = rng.choice([2, 3, 4, 6, 8])
        a["--moe-experts"] = E
        a["--moe-top-k"] = rng.randint(1, min(E, 3))
        if n_layer > 1 and rng.random() < 0.3:
            a["--moe-every"] = 2
        a["--moe-capacity-factor"] = rng.choice([0, 0, 0.5, 1, 1.25, 2])
        # On a grid the plane's block of the experts is split over ep: row x col x ep divides E.
        plane = grid[0] * grid[1] if grid else 1
        eps = [e for e in divisors(dp) if E % (plane * e) == 0 and e > 1]
        if eps and rng.random() < 0.75:
            a["--ep"] = rng.choice(eps)
    if rng.random() < 0.15:
        a["--grad-clip"] = 0
    if rng.random() < 0.1:
        a["--optimizer"] = "sgd"
    if dp > 1 and rng.random() < 0.15:
        a["--bucket-mb"] = rng.choice([0.0001, 0.001, 0.01])  # many buckets, some splitting a tensor
    if rng.random() < 0.1:
        a["--tokenizer"] = "byte"
    elif rng.random() < 0.1:
        a["--padded-vocab-size"] = rng.choice([65, 66, 96, 100, 130])
    if not strict and rng.random() < 0.3:
        a["--n-embd"] = n_embd + rng.choice([1, 2, 4])
    if ranks > 1 and rng.random() < 0.1:
        a["--net-gbps"] = rng.choice([5, 20])  # an emulated link: collectives finish later, in other orders
    if rng.random() < 0.1:
        flags.append("--no-reanchor")
    if rng.random() < 0.2:  # drawn last so the draws above stay those of earlier versions of this sweep
        a["--hidden-dropout"] = rng.choice([0.1, 0.3])
    # Attention dropout in one case in five, drawn from the case's own draws rather than from
    # rng, so every case a seed drew before stays as it was.
    if random.Random(repr(sorted(a.items())) + repr(flags)).random() < 0.2:
        a["--attention-dropout"] = 0.2
    if random.Random("selective " + repr(sorted(a.items())) + repr(flags)).random() < 0.15:
        flags.append("--selective-recompute")
    args = []
    for k, v in a.items():
        args += [k, str(v)]
    return args + flags


def draw(rng, max_ranks):
    ranks = rng.randint(1, max_ranks)
    if rng.random() < 0.1:
        return ranks, draw_gcn(rng, ranks)
    args = ["--data", os.path.join(ROOT, "data", "tinyshakespeare.txt")]
    return ranks, args + draw_gpt(rng, ranks, strict=rng.random() < 0.85)


def classify(rc, out, timed_out):
    if timed_out or "loom: aborting the job" in out:  # the watchdog's report of a wait past comm_timeout
        return "HANG"
    if rc == 0 and "verify: equivalent to the serial run" in out:
        return "PASS"
    if "verify: NOT equivalent" in out:
        return "MISMATCH"
    if rc < 0 or re.search(r"signal|Segmentation|Aborted|core dumped|terminate called|MPI_ERR|Assertion|double free|"
                           r"corrupted", out):
        return "CRASH"
    if rc != 0 and "loom: error" in out:
        return "REFUSED"
    return "CRASH"  # an exit without loom's message


def option(args, name, default=None):
    return args[args.index(name) + 1] if name in args else default


def router_ranks_matter(args, experts):
    """Whether a near-tie in the router's ranking can change what the experts compute: a choice
    of experts (top-k < E), or a capacity that drops (0 < f < E / K: first choices take capacity
    before second ones, so with top-k = E the ranking still decides which assignments stay;
    seed 63, case 15: ZeRO-2's bf16 gathers flipped one at step 2, dropless and fp32 passed)."""
    top_k = int(option(args, "--moe-top-k", 2))
    capacity = float(option(args, "--moe-capacity-factor", 0))
    return top_k < experts or 0 < capacity * top_k < experts


def documented_twin(args):
    """For a bf16 mismatch docs/verify.md documents (what loom verify allows), the run that must
    pass instead: a free-running run drifts (re-anchored, the tolerances hold); a router whose
    ranking matters (router_ranks_matter) can flip a near-tie, a GCN's grid rounds other products than the serial
    GCN, and a width below 8 leaves sums that cancel past bf16's tolerances (in fp32, none).
    Gradients reduced in bf16 (--grad-reduce-dtype bf16) round as bf16 compute does, in either
    precision: a free-running fp32 run with them and a capacity-limited router once flipped a
    near-tie at step 2 (seed 46, case 1), and passed re-anchored or with fp32 reductions."""
    bf16 = [k for k in ("--precision", "--grad-reduce-dtype") if option(args, k) == "bf16"]
    if not bf16:
        return None
    if "--no-reanchor" in args:
        return [a for a in args if a != "--no-reanchor"]
    experts = int(option(args, "--moe-experts", 0))
    if (option(args, "--model") == "gcn" or (experts > 0 and router_ranks_matter(args, experts))
            or int(option(args, "--n-embd", 32)) < 8):
        out = list(args)
        for k in bf16:
            i = out.index(k)
            out = out[:i] + out[i + 2:]
        return out
    return None


def message(out, cls):
    """The line that says the most about a case's end."""
    lines = out.splitlines()
    if cls == "MISMATCH":
        bad = [l for l in lines if "past tolerance" in l]
        # The step's worst of each kind, without the values themselves.
        short = re.sub(r" [-0-9.]+ vs serial [-0-9.]+| *<-- past tolerance|\| \d+ parameter element.*", "", bad[0]) if bad else ""
        return short or "NOT equivalent"
    for pattern in (r"loom: error.*", r".*(signal|Segmentation|Aborted|terminate called|aborting the job|MPI_ERR).*"):
        for l in lines:
            m = re.search(pattern, l)
            if m:
                return m.group(0)
    return lines[-1] if lines else ""


def run_case(mpirun, loom, ranks, args, timeout, steps):
    cmd = [mpirun, "--oversubscribe", "--bind-to", "none", "-np", str(ranks), loom, "verify", *args,
           "--steps", str(steps), "--comm-timeout", str(max(10, timeout // 2))]
    env = dict(os.environ, **ENV)
    start = time.time()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, start_new_session=True,
                         text=True, errors="replace")
    try:
        out, _ = p.communicate(timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)  # mpirun and its ranks: the session this case started
        out, _ = p.communicate()
        timed_out = True
    return cmd, p.returncode, out, timed_out, time.time() - start


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--cases", type=int, default=40)
    ap.add_argument("--max-ranks", type=int, default=4)
    ap.add_argument("--timeout", type=int, default=120, help="seconds a case may run before it counts as a hang")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--loom", default=os.path.join(ROOT, "build", "loom"))
    ap.add_argument("--mpirun", default="mpirun")
    ap.add_argument("--only", default="", help="comma-separated case indices to run (of the seed's draws)")
    ap.add_argument("--show-output", action="store_true", help="print every non-PASS case's whole output")
    ap.add_argument("--list", action="store_true", help="print the seed's cases without running them")
    opt = ap.parse_args()
    if not os.access(opt.loom, os.X_OK):
        sys.exit(f"layout_sweep: {opt.loom} is not an executable loom: build it or pass --loom")
    rng = random.Random(opt.seed)
    draws = [draw(rng, opt.max_ranks) for _ in range(opt.cases)]
    only = {int(i) for i in opt.only.split(",") if i} if opt.only else set(range(opt.cases))
    if opt.list:
        for i in sorted(only):
            print(f"{i:>4}  np {draws[i][0]}  {' '.join(draws[i][1])}")
        return 0
    counts = {c: 0 for c in CLASSES}
    bugs = []
    print(f"{'case':>4}  {'np':>2}  {'class':<8} {'s':>5}  layout / message")
    for i, (ranks, args) in enumerate(draws):
        if i not in only:
            continue
        cmd, rc, out, timed_out, secs = run_case(opt.mpirun, opt.loom, ranks, args, opt.timeout, opt.steps)
        cls = classify(rc, out, timed_out)
        note = message(out, cls)
        run, twin, twinned = args, (documented_twin(args) if cls == "MISMATCH" else None), False
        while twin:  # the documented difference's twin, and its own (re-anchored, then fp32)
            dropped = [a for a in run if a not in twin]
            cmd, rc, out, timed_out, more = run_case(opt.mpirun, opt.loom, ranks, twin, opt.timeout, opt.steps)
            secs += more
            cls, twinned = classify(rc, out, timed_out), True
            note += f"; without {' '.join(dropped)}: {cls}" + ("" if cls == "PASS" else " " + message(out, cls))
            run, twin = twin, (documented_twin(twin) if cls == "MISMATCH" else None)
        cls = "EXPECTED" if twinned and cls == "PASS" else cls
        counts[cls] += 1
        shown = " ".join(a for a in args if "/data/" not in a and not a.startswith("--data"))
        print(f"{i:>4}  {ranks:>2}  {cls:<8} {secs:5.1f}  {shown}", flush=True)
        if cls != "PASS":
            print(f"{'':>24}{note[:400]}", flush=True)
        if cls in BUGS:
            bugs.append((i, " ".join(shlex.quote(c) for c in cmd)))
        if opt.show_output and cls != "PASS":
            print(out)
    print("\nsummary: " + ", ".join(f"{c} {counts[c]}" for c in CLASSES) + f" (seed {opt.seed}, {len(only)} cases)")
    for i, cmd in bugs:
        print(f"case {i}: {cmd}")
    return 1 if bugs else 0


if __name__ == "__main__":
    sys.exit(main())
