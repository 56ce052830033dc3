#!/usr/bin/python3
"""Resume sweep: from a seed, draw pairs of layouts (A, B) the way users change them between
runs (fewer ranks, another precision, tp -> pp, ZeRO-3 -> DDP, ep 2 -> ep 1, cp -> serial,
one 3D grid -> another, a GCN on a grid; a GPT's context 16, or 128 in one pair in five), and for each pair
  (a) the reference: the uninterrupted serial run of S1 + S2 steps (the same layout as A and
      B: the uninterrupted run under A; A and B in other precisions: S1 serial steps in A's,
      resumed serially for S2 in B's),
  (b) S1 steps under A, ending in a checkpoint,
  (c) a resume under B for S2 more steps (`--resume latest` in the same run directory, or
      `--resume <run dir | checkpoint>` into a new one),
and compares (c)'s losses (metrics.jsonl) and final tensors (its last checkpoint converted to
one file by `loom convert`) with (a)'s. Some pairs also resume into a different model first
(width, layers, vocabulary, experts; a GCN's hidden width or layers), which must exit 1
naming the difference and leave the run directory as it was.

Each pair is classed
  EXACT     the same layout: every loss and every tensor (optimizer state too) bit for bit
  MATCH     another layout: within the layout equivalence tests' tolerances (below); a loss past
            them (a loss, a parameter element) passes, noted, when the uninterrupted runs under
            A and B stray at least half as far together (the layouts' own rounding: SGD's larger steps in bf16 reach it;
            across precisions, B from the reference's own checkpoint of step S1)
  REFUSED   the resume stopped with a message (printed: judge it against docs/checkpoints.md)
  MISMATCH  a loss or tensor past its tolerance, a file lost or overwritten, a wrong refusal
  CRASH     a run that should have worked failed
  HANG      a run passed --timeout twice (re-run once to confirm)
  SKIPPED   layout A itself was refused at start (no resume was tried)

Tolerances (tests/parallel/equivalence.hpp, tests/parallel/test_reshard.cpp,
tests/parallel/test_graph_3d.cpp): fp32 losses relative 1e-5, parameters 1e-4 of each
tensor's largest magnitude (a mixture of experts: 1e-3, its per-expert sums reduced over other
ranks under each ep; the key third of a QKV bias, whose true gradient is zero, AdamW's drift
2 x steps x lr); any bf16 in the pair: losses 1e-4, parameters 1e-1 of the scale plus that
drift (the most AdamW's bound can allow an element, 2 lr a step). Same layout: bit-exact.
A token table whose padding differs between A and B (padded_vocab_size 0 resolves to a multiple
of 64 x tp) is re-padded on loading: where the two tables' rows differ, its vocabulary rows are
compared and the padding rows (read by nothing) are not.

usage: resume_sweep.py --loom build/loom [--seed N] [--pairs K] [--max-ranks R] [--timeout S]
"""
import argparse
import hashlib
import json
import math
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TEXT = os.path.join(ROOT, "data", "tinyshakespeare.txt")
CORA = os.path.join(ROOT, "data", "cora")
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1", "OMPI_MCA_mpi_yield_when_idle": "1",
           "OMP_NUM_THREADS": "1"}
MPIRUN = ["mpirun", "--oversubscribe", "--bind-to", "none"]
S1, S2 = 3, 3
N_HEAD, BLOCK, EXPERTS = 4, 16, 4
LONG_BLOCK = 128  # a multiple of BLOCK: every split drawn for BLOCK divides it too


# ----------------------------------------------------------------------------- layouts

def divisors(n, limit=None):
    return [d for d in range(1, n + 1) if n % d == 0 and (limit is None or d <= limit)]


