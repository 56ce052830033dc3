#!/usr/bin/env python3
"""The PyTorch DDP baseline for Loom's data-parallel `loom train --dp N`: the same GPT, DDP over gloo.

Usage: pytorch_ddp_train.py [--world-size 2] [--n-layer 6] [--n-head 6] [--n-embd 384]
                            [--block-size 256] [--vocab-size 65] [--batch-size 8] [--steps 10]
                            [--warmup 2] [--threads 1] [--bucket-mb 25] [--grad-clip 1.0]

Spawns --world-size processes (torch.multiprocessing, on one machine, gloo over loopback),
each with torch.set_num_threads(--threads), the model of tests/oracle/torch_gpt.py (the one
the numerical oracle checks Loom against, built as bench/pytorch_train.py builds it) wrapped
in DistributedDataParallel (default bucket 25 MB, as PyTorch ships it), and AdamW with
foreach=True in the usual two groups. A step is what Loom's train loop does per step:
zero_grad, forward + loss on the rank's own --batch-size sequences, backward (DDP all-reduces
the gradient buckets, overlapped with backward), gradient-norm clipping to --grad-clip
(Loom's default 1.0; 0 = off), AdamW step. Each rank trains on its own fixed batch of random
tokens: the cost of a step does not depend on which tokens they are.

A step's time is the slowest rank's (the ranks meet in every all-reduce anyway); the figure
is the median over the steps after --warmup. Rank 0 prints one JSON line:
tokens_per_s is global (world_size * batch_size * block_size / median step time).
Environment: the launcher should set OMP_NUM_THREADS=--threads per rank; MASTER_ADDR /
MASTER_PORT are set here (127.0.0.1, a free port) unless already set.
"""
import argparse
import json
import os
import resource
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP

from torch_baseline import GPT, add_model_args, adamw_groups, loaded_blas  # the oracle's model


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker(rank, a, result_queue):
    dist.init_process_group("gloo", rank=rank, world_size=a.world_size)
    try:
        torch.set_num_threads(a.threads)
        torch.manual_seed(1)  # the same initial weights everywhere (DDP broadcasts rank 0's anyway)
        B, T, V, L = a.batch_size, a.block_size, a.vocab_size, a.n_layer
        model = GPT(V, (V + 63) // 64 * 64, T, L, a.n_head, a.n_embd)
        model.init_gpt2(L)
        model.train()
        # The causal masks are constant bool buffers, built identically on every rank; gloo cannot
        # broadcast bool tensors ("Invalid scalar type"), so DDP is told to leave them alone.
        DDP._set_params_and_buffers_to_ignore_for_model(
            model, [n for n, b in model.named_buffers() if b.dtype == torch.bool])
        ddp = DDP(model, bucket_cap_mb=a.bucket_mb)
        opt_kwargs = dict(lr=1e-4, betas=(0.9, 0.95), eps=1e-8)
        groups = adamw_groups(model, 0.1)
        try:
            opt = torch.optim.AdamW(groups, foreach=True, **opt_kwargs)
        except TypeError:  # a PyTorch without foreach
            opt = torch.optim.AdamW(groups, **opt_kwargs)

        g = torch.Generator().manual_seed(7 + rank)  # each rank its own data, as in data parallelism
        inputs = torch.randint(0, V, (B, T), generator=g)
        targets = torch.randint(0, V, (B, T), generator=g)
        times, loss = [], float("nan")
        dist.barrier()
        for s in range(a.warmup + a.steps):
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            out = ddp(inputs, targets)
            out.backward()
            if a.grad_clip > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), a.grad_clip)
            opt.step()
            loss = out.item()
            dt = time.perf_counter() - t0
            if s >= a.warmup:
                times.append(dt)

        # The slowest rank's time per step.
        t = torch.tensor(times, dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        rss = torch.tensor([resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024], dtype=torch.float64)
        dist.all_reduce(rss, op=dist.ReduceOp.MAX)
        if rank == 0:
            step_s = sorted(t.tolist())[len(times) // 2]  # the same median as Loom's bench
            C = a.n_embd
            vp = model.embedding.wte.shape[0]
            flops_per_token = 3.0 * (2.0 * (L * 12.0 * C * C + vp * C) + L * 4.0 * T * C)  # as Loom's
            tokens_per_s = a.world_size * B * T / step_s
            result_queue.put({
                "impl": "pytorch-ddp",
                "backend": "gloo",
                "world_size": a.world_size,
                "threads": torch.get_num_threads(),
                "params": sum(p.numel() for p in model.parameters()),
                "batch_size": B,
                "global_batch_size": a.world_size * B,
                "block_size": T,
                "bucket_mb": a.bucket_mb,
                "grad_clip": a.grad_clip,
                "median_step_s": step_s,
                "step_s": t.tolist(),
                "tokens_per_s": tokens_per_s,
                "model_gflops_per_s": tokens_per_s * flops_per_token / 1e9,
                "max_rss_bytes_per_rank": int(rss.item()),
                "final_loss_rank0": loss,
                "torch_version": torch.__version__,
                "blas": loaded_blas(),
            })
    finally:
        dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--world-size", type=int, default=2)
    add_model_args(ap, batch_help="sequences per rank")
    ap.add_argument("--threads", type=int, default=1, help="threads per rank")
    ap.add_argument("--bucket-mb", type=float, default=25.0, help="DDP bucket_cap_mb (PyTorch's default 25)")
    ap.add_argument("--grad-clip", type=float, default=1.0, help="clip the global gradient norm; 0 = off")
    a = ap.parse_args()
    if a.world_size < 1 or a.steps < 1 or a.threads < 1:
        ap.error("--world-size, --steps and --threads must be at least 1")

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(free_port()))
    ctx = mp.get_context("spawn")
    q = ctx.SimpleQueue()
    mp.spawn(worker, args=(a, q), nprocs=a.world_size, join=True)  # raises if a rank fails
    if q.empty():
        sys.exit("pytorch_ddp_train: rank 0 reported no result")
    print(json.dumps(q.get()))


if __name__ == "__main__":
    main()
