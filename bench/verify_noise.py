#!/usr/bin/env python3
"""How far correct layouts differ from the serial run under `loom verify`: the noise its
default tolerances sit above (apps/verify_command.cpp).

Runs `loom verify` on a table of layouts on 1-8 ranks (dp with ZeRO 0-3 and each all-reduce,
tp 2-4 with and without sequence parallelism, pp 2-4 in each schedule, cp 2-4, 3D grids,
mixtures of experts over ep, mixes), a few steps each, with tolerances loose enough that
nothing is judged, and prints per layout and per precision the worst relative difference
of the loss, the gradient norm, the gradients (step 1, at the same parameters, and later
steps), the parameters past the AdamW bound and, re-anchored (the default), the optimizer
moments past theirs (a free-running `--no-reanchor` run shows 0 there). The bound is derived from --grad-rtol, so
it is passed the gradient tolerance under study (the default's, unless --grad-rtol-fp32 /
--grad-rtol-bf16 say otherwise). Extra arguments after `--` go to every run (`-- --no-reanchor`).

    python3 bench/verify_noise.py --loom build/loom [--precisions fp32,bf16] [--only tp4]

The whole table (51 layouts, fp32 and bf16) took 689 s on 2 shared cores on 2026-11-29; its
worst values are the ones apps/verify_command.cpp and docs/verify.md cite.
"""
import argparse
import os
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "data", "tinyshakespeare.txt")

# (name, ranks, flags). {moe} expands to the routing: top-2 of 4 experts in fp32; in bf16
# top-4 of 4, since a top-k < E router flips a token's expert at a near-tie under bf16
# (docs/mixed-precision.md: such a flip is a 0.1-0.2 difference at that token, not noise of a layout).
MOE = "--n-layer 2 --moe-experts 4 --moe-top-k {k} --batch-size 1"
LAYOUTS = [
    ("dp2", 2, "--dp 2"),
    ("dp2_zero1", 2, "--dp 2 --zero 1"),
    ("dp2_zero2", 2, "--dp 2 --zero 2"),
    ("dp2_zero3", 2, "--dp 2 --zero 3"),
    ("dp4", 4, "--dp 4"),
    ("dp4_zero1", 4, "--dp 4 --zero 1"),
    ("dp4_zero2", 4, "--dp 4 --zero 2"),
    ("dp4_zero3", 4, "--dp 4 --zero 3"),
    ("dp4_hsdp2_zero3", 4, "--dp 4 --zero 3 --hsdp-shard 2"),
    ("dp8", 8, "--dp 8 --batch-size 1"),
    ("dp2_ring", 2, "--dp 2 --allreduce ring"),
    ("dp4_ring", 4, "--dp 4 --allreduce ring"),
    ("dp4_tree", 4, "--dp 4 --allreduce tree"),
    ("dp4_rhd", 4, "--dp 4 --allreduce rhd"),
    ("dp4_param_server", 4, "--dp 4 --allreduce param-server"),
    ("dp4_zero2_ring", 4, "--dp 4 --zero 2 --allreduce ring"),
    ("tp2", 2, "--tp 2"),
    ("tp2_sp", 2, "--tp 2 --sequence-parallel"),
    ("tp4", 4, "--tp 4"),
    ("tp4_sp", 4, "--tp 4 --sequence-parallel"),
    ("tp4_6layers", 4, "--tp 4 --n-layer 6"),
    ("tp4_sp_overlap_off", 4, "--tp 4 --sequence-parallel --tp-overlap off"),
    ("pp2_1f1b", 2, "--pp 2"),
    ("pp2_gpipe", 2, "--pp 2 --schedule gpipe"),
    ("pp2_interleaved", 2, "--pp 2 --schedule interleaved --chunks 2"),
    ("pp4_1f1b", 4, "--pp 4"),
    ("pp4_gpipe", 4, "--pp 4 --schedule gpipe"),
    ("pp4_interleaved", 4, "--pp 4 --schedule interleaved --chunks 2"),
    ("pp2_recompute", 2, "--pp 2 --recompute"),
    ("cp2", 2, "--cp 2"),
    ("cp4", 4, "--cp 4"),
    ("cp2_contiguous", 2, "--cp 2 --cp-split contiguous"),
    ("cp2_tp2_sp", 4, "--cp 2 --tp 2 --sequence-parallel"),
    ("cp2_dp2_zero2", 4, "--cp 2 --dp 2 --zero 2"),
    ("tp3d_2x1x2", 4, "--tp-3d 2,1,2 --n-layer 1 --batch-size 1"),
    ("tp3d_1x2x2", 4, "--tp-3d 1,2,2 --n-layer 1 --batch-size 1"),
    ("tp3d_2x2x2", 8, "--tp-3d 2,2,2 --n-layer 1 --batch-size 1"),
    ("moe_dp2_ep2", 2, "--dp 2 --ep 2 " + MOE),
    ("moe_dp4_ep4", 4, "--dp 4 --ep 4 " + MOE),
    ("moe_dp4_ep2_zero1", 4, "--dp 4 --ep 2 --zero 1 " + MOE),
    ("moe_dp2_ep2_zero3", 2, "--dp 2 --ep 2 --zero 3 " + MOE),
    ("moe_dp2_ep2_tp2", 4, "--dp 2 --ep 2 --tp 2 " + MOE),
    ("moe_dp2_ep2_pp2", 4, "--dp 2 --ep 2 --pp 2 " + MOE),
    ("moe_cp2_ep2_dp2", 4, "--cp 2 --dp 2 --ep 2 " + MOE),
    ("dp2_pp2_tp2", 8, "--dp 2 --pp 2 --tp 2"),
    ("dp2_tp2_sp_zero1", 4, "--dp 2 --tp 2 --sequence-parallel --zero 1"),
    ("dp2_pp2_zero1", 4, "--dp 2 --pp 2 --zero 1"),
    ("pp2_tp2_sp", 4, "--pp 2 --tp 2 --sequence-parallel"),
    ("pp2_tp2_interleaved", 4, "--pp 2 --tp 2 --schedule interleaved --chunks 2"),
    ("dp2_cp2_tp2", 8, "--dp 2 --cp 2 --tp 2 --sequence-parallel"),
    ("pp2_cp2_dp2_zero1", 8, "--pp 2 --cp 2 --dp 2 --zero 1"),
]