def draw_gpt(rng, ranks, moe, n_layer):
    """A GPT layout at `ranks` ranks (each choice one the config accepts)."""
    lay = {"ranks": ranks, "precision": rng.choice(["fp32", "fp32", "bf16"]),
           "format": rng.choice(["auto"] * 4 + ["single", "sharded"]), "recompute": rng.random() < 0.25}
    # A mixture of experts decides on a grid from the layout's first draws instead of from rng,
    # so a dense pair and an MoE pair that stays 1D draw what earlier versions drew.
    on_grid = (rng.random() < 0.25 if not moe else
               random.Random(repr((ranks, n_layer, sorted(lay.items())))).random() < 0.25) if ranks > 1 else False
    if on_grid:
        # A 3D grid R,C,D per pipeline stage and sequence chunk of a data-parallel replica:
        # heads split over R (a mixture of experts shares its experts out over R x C).
        options = [(dp, pp, cp, r, c, d) for dp in divisors(ranks) for pp in divisors(ranks, n_layer)
                   for cp in divisors(ranks) if BLOCK % (2 * cp) == 0
                   for r in divisors(N_HEAD) for c in divisors(ranks) for d in divisors(ranks)
                   if dp * pp * cp * r * c * d == ranks and r * c * d > 1]
        dp, pp, cp, r, c, d = rng.choice(options)
        lay.update(dp=dp, grid=(r, c, d), overlap3d=rng.choice(["on", "off"]), micro=rng.choice([1, 2]))
        if cp > 1:
            lay.update(cp=cp, cp_split=rng.choice(["zigzag", "contiguous"]))
        if pp > 1:
            lay.update(pp=pp, schedule=rng.choice(["1f1b", "gpipe"]), micro=rng.choice([pp, 2 * pp]))
        if dp > 1:  # ZeRO over the grids' replicas (drawn last: the draws above stay as they were)
            lay["zero"] = rng.choice([0, 1, 2, 3])
        if moe and dp > 1:  # ep over the grids' replicas, each plane rank's block of the experts split over it
            lay["ep"] = rng.choice([e for e in divisors(math.gcd(dp, EXPERTS)) if EXPERTS % (r * c * e) == 0] or [1])
        return draw_reshard(lay)
    tp = rng.choice([t for t in divisors(ranks) if N_HEAD % t == 0])
    rest = ranks // tp
    cp = rng.choice([c for c in divisors(rest) if BLOCK % (2 * c) == 0] + [1, 1])
    rest //= cp
    pp = rng.choice([p for p in divisors(rest, n_layer)] + [1])
    dp = rest // pp
    lay.update(dp=dp, tp=tp, cp=cp, pp=pp)
    if cp > 1:
        lay["cp_split"] = rng.choice(["zigzag", "contiguous"])
    if tp > 1:
        lay["sp"] = (BLOCK // cp) % tp == 0 and rng.random() < 0.5
        lay["tp_overlap"] = rng.choice(["on", "off"])
    micro = rng.choice([1, 2, 4])
    if pp > 1:
        lay["schedule"] = rng.choice(["1f1b", "gpipe"] + (["interleaved"] if pp * 2 <= n_layer else []))
        if lay["schedule"] == "interleaved":
            lay["chunks"] = 2
            micro = rng.choice([pp, 2 * pp])
        elif rng.random() < 0.4:
            cuts = sorted(rng.sample(range(1, n_layer), pp - 1))
            lay["pp_layers"] = ",".join(str(b - a) for a, b in zip([0] + cuts, cuts + [n_layer]))
    lay["micro"] = micro
    lay["zero"] = rng.choice([0, 1, 2, 3]) if dp > 1 else 0
    shards = [d for d in divisors(dp) if 1 < d < dp]
    if lay["zero"] and shards and rng.random() < 0.5:
        lay["hsdp"] = rng.choice(shards)
    if moe:
        lay["ep"] = rng.choice(divisors(math.gcd(dp, EXPERTS)))
    return draw_reshard(lay)


def draw_reshard(lay):
    """ZeRO-3 keeping its units for the step in three layouts of ten, drawn from the layout itself so
    that rng's stream, and with it every other draw of a seed, stays as it was."""
    if lay.get("zero") == 3 and random.Random(repr(sorted(lay.items()))).random() < 0.3:
        lay["zero3_reshard"] = "step"
    return lay


def draw_gcn(rng, ranks):
    lay = {"ranks": ranks, "precision": rng.choice(["fp32", "fp32", "bf16"]), "micro": 1, "dp": 1,
           "format": rng.choice(["auto"] * 4 + ["single", "sharded"])}
    if ranks > 1:
        options = [(r, c, d) for r in divisors(ranks) for c in divisors(ranks) for d in divisors(ranks)
                   if r * c * d == ranks]
        lay["grid"] = rng.choice(options)
        lay["agg_chunks"] = rng.choice([1, 1, 2])
        lay["permute"] = rng.choice([True, False])
        lay["overlap3d"] = rng.choice(["on", "off"])
    return lay


def batch_shards(lay):
    return lay.get("dp", 1) * (lay["grid"][2] if "grid" in lay else 1)


def describe(lay):
    parts = []
    for key, name in (("dp", "dp"), ("pp", "pp"), ("tp", "tp"), ("cp", "cp"), ("ep", "ep")):
        if lay.get(key, 1) > 1:
            parts.append(f"{name}{lay[key]}")
    if lay.get("zero"):
        parts.append(f"z{lay['zero']}")
    if lay.get("hsdp"):
        parts.append(f"hsdp{lay['hsdp']}")
    if lay.get("zero3_reshard"):
        parts.append("reshard-" + lay["zero3_reshard"])
    if lay.get("sp"):
        parts.append("sp")
    if "grid" in lay:
        parts.append("3d" + "x".join(map(str, lay["grid"])))
    if lay.get("schedule") and lay.get("pp", 1) > 1:
        parts.append(lay["schedule"] + (f"/{lay['pp_layers']}" if lay.get("pp_layers") else ""))
    if lay.get("micro", 1) > 1:
        parts.append(f"m{lay['micro']}")
    if lay.get("recompute"):
        parts.append("rc")
    if lay["precision"] != "fp32":
        parts.append(lay["precision"])
    if lay["format"] != "auto":
        parts.append(lay["format"])
    if lay.get("every"):
        parts.append(f"every{lay['every']}")
    return " ".join(parts) or "serial"


def layout_args(lay, global_rows):
    a = []
    if "grid" in lay:
        a += ["--tp-3d", ",".join(map(str, lay["grid"])), "--tp-3d-overlap", lay.get("overlap3d", "on")]
    for key, flag in (("dp", "--dp"), ("pp", "--pp"), ("tp", "--tp"), ("cp", "--cp"), ("zero", "--zero"),
                      ("hsdp", "--hsdp-shard"), ("ep", "--ep"), ("chunks", "--chunks")):
        if lay.get(key):
            a += [flag, str(lay[key])]
    if lay.get("sp"):
        a.append("--sequence-parallel")
    for key, flag in (("tp_overlap", "--tp-overlap"), ("cp_split", "--cp-split"), ("schedule", "--schedule"),
                      ("pp_layers", "--pp-layers"), ("zero3_reshard", "--zero3-reshard")):
        if lay.get(key):
            a += [flag, lay[key]]
    if lay.get("recompute"):
        a.append("--recompute")
    if lay.get("agg_chunks", 1) > 1:
        a += ["--graph-aggregation-chunks", str(lay["agg_chunks"])]
    if "permute" in lay:
        a += ["--graph-permute=" + ("true" if lay["permute"] else "false")]
    a += ["--precision", lay["precision"], "--checkpoint-format", lay["format"]]
    if global_rows:
        a += ["--batch-size", str(global_rows // (batch_shards(lay) * lay["micro"])), "--micro-batches", str(lay["micro"])]
    return a


# ----------------------------------------------------------------------------- models

def model_args(model):
    if model["family"] == "gcn":
        return ["--model", "gcn", "--data", CORA, "--gcn-hidden", str(model["hidden"]), "--gcn-layers",
                str(model["layers"]), "--lr", "1e-3", "--min-lr", "1e-4", "--weight-decay", "5e-4"]
    a = ["--data", TEXT, "--n-layer", str(model["n_layer"]), "--n-head", str(N_HEAD), "--n-embd", "16",
         "--block-size", str(model.get("block", BLOCK)), "--lr", "5e-4" if model["optimizer"] == "adamw" else "5e-2", "--min-lr", "1e-4", "--tokenizer", model["tokenizer"], "--optimizer", model["optimizer"],
         "--grad-clip", str(model["clip"])]
    if model["padded_vocab"]:
        a += ["--padded-vocab-size", str(model["padded_vocab"])]
    if model.get("dropout"):
        a += ["--hidden-dropout", str(model["dropout"])]
    if model.get("attention_dropout"):
        a += ["--attention-dropout", str(model["attention_dropout"])]
    if model.get("experts"):
        a += ["--moe-experts", str(model["experts"]), "--moe-top-k", str(model["top_k"]),
              "--moe-capacity-factor", str(model["capacity"]), "--moe-every", str(model["every"])]
    return a


def other_model(rng, model, lay_b):
    """(flags that change the model, the key the refusal must name)."""
    if model["family"] == "gcn":
        return rng.choice([(["--gcn-hidden", "9"], "gcn_hidden"), (["--gcn-layers", str(model["layers"] + 1)], "gcn_layers"),
                           (["--gcn-dropout", "0.3"], "gcn_dropout"), (["--split", "0:100,200:500,500:1500"], "split")])
    other = "sgd" if model["optimizer"] == "adamw" else "adamw"
    options = [(["--optimizer", other], "optimizer"),(["--n-embd", "32"], "n_embd"),
               (["--tokenizer", "byte" if model["tokenizer"] == "char" else "char"], "tokenizer")]
    if lay_b.get("pp", 1) == 1:
        options.append((["--n-layer", "2"], "n_layer"))
    if lay_b.get("cp", 1) == 1:
        options.append((["--block-size", "8"], "block_size"))
    if lay_b.get("tp", 1) <= 2 and lay_b.get("grid", (1,))[0] <= 2:
        options.append((["--n-head", "2"], "n_head"))
    if model.get("experts"):
        options += [(["--moe-experts", "8", "--moe-top-k", "2"], "moe_experts"),
                    (["--moe-top-k", "3"], "moe_top_k"), (["--moe-capacity-factor", "0.5"], "moe_capacity_factor"),
                    (["--moe-every", "3"], "moe_every"), (["--moe-aux-loss-coef", "0.1"], "moe_aux_loss_coef")]
    else:
        options.append((["--moe-experts", "4"], "moe_experts"))
    return rng.choice(options)


# ----------------------------------------------------------------------------- runs

class Hang(Exception):
    pass


def launch(loom, ranks, args, timeout, log):
    """(exit status, output) of `loom args` on `ranks` ranks; a timeout raises Hang."""
    cmd = [loom, *args] if ranks == 1 else [*MPIRUN, "-np", str(ranks), loom, *args]
    env = dict(os.environ, **MPI_ENV)
    with open(log, "a") as f:
        f.write("$ " + " ".join(cmd) + "\n")
    t0 = time.time()
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, timeout=timeout,
                           start_new_session=True)
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        with open(log, "a") as f:
            f.write(out + f"\n[timeout after {timeout} s]\n")
        raise Hang(" ".join(cmd))
    with open(log, "a") as f:
        f.write(p.stdout + f"[exit {p.returncode} after {time.time() - t0:.1f} s]\n")
    return p.returncode, p.stdout


def run_twice_on_hang(loom, ranks, args, timeout, log, clean=None):
    try:
        return launch(loom, ranks, args, timeout, log)
    except Hang:
        if clean:
            clean()
        return launch(loom, ranks, args, timeout, log)  # a second timeout propagates: a hang


def convert_args(lay):
    """`loom convert`'s flags for layout lay (a degree not given is 1)."""
    a = []
    for key, flag in (("dp", "--dp"), ("pp", "--pp"), ("tp", "--tp"), ("cp", "--cp"), ("ep", "--ep"), ("zero", "--zero"),
                      ("chunks", "--chunks"), ("hsdp", "--hsdp-shard")):
        if lay.get(key, 1) > 1 or (key == "zero" and lay.get(key)):
            a += [flag, str(lay[key])]
    if "grid" in lay:
        a += ["--tp-3d", ",".join(map(str, lay["grid"]))]
    if lay.get("sp"):
        a.append("--sequence-parallel")
    return a


def train_args(model, lay, global_rows, steps, out_dir, extra=()):
    return ["train", *model_args(model), *layout_args(lay, global_rows), "--steps", str(steps), "--decay-steps",
            str(S1 + S2), "--warmup-steps", "2", "--eval-every", "0", "--eval-batches", "1", "--threads", "1",
            "--checkpoint-every", str(lay.get("every", 0)),
            "--peak-gflops", "100", "--log-every", "1", "--comm-timeout", "60", "--out-dir", out_dir, *extra]


def losses(out_dir):
    """{step: [loss, ...]} of the train records of a run directory's metrics.jsonl."""
    out = {}
    path = os.path.join(out_dir, "metrics.jsonl")
    if not os.path.exists(path):
        return out
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            if r.get("kind") == "train":
                out.setdefault(r["step"], []).append(r["loss"])
    return out


def read_safetensors(path):
    """{name: (dtype, shape, raw bytes)}: the layout read by hand (8-byte header length, JSON
    header, data), so the comparison trusts no code under test."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    data = blob[8 + n:]
    return {k: (v["dtype"], v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]])
            for k, v in header.items() if k != "__metadata__"}


def floats(entry):
    dtype, _, raw = entry
    assert dtype == "F32", dtype
    return struct.unpack(f"<{len(raw) // 4}f", raw)


def final_tensors(loom, run_dir, step, work, log):
    """The tensors of run_dir's checkpoint at step in one file (`loom convert` for a sharded one)."""
    single = os.path.join(run_dir, f"checkpoint-{step:08d}.safetensors")
    if not os.path.isfile(single):
        sharded = os.path.join(run_dir, f"checkpoint-{step:08d}")
        if not os.path.isdir(sharded):
            return None
        single = os.path.join(work, f"converted-{os.path.basename(run_dir)}-{step}.safetensors")
        status, out = launch(loom, 1, ["convert", "--from", sharded, "--to", single], 300, log)
        if status != 0:
            raise RuntimeError("loom convert failed: " + last_lines(out))
    return read_safetensors(single)


def snapshot(d):
    """{relative path: sha256 or link target} of everything under d."""
    out = {}
    for root, dirs, files in os.walk(d):
        for name in dirs + files:
            p = os.path.join(root, name)
            rel = os.path.relpath(p, d)
            if os.path.islink(p):
                out[rel] = "-> " + os.readlink(p)
            elif os.path.isfile(p):
                with open(p, "rb") as f:
                    out[rel] = hashlib.sha256(f.read()).hexdigest()
    return out


def last_lines(out, n=3):
    lines = [l for l in out.strip().splitlines() if l.strip() and "mpirun" not in l and "---" not in l
             and "MPI_ABORT" not in l and "NOTE:" not in l and "exit code" not in l.lower()]
    return " | ".join(lines[-n:])


def error_message(out):
    lines = out.splitlines()
    for l in lines:
        if "loom: error" in l or "holds a different" in l:
            return l.strip()
    for l in lines:
        if "error" in l.lower() and "errorcode" not in l:
            return l.strip()
    return last_lines(out)


# ----------------------------------------------------------------------------- comparison

def tolerances(model, lay_a, lay_b):
    bf16 = "bf16" in (lay_a["precision"], lay_b["precision"])
    lr = 1e-3 if model["family"] == "gcn" else 5e-4
    # AdamW's drift: an element whose gradient is noise moves up to 2 lr a step either way; SGD
    # moves it by lr times that noise, which the relative bound covers as for any element.
    adamw = model.get("optimizer", "adamw") == "adamw"
    drift = 2 * (S1 + S2) * lr if adamw else 0.0
    qkv_drift = drift if adamw else None
    if bf16:
        return {"loss": 1e-4, "param": 1e-1, "drift": drift, "qkv_drift": qkv_drift}
    return {"loss": 1e-5, "param": 1e-3 if model.get("experts") else 1e-4, "drift": 0.0, "qkv_drift": qkv_drift}


def vocabulary_rows(tensors, vocab, n_embd):
    """tensors with every token table (and its moments) cut to its vocabulary's rows."""
    out = dict(tensors)
    for name, (dtype, shape, raw) in tensors.items():
        if name.endswith("embedding.wte"):
            out[name] = (dtype, [vocab, shape[1]], raw[:vocab * n_embd * 4])
    return out


def compare(got, want, exact, tol, n_embd=16, noise=(), vocab=0):
    """'' when got's tensors match want's, else what differs first. noise: the final tensors of
    the uninterrupted runs (layout_noise): each element may also differ by twice their
    differences from want added. vocab: where the token tables' rows differ (re-padded), the
    tables of all are compared on their vocabulary's rows."""
    wte = "model.embedding.wte"
    if vocab and wte in got and wte in want and got[wte][1] != want[wte][1]:
        got, want = vocabulary_rows(got, vocab, n_embd), vocabulary_rows(want, vocab, n_embd)
        noise = [vocabulary_rows(n, vocab, n_embd) for n in noise]
    if sorted(got) != sorted(want):
        missing = sorted(set(want) - set(got))[:3]
        extra = sorted(set(got) - set(want))[:3]
        return f"tensor names differ: missing {missing}, extra {extra}"
    for name in sorted(want):
        if exact:
            if got[name] != want[name]:
                return f"{name} differs in its bits"
            continue
        if not name.startswith("model."):
            continue  # optimizer moments of near-zero gradients differ by rounding across layouts
        if got[name][1] != want[name][1]:
            return f"{name} shape {got[name][1]} vs {want[name][1]}"
        g, w = floats(got[name]), floats(want[name])
        strays = [floats(n[name]) for n in noise if name in n]
        key_third = name.endswith("attn.qkv.bias") and tol["qkv_drift"] is not None
        zero_grad = (lambda k: n_embd <= k < 2 * n_embd) if key_third else (lambda k: False)
        scale = max((abs(v) for k, v in enumerate(w) if not zero_grad(k)), default=0.0)
        for k, (x, y) in enumerate(zip(g, w)):
            allowed = tol["qkv_drift"] if zero_grad(k) else tol["param"] * scale + tol["drift"]
            allowed += 2 * sum(abs(n[k] - y) for n in strays)
            if not abs(x - y) <= allowed:
                return f"{name}[{k}] = {x:.7g}, reference {y:.7g} (off {abs(x - y):.3g} > {allowed:.3g})"
    return ""


# ----------------------------------------------------------------------------- pairs

def draw_pair(rng, max_ranks):
    kind = rng.random()
    family = "gcn" if kind < 0.18 else "gpt"
    moe = family == "gpt" and kind > 0.72
    model = {"family": family}
    if family == "gcn":
        # 7 hidden units: a grid pads the widths (ShardSpec::pad); 3 layers: a hidden layer's input too.
        model.update(hidden=rng.choice([16, 7]), layers=rng.choice([2, 2, 3]))
    if family == "gpt":
        model.update(n_layer=rng.choice([4, 4, 6]), optimizer=rng.choice(["adamw"] * 4 + ["sgd"]), tokenizer=rng.choice(["char"] * 4 + ["byte"]),
                     clip=rng.choice([1, 1, 0]))
        # One pair in three leaves padded_vocab_size to be resolved per tp: another tp then has
        # another token table, which the resume re-pads.
        model["padded_vocab"] = 0 if rng.random() < 1 / 3 else 256
        if moe:
            model.update(experts=EXPERTS, top_k=rng.choice([1, 2]), capacity=rng.choice([0, 0, 1.25]),
                         every=rng.choice([1, 2]))
        # Drawn last so the draws above stay those of earlier versions of this sweep.
        model["dropout"] = rng.choice([0, 0, 0, 0.1])
        # Attention dropout in one GPT pair in four, drawn from the pair's model rather than
        # from rng, so every pair a seed drew before stays as it was.
        model["attention_dropout"] = 0.1 if random.Random(repr(sorted(model.items()))).random() < 0.25 else 0

    def draw(ranks):
        return draw_gcn(rng, ranks) if family == "gcn" else draw_gpt(rng, ranks, moe, model["n_layer"])

    a = draw(rng.randint(1, max_ranks))
    if rng.random() < 0.15:
        b = dict(a)  # the same layout: bit for bit
    else:
        b = draw(rng.randint(1, max_ranks))
    if moe and "bf16" in (a["precision"], b["precision"]):
        # bf16 may flip a router's near-tie between layouts (docs/mixed-precision.md): top-k = E
        # leaves it no choice, so the pair stays within bf16's bounds.
        model["top_k"] = EXPERTS
    rows = 0
    if family == "gpt":
        rows = math.lcm(batch_shards(a) * a["micro"], batch_shards(b) * b["micro"])
        while rows < 4:
            rows *= 2
    mode = rng.choice(["latest", "latest", "auto", "run-dir", "checkpoint", "convert"])
    probe = rng.random() < 0.3
    a["every"] = rng.choice([0, 0, 1, 2])  # checkpoint_every of the first run (0: at its end)
    return model, a, b, rows, mode, probe


def model_name(model):
    if model["family"] == "gcn":
        return f"gcn-h{model['hidden']}-l{model['layers']}"
    name = "gpt" + ("" if model["n_layer"] == 4 else f"{model['n_layer']}L") + (f"-moe{model['top_k']}" + (f"/e{model['every']}" if model["every"] > 1 else "") +
                    (f"/c{model['capacity']}" if model["capacity"] else "") if model.get("experts") else "")
    if not model["padded_vocab"]:
        name += "-pv0"
    if model.get("block", BLOCK) != BLOCK:
        name += f"-T{model['block']}"
    for key, plain in (("optimizer", "adamw"), ("tokenizer", "char")):
        if model[key] != plain:
            name += "-" + model[key]
    if model.get("dropout"):
        name += f"-drop{model['dropout']}"
    if model.get("attention_dropout"):
        name += f"-attndrop{model['attention_dropout']}"
    return name + ("" if model["clip"] else "-noclip")


def resolved_padded(model, lay):
    if model["family"] != "gpt":
        return None
    if model["padded_vocab"]:
        return model["padded_vocab"]
    tp = lay.get("tp", 1)
    return -(-vocabulary(model) // (64 * tp)) * 64 * tp


def vocabulary(model):
    return 65 if model["tokenizer"] == "char" else 256  # Tiny Shakespeare's 65 characters, or bytes


def reference(loom, model, a, b, rows, work, cache, log, timeout):
    """The serial reference run directory: uninterrupted, or S1 steps in A's precision then S2 in
    B's, each from the serial process."""
    key = json.dumps([model, a["precision"], b["precision"], rows, resolved_padded(model, a),
                      resolved_padded(model, b)], sort_keys=True)
    if key in cache:
        return cache[key]
    d = os.path.join(work, f"reference-{len(cache)}")
    m = dict(model)
    if model["family"] == "gpt" and not model["padded_vocab"]:
        m["padded_vocab"] = resolved_padded(model, a)
    serial = {"ranks": 1, "dp": 1, "micro": 1, "format": "single"}
    if a["precision"] == b["precision"]:
        status, out = launch(loom, 1, train_args(m, dict(serial, precision=a["precision"]), rows, S1 + S2, d), timeout, log)
    else:
        status, out = launch(loom, 1, train_args(m, dict(serial, precision=a["precision"]), rows, S1, d), timeout, log)
        if status == 0:
            status, out = launch(loom, 1, train_args(m, dict(serial, precision=b["precision"]), rows, S1 + S2, d,
                                                     ["--resume", "latest"]), timeout, log)
    if status != 0:
        raise RuntimeError("the serial reference failed: " + last_lines(out))
    cache[key] = d
    return d


def layout_noise(loom, model, a, b, rows, ref, pdir, log, timeout):
    """How far the layouts' own rounding takes a run from the reference (the largest loss
    difference after S1): the uninterrupted runs under A and under B, their deviations added
    (the resumed run carries A's into B's steps); where A and B train in other precisions, B
    continuing from the reference's own checkpoint of step S1 plus how far A's first run
    strayed by step S1. A resumed run as close as this is off by that rounding, not by the
    resume. Returns (that loss difference, the runs' directories), or None: no such run. Run
    once per pair (cached in pdir/noise.json)."""
    cached = os.path.join(pdir, "noise.json")
    if os.path.exists(cached):
        with open(cached) as f:
            return tuple(json.load(f))
    want = losses(ref)

    def deviation(run_dir, steps):
        got = losses(run_dir)
        return max(abs(got[s][0] - want[s][0]) for s in steps)

    runs = []
    if a["precision"] == b["precision"]:
        runs = [(a, [], os.path.join(pdir, "noise-a")), (b, [], os.path.join(pdir, "noise-b"))]
        total = 0.0
    else:
        base = os.path.join(ref, f"checkpoint-{S1:08d}")
        runs = [(b, ["--resume", base if os.path.isdir(base) else base + ".safetensors"], os.path.join(pdir, "noise-b"))]
        total = deviation(os.path.join(pdir, "a"), range(1, S1 + 1))
    # Initialisation draws the whole token table first: the runs take the reference's (A's) rows.
    m = dict(model)
    if model["family"] == "gpt" and not model["padded_vocab"]:
        m["padded_vocab"] = resolved_padded(model, a)
    for lay, extra, d in runs:
        try:
            status, _ = launch(loom, lay["ranks"], train_args(m, lay, rows, S1 + S2, d, extra), timeout, log)
        except Hang:
            return None
        if status != 0:
            return None
        total += deviation(d, range(S1 + 1, S1 + S2 + 1))
    with open(cached, "w") as f:
        json.dump([total, [d for _, _, d in runs]], f)
    return total, [d for _, _, d in runs]


def run_pair(loom, index, pair, work, cache, timeout, rng):
    model, a, b, rows, mode, probe = pair
    pdir = os.path.join(work, f"pair-{index:03d}")
    shutil.rmtree(pdir, ignore_errors=True)
    os.makedirs(pdir)
    log = os.path.join(pdir, "log.txt")
    run_a = os.path.join(pdir, "a")
    same = {k: v for k, v in a.items() if k != "every"} == b
    notes = []

    # (b) S1 steps under A.
    def clean_a():
        shutil.rmtree(run_a, ignore_errors=True)
    try:
        status, out = run_twice_on_hang(loom, a["ranks"], train_args(model, a, rows, S1, run_a), timeout, log, clean_a)
    except Hang:
        return "HANG", "layout A's first run timed out twice", log
    if status != 0:
        return "SKIPPED", "layout A refused at start: " + error_message(out), log

    # Into a different model: refused, nothing in the run directory changed.
    if probe:
        flags, key = other_model(rng, model, b)
        how = rng.choice(["latest", "auto"])
        before = snapshot(run_a)
        try:
            status, out = launch(loom, b["ranks"], train_args(model, b, rows, S1 + S2, run_a, ["--resume", how, *flags]),
                                 timeout, log)
        except Hang:
            return "HANG", f"the resume into another model ({key}) timed out", log
        refusal = "was trained with optimizer" if key == "optimizer" else "holds a different model"
        if status != 1 or refusal not in out or key not in out:
            return "MISMATCH", f"resume into another model ({' '.join(flags)}) exited {status}: {error_message(out)}", log
        if snapshot(run_a) != before:
            return "MISMATCH", f"the refused resume into another model ({key}) changed the run directory", log
        notes.append(f"refused {key} ({how})")

    # The checkpoint re-sharded for B by `loom convert` and gathered back into one file: the saved
    # state bit for bit (loading copies fp32 values; the tolerances below would pass a tensor left
    # at its initial values in bf16).
    roundtrip = os.path.join(pdir, "roundtrip")
    try:
        status, out = launch(loom, b["ranks"], ["convert", "--from", run_a, "--to", roundtrip, *convert_args(b)],
                             timeout, log)
        if status != 0:
            return ("REFUSED" if status == 1 else "CRASH"), "loom convert into B: " + error_message(out), log
        diff = compare(final_tensors(loom, roundtrip, S1, pdir, log), final_tensors(loom, run_a, S1, pdir, log), True, None,
                       vocab=vocabulary(model) if model["family"] == "gpt" else 0)
        if diff:
            return "MISMATCH", "A's checkpoint converted into B and back: " + diff, log
    except Hang:
        return "HANG", "loom convert into B timed out", log
    except RuntimeError as e:
        return "CRASH", str(e), log

    # (c) S2 more steps under B.
    before_a = snapshot(run_a)
    if mode in ("latest", "auto"):
        run_b, resume = run_a, mode
    elif mode == "convert":
        # `loom convert` re-shards the checkpoint for B into a new run directory, which B continues.
        run_b, resume = os.path.join(pdir, "b"), "latest"
        try:
            status, out = launch(loom, b["ranks"], ["convert", "--from", run_a, "--to", run_b, *convert_args(b)], timeout, log)
        except Hang:
            return "HANG", "loom convert timed out", log
        if status != 0:
            return ("REFUSED" if status == 1 else "CRASH"), "loom convert: " + error_message(out), log
    else:
        run_b = os.path.join(pdir, "b")
        resume = run_a if mode == "run-dir" else os.path.join(run_a, f"checkpoint-{S1:08d}" + (
            "" if os.path.isdir(os.path.join(run_a, f"checkpoint-{S1:08d}")) else ".safetensors"))
    try:
        status, out = launch(loom, b["ranks"], train_args(model, b, rows, S1 + S2, run_b, ["--resume", resume]),
                             timeout, log)
    except Hang:
        # Confirm: the run directory of B as it was, the same command again.
        if run_b != run_a:
            shutil.rmtree(run_b, ignore_errors=True)
        try:
            status, out = launch(loom, b["ranks"], train_args(model, b, rows, S1 + S2, run_b, ["--resume", resume]),
                                 timeout, log)
            notes.append("timed out once")
        except Hang:
            return "HANG", "the resume timed out twice", log
    if status != 0:
        message = error_message(out)
        if snapshot(run_a) != before_a:
            return "MISMATCH", f"the failed resume (exit {status}) changed the run directory: {message}", log
        if "error" in out.lower() and status == 1:
            return "REFUSED", message, log
        return "CRASH", f"exit {status}: " + message, log
    if resolved_padded(model, a) != resolved_padded(model, b):
        if "token table re-padded from" not in out:
            return "MISMATCH", "another token table's padding resumed without saying it was re-padded", log
        notes.append("re-padded")
    if run_b != run_a and snapshot(run_a) != before_a:
        return "MISMATCH", f"resuming from {os.path.basename(resume)} into a new run directory changed the old one", log

    # Nothing lost: every step's loss logged, the checkpoints of S1 and S1 + S2 in place, latest at the end.
    got = losses(run_b)
    want_steps = list(range(1, S1 + S2 + 1)) if run_b == run_a else list(range(S1 + 1, S1 + S2 + 1))
    if sorted(got) != want_steps or any(len(v) != 1 for v in got.values()):
        return "MISMATCH", f"metrics.jsonl logs steps {sorted(got)} ({sum(map(len, got.values()))} records), want {want_steps}", log
    for step, d in ((S1, run_a), (S1 + S2, run_b)):
        if step == S1 and a.get("every") and run_b == run_a:
            continue  # pruned to keep_checkpoints
        base = os.path.join(d, f"checkpoint-{step:08d}")
        if not (os.path.isdir(base) or os.path.isfile(base + ".safetensors")):
            return "MISMATCH", f"{os.path.relpath(base, pdir)} is gone", log
    latest = os.path.join(run_b, "latest")
    if not os.path.islink(latest) or not os.readlink(latest).startswith(f"checkpoint-{S1 + S2:08d}"):
        return "MISMATCH", f"latest names {os.readlink(latest) if os.path.islink(latest) else None}", log

    # Compare with the reference.
    try:
        if same:
            ref = os.path.join(pdir, "straight")
            status, out = run_twice_on_hang(loom, a["ranks"], train_args(model, a, rows, S1 + S2, ref), timeout, log,
                                            lambda: shutil.rmtree(ref, ignore_errors=True))
            if status != 0:
                return "CRASH", "the uninterrupted run under A failed: " + error_message(out), log
        else:
            ref = reference(loom, model, a, b, rows, work, cache, log, timeout)
        want_tensors = final_tensors(loom, ref, S1 + S2, pdir, log)
        got_tensors = final_tensors(loom, run_b, S1 + S2, pdir, log)
    except Hang:
        return "HANG", "the reference run timed out twice", log
    except RuntimeError as e:
        return "CRASH", str(e), log
    want = losses(ref)
    tol = tolerances(model, a, b)
    for step in range(S1 + 1, S1 + S2 + 1):
        g, w = got[step][0], want[step][0]
        if same and g != w:
            return "MISMATCH", f"loss at step {step} {g!r}, uninterrupted {w!r} (same layout: bit for bit)", log
        if not abs(g - w) <= tol["loss"] * abs(w):
            what = f"loss at step {step} {g:.7g}, reference {w:.7g} (relative {abs(g - w) / abs(w):.2g} > {tol['loss']})"
            found = layout_noise(loom, model, a, b, rows, ref, pdir, log, timeout)
            noise = found[0] if found else None
            if noise is None or not abs(g - w) <= 2 * noise:
                return "MISMATCH", what + (f"; the layouts' own rounding: {noise:.2g}" if noise is not None else ""), log
            notes.append(f"{what}, as far as the layouts' own rounding ({noise / abs(w):.2g}): layout noise")
    if got_tensors is None:
        return "MISMATCH", "no final checkpoint", log
    vocab = vocabulary(model) if model["family"] == "gpt" else 0
    diff = compare(got_tensors, want_tensors, same, tol, vocab=vocab)
    if diff and not same:
        # As far as the uninterrupted runs under A and B stray from the reference, element by element?
        found = layout_noise(loom, model, a, b, rows, ref, pdir, log, timeout)
        if found:
            try:
                strays = [final_tensors(loom, d, S1 + S2, pdir, log) for d in found[1]]
            except (RuntimeError, Hang):
                strays = []
            if strays and all(strays) and not compare(got_tensors, want_tensors, same, tol, noise=strays, vocab=vocab):
                notes.append(diff + ", as far as the layouts' own rounding: layout noise")
                diff = ""
    if diff:
        return "MISMATCH", diff, log
    return ("EXACT" if same else "MATCH"), "; ".join(notes), log


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--loom", default=os.path.join(ROOT, "build", "loom"))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--pairs", type=int, default=25)
    ap.add_argument("--max-ranks", type=int, default=4)
    ap.add_argument("--timeout", type=int, default=180, help="seconds per run; a run past it is re-run once, then HANG")
    ap.add_argument("--first", type=int, default=0, help="skip the seed's first pairs (re-run one: --first I --pairs 1)")
    ap.add_argument("--work", default="", help="keep every run here (default: a temporary directory, removed)")
    args = ap.parse_args()
    loom = os.path.abspath(args.loom)
    rng = random.Random(args.seed)
    pairs = [draw_pair(rng, args.max_ranks) for _ in range(args.first + args.pairs)]
    # One GPT in five trains with a longer context, drawn apart so the layouts a seed draws stay
    # as they were: its position table then outweighs a token table of 128 rows, and a ZeRO
    # rank's shard of their flat unit may hold none of the token table.
    for i, (model, *_) in enumerate(pairs):
        if model["family"] == "gpt" and random.Random(f"context {args.seed} {i}").random() < 0.2:
            model["block"] = LONG_BLOCK
    work = os.path.abspath(args.work) if args.work else tempfile.mkdtemp(prefix="loom_resume_sweep_")
    os.makedirs(work, exist_ok=True)
    cache, counts, rows = {}, {}, []
    print(f"resume sweep: seed {args.seed}, {args.pairs} pairs, up to {args.max_ranks} ranks, steps {S1}+{S2}, work {work}")
    print(f"{'#':>3}  {'class':8} {'model':16} {'A':34} {'B':34} {'resume':10} detail")
    for i in range(args.first, args.first + args.pairs):
        model, a, b, rows_, mode, probe = pairs[i]
        t0 = time.time()
        klass, detail, log = run_pair(loom, i, pairs[i], work, cache, args.timeout, random.Random(args.seed * 1000 + i))
        counts[klass] = counts.get(klass, 0) + 1
        name = model_name(model)
        side_a, side_b = f"{describe(a)} ({a['ranks']})", f"{describe(b)} ({b['ranks']})"
        line = (f"{i:>3}  {klass:8} {name:16} {side_a:34} {side_b:34} "
                f"{mode + ('+probe' if probe else ''):10} {time.time() - t0:5.0f}s {detail}")
        print(line, flush=True)
        rows.append((klass, line, log))
    print("\nsummary: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    bad = [r for r in rows if r[0] in ("MISMATCH", "CRASH", "HANG")]
    for klass, line, log in bad:
        print(f"  {klass}: see {log}")
    if not args.work and not bad:
        shutil.rmtree(work, ignore_errors=True)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
