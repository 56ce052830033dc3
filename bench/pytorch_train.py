#!/usr/bin/env python3
"""The PyTorch baseline for `loom bench train`: the same GPT, the same training step, the same JSON.

Usage: pytorch_train.py --n-layer L --n-head H --n-embd C --block-size T --vocab-size V
                        --batch-size B --steps S --warmup W --threads N

A step is what Loom's bench times: zero_grad, forward, loss, backward, AdamW step, on one
fixed batch of random tokens. The model is nanoGPT written for PyTorch 1.13 at its best on
CPU: fp32, no dropout, manual causal attention (masked_fill + softmax; 1.13 has no
scaled_dot_product_attention), GELU tanh, LM head tied to the token embedding, vocabulary
padded to a multiple of 64 like Loom (the loss reads only the first V columns), AdamW with
foreach=True (fused is CUDA-only in 1.13) in the two usual groups (matrices decayed).
Prints one JSON line with Loom's keys; tracked_peak_bytes is null (PyTorch's CPU allocator
does not track), and "blas" names the BLAS library the process loaded, because PyTorch's
fp32 matmul speed is that library's.
"""
import argparse
import json
import math
import os
import resource
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class CausalSelfAttention(nn.Module):
    def __init__(self, c, nh, block_size):
        super().__init__()
        self.nh = nh
        self.qkv = nn.Linear(c, 3 * c)
        self.proj = nn.Linear(c, c)
        self.register_buffer("mask", torch.ones(block_size, block_size, dtype=torch.bool).tril()
                             .view(1, 1, block_size, block_size), persistent=False)

    def forward(self, x):
        b, t, c = x.shape
        hs = c // self.nh
        q, k, v = self.qkv(x).split(c, dim=2)
        q = q.view(b, t, self.nh, hs).transpose(1, 2)
        k = k.view(b, t, self.nh, hs).transpose(1, 2)
        v = v.view(b, t, self.nh, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        att = att.masked_fill(~self.mask[:, :, :t, :t], float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        return self.proj(y)


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.fc = nn.Linear(c, 4 * c)
        self.proj = nn.Linear(4 * c, c)

    def forward(self, x):
        return self.proj(F.gelu(self.fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, c, nh, block_size):
        super().__init__()
        self.ln1 = nn.LayerNorm(c)
        self.attn = CausalSelfAttention(c, nh, block_size)
        self.ln2 = nn.LayerNorm(c)
        self.mlp = MLP(c)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, v, block_size, n_layer, nh, c):
        super().__init__()
        self.v = v
        self.vp = (v + 63) // 64 * 64
        self.wte = nn.Embedding(self.vp, c)
        self.wpe = nn.Embedding(block_size, c)
        self.blocks = nn.ModuleList([Block(c, nh, block_size) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(c)
        self.lm_head = nn.Linear(c, self.vp, bias=False)
        self.lm_head.weight = self.wte.weight  # tied
        # GPT-2 init, as Loom: N(0, 0.02), residual projections scaled by 1/sqrt(2L).
        for name, p in self.named_parameters():
            if p.dim() >= 2:
                std = 0.02 / math.sqrt(2 * n_layer) if name.endswith("proj.weight") else 0.02
                torch.nn.init.normal_(p, mean=0.0, std=std)
            elif name.endswith("bias"):
                torch.nn.init.zeros_(p)

    def forward(self, idx, targets):
        t = idx.shape[1]
        pos = torch.arange(t, dtype=torch.long)
        x = self.wte(idx) + self.wpe(pos)
        for b in self.blocks:
            x = b(x)
        logits = self.lm_head(self.ln_f(x))
        if self.vp != self.v:
            logits = logits[..., :self.v]
        return F.cross_entropy(logits.reshape(-1, self.v), targets.reshape(-1))


def loaded_blas():
    try:
        with open("/proc/self/maps") as f:
            libs = {line.split()[-1] for line in f if ".so" in line}
    except OSError:
        return "unknown"
    hits = sorted(p for p in libs if any(k in os.path.basename(p) for k in ("blas", "mkl_rt", "blis")))
    return ",".join(hits) or "none"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-layer", type=int, default=6)
    ap.add_argument("--n-head", type=int, default=6)
    ap.add_argument("--n-embd", type=int, default=384)
    ap.add_argument("--block-size", type=int, default=256)
    ap.add_argument("--vocab-size", type=int, default=65)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=0, help="0 = all cores")
    a = ap.parse_args()

    torch.set_num_threads(a.threads if a.threads > 0 else os.cpu_count())
    torch.manual_seed(1)
    B, T, V = a.batch_size, a.block_size, a.vocab_size
    model = GPT(V, T, a.n_layer, a.n_head, a.n_embd)
    model.train()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt_kwargs = dict(lr=1e-4, betas=(0.9, 0.95), eps=1e-8)
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}]
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
        out = model(inputs, targets)
        out.backward()
        opt.step()
        loss = out.item()
        dt = time.perf_counter() - t0
        if s >= a.warmup:
            times.append(dt)

    C, L = a.n_embd, a.n_layer
    vp = model.vp
    params = sum(p.numel() for p in model.parameters())  # the tied head counted once
    flops_per_token = 3.0 * (2.0 * (L * 12.0 * C * C + vp * C) + L * 4.0 * T * C)  # as Loom's
    step_s = sorted(times)[len(times) // 2]  # the same median as Loom's bench
    tokens_per_s = B * T / step_s
    print(json.dumps({
        "impl": "pytorch",
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
