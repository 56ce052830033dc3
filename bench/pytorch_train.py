#!/usr/bin/env python3
"""The PyTorch baseline for `loom bench train`: the same GPT, the same training step, the same JSON.

Usage: pytorch_train.py --n-layer L --n-head H --n-embd C --block-size T --vocab-size V
                        --batch-size B --steps S --warmup W --threads N

A step is what Loom's bench times: zero_grad, forward, loss, backward, AdamW step, on one
fixed batch of random tokens. The model is nanoGPT written for PyTorch 1.13 at its best on
CPU: fp32 (or bf16 autocast with --precision bf16), no dropout, manual causal attention (masked_fill + softmax; 1.13 has no
scaled_dot_product_attention), GELU tanh, LM head tied to the token embedding, vocabulary
padded to a multiple of 64 like Loom (the loss reads only the first V columns), AdamW with
foreach=True (fused is CUDA-only in 1.13) in the two usual groups (matrices decayed).
Prints one JSON line with Loom's keys; tracked_peak_bytes is null (PyTorch's CPU allocator
does not track), and "blas" names the BLAS library the process loaded, because PyTorch's
fp32 matmul speed is that library's.
"""
import argparse
import json
import os
import resource
import time

import torch

from torch_baseline import GPT, add_model_args, adamw_groups, loaded_blas  # the oracle's model


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_model_args(ap)
    ap.add_argument("--threads", type=int, default=0, help="0 = all cores")
    ap.add_argument("--precision", choices=("fp32", "bf16"), default="fp32",
                    help="bf16: forward under torch.autocast('cpu', dtype=torch.bfloat16), fp32 master weights")
    a = ap.parse_args()

    torch.set_num_threads(a.threads if a.threads > 0 else os.cpu_count())
    torch.manual_seed(1)
    B, T, V = a.batch_size, a.block_size, a.vocab_size
    model = GPT(V, (V + 63) // 64 * 64, T, a.n_layer, a.n_head, a.n_embd)
    model.init_gpt2(a.n_layer)
    model.train()
    opt_kwargs = dict(lr=1e-4, betas=(0.9, 0.95), eps=1e-8)
    groups = adamw_groups(model, 0.1)
    try:
        opt = torch.optim.AdamW(groups, foreach=True, **opt_kwargs)
    except TypeError:  # a PyTorch without foreach
        opt = torch.optim.AdamW(groups, **opt_kwargs)

    g = torch.Generator().manual_seed(7)
    inputs = torch.randint(0, V, (B, T), generator=g)
    targets = torch.randint(0, V, (B, T), generator=g)
    times, loss = [], float("nan")
    for s in range(a.warmup + a.steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            out = model(inputs, targets)
        out.backward()
        opt.step()
        loss = out.item()
        dt = time.perf_counter() - t0
        if s >= a.warmup:
            times.append(dt)

    C, L = a.n_embd, a.n_layer
    vp = model.embedding.wte.shape[0]
    params = sum(p.numel() for p in model.parameters())  # the tied head counted once
    flops_per_token = 3.0 * (2.0 * (L * 12.0 * C * C + vp * C) + L * 4.0 * T * C)  # as Loom's
    step_s = sorted(times)[len(times) // 2]  # the same median as Loom's bench
    tokens_per_s = B * T / step_s
    print(json.dumps({
        "impl": "pytorch",
        "precision": a.precision,
        "threads": torch.get_num_threads(),
        "params": params,
        "batch_size": B,
        "block_size": T,
        "median_step_s": step_s,
        "tokens_per_s": tokens_per_s,
        "model_gflops_per_s": tokens_per_s * flops_per_token / 1e9,
        "tracked_peak_bytes": None,
        "max_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "final_loss": loss,
        "torch_version": torch.__version__,
        "blas": loaded_blas(),
    }))


if __name__ == "__main__":
    main()