STEP = re.compile(
    r"step +(\d+) \| loss \S+ vs serial \S+ \(rel (\S+)\) \| worst gradient (\S+) \(rel (\S+)\) \| "
    r"worst parameter (\S+) \(rel (\S+)\) \| norm \S+ vs serial \S+ \(rel (\S+)\)"
    r"(?: \| worst moment (\S+) \(rel (\S+)\))?")
COLUMNS = ["loss", "norm", "grad_step1", "grad_later", "param_past_bound", "moment_past_bound"]
DEFAULT_GRAD_RTOL = {"fp32": "1e-4", "bf16": "6e-2"}


def run(loom, ranks, flags, precision, grad_rtol, steps, extra):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_mpi_yield_when_idle="1", OMP_NUM_THREADS="1")
    cmd = ["mpirun", "--oversubscribe", "--bind-to", "none", "-np", str(ranks), loom, "verify", "--data", DATA,
           "--precision", precision, "--steps", str(steps), "--grad-rtol", grad_rtol, "--loss-rtol", "1",
           "--param-rtol", "1", "--norm-rtol", "1"] + flags.split() + extra
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    worst = dict.fromkeys(COLUMNS, 0.0)
    names = {}
    steps_seen = 0
    for m in STEP.finditer(out.stdout):
        steps_seen += 1
        step = int(m.group(1))
        values = {"loss": float(m.group(2)), "norm": float(m.group(7)), "param_past_bound": float(m.group(6)),
                  "grad_step1" if step == 1 else "grad_later": float(m.group(4)),
                  "moment_past_bound": float(m.group(9) or 0)}
        for k, v in values.items():
            if v > worst[k]:
                worst[k] = v
                names[k] = m.group(3) if k.startswith("grad") else m.group(5) if k == "param_past_bound" else ""
    if steps_seen != steps:
        sys.stderr.write(f"{' '.join(cmd)}\n{out.stdout[-2000:]}{out.stderr[-2000:]}\n")
        return None, names
    return worst, names


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--loom", default=os.path.join(ROOT, "build", "loom"))
    ap.add_argument("--precisions", default="fp32,bf16")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--only", default="", help="comma-separated substrings of layout names")
    ap.add_argument("--grad-rtol-fp32", default=DEFAULT_GRAD_RTOL["fp32"])
    ap.add_argument("--grad-rtol-bf16", default=DEFAULT_GRAD_RTOL["bf16"])
    ap.add_argument("extra", nargs="*", help="after --: flags for every run")
    a = ap.parse_args()
    rtol = {"fp32": a.grad_rtol_fp32, "bf16": a.grad_rtol_bf16}
    layouts = [l for l in LAYOUTS if not a.only or any(s in l[0] for s in a.only.split(","))]
    start = time.time()
    for precision in a.precisions.split(","):
        print(f"\n{precision} (grad-rtol {rtol[precision]} for the AdamW bound, {a.steps} steps{', ' + ' '.join(a.extra) if a.extra else ''})")
        print(f"{'layout':<22} {'ranks':>5} " + " ".join(f"{c:>16}" for c in COLUMNS) + "  worst gradient tensor")
        overall = dict.fromkeys(COLUMNS, (0.0, ""))
        for name, ranks, flags in layouts:
            flags = flags.replace("{k}", "2" if precision == "fp32" else "4")
            worst, names = run(a.loom, ranks, flags, precision, rtol[precision], a.steps, a.extra)
            if worst is None:
                print(f"{name:<22} {ranks:>5}  FAILED (stderr above)", flush=True)
                continue
            for c in COLUMNS:
                if worst[c] > overall[c][0]:
                    overall[c] = (worst[c], name)
            g = "grad_later" if worst["grad_later"] > worst["grad_step1"] else "grad_step1"
            print(f"{name:<22} {ranks:>5} " + " ".join(f"{worst[c]:>16.1e}" for c in COLUMNS) + f"  {names.get(g, '')}",
                  flush=True)
        print(f"{'worst':<22} {'':>5} " + " ".join(f"{overall[c][0]:>16.1e}" for c in COLUMNS))
        print(f"{'  in':<22} {'':>5} " + " ".join(f"{overall[c][1]:>16}" for c in COLUMNS))
    print(f"\n{len(layouts)} layouts, {time.time() - start:.0f} s")


if __name__ == "__main__":
    main()
