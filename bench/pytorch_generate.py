"""PyTorch decoding the same GPT shapes as `loom bench generate`, with a KV cache.

The model is GPT-2's (pre-LayerNorm blocks, tied head), random weights; the cache is a
preallocated (B, NH, T, HS) tensor per layer written in place, the usual KV-cache
implementation. gpt-mini-moe: gpt-mini with every MLP a dropless mixture of 8 experts, top-2
(softmax router, gates renormalised over the top 2), run as the usual eager implementation
does: per expert, gather the rows routed to it, its MLP, scatter-add the gated output. bf16: the model and its cache in torch.bfloat16 (PyTorch's usual bf16
inference). Prints one JSON line per (model, precision, batch) with the same fields as
Loom's prefill_tokens_per_s and decode_tokens_per_s. Usage:
  pytorch_generate.py --models gpt-mini,gpt2-small --batches 1,4,16 --prompt-tokens 64 --new-tokens 64 --threads 1 --precisions fp32,bf16
"""
import argparse
import json
import math
import time

import torch
import torch.nn.functional as F

SHAPES = {
    "gpt-mini": dict(V=65, T=256, L=6, NH=6, C=384),
    "gpt2-small": dict(V=50257, T=1024, L=12, NH=12, C=768),
    "gpt-mini-moe": dict(V=65, T=256, L=6, NH=6, C=384, E=8, K=2),
}


class MLP(torch.nn.Module):
    def __init__(self, C):
        super().__init__()
        self.fc = torch.nn.Linear(C, 4 * C)
        self.out = torch.nn.Linear(4 * C, C)

    def forward(self, x):
        return self.out(F.gelu(self.fc(x), approximate="tanh"))


class MoE(torch.nn.Module):
    def __init__(self, C, E, K):
        super().__init__()
        self.K = K
        self.router = torch.nn.Linear(C, E, bias=False)
        self.experts = torch.nn.ModuleList(MLP(C) for _ in range(E))

    def forward(self, x):
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        top_p, top_e = torch.topk(torch.softmax(self.router(x).float(), dim=-1), self.K, dim=-1)
        gates = (top_p / top_p.sum(-1, keepdim=True)).to(x.dtype)
        y = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            rows, slot = torch.where(top_e == e)
            if rows.numel():
                y.index_add_(0, rows, expert(x[rows]) * gates[rows, slot].unsqueeze(-1))
        return y.reshape(shape)


class Block(torch.nn.Module):
    def __init__(self, C, NH, E=0, K=0):
        super().__init__()
        self.NH = NH
        self.ln1 = torch.nn.LayerNorm(C)
        self.qkv = torch.nn.Linear(C, 3 * C)
        self.proj = torch.nn.Linear(C, C)
        self.ln2 = torch.nn.LayerNorm(C)
        self.mlp = MoE(C, E, K) if E else MLP(C)

    def forward(self, x, k_cache, v_cache, pos):
        B, T, C = x.shape
        HS = C // self.NH
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.NH, HS).transpose(1, 2) for t in (q, k, v))
        k_cache[:B, :, pos:pos + T] = k
        v_cache[:B, :, pos:pos + T] = v
        keys, values = k_cache[:B, :, :pos + T], v_cache[:B, :, :pos + T]
        att = (q @ keys.transpose(-2, -1)) * (1.0 / math.sqrt(HS))  # (B, NH, T, pos + T)
        if T > 1:  # prefill: causal mask over the new tokens
            mask = torch.ones(T, pos + T, dtype=torch.bool).tril(diagonal=pos)
            att = att.masked_fill(~mask, float("-inf"))
        y = torch.softmax(att, dim=-1) @ values
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.mlp(self.ln2(x))


class GPT(torch.nn.Module):
    def __init__(self, V, T, L, NH, C, E=0, K=0):
        super().__init__()
        self.wte = torch.nn.Embedding(V, C)
        self.wpe = torch.nn.Embedding(T, C)
        self.blocks = torch.nn.ModuleList(Block(C, NH, E, K) for _ in range(L))
        self.ln_f = torch.nn.LayerNorm(C)

    def forward(self, idx, caches, pos):
        x = self.wte(idx) + self.wpe(torch.arange(pos, pos + idx.shape[1]))
        for block, (k, v) in zip(self.blocks, caches):
            x = block(x, k, v, pos)
        return self.ln_f(x[:, -1]) @ self.wte.weight.T  # the last position's logits


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--models", default="gpt-mini,gpt2-small")
    p.add_argument("--batches", default="1,4,16")
    p.add_argument("--prompt-tokens", type=int, default=64)
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--precisions", default="fp32")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    # One thread: CPU time (as Loom's bench; the machine may be shared); more: wall time.
    now = time.process_time if a.threads == 1 else time.perf_counter
    torch.manual_seed(7)
    for name, precision in ((n, p) for n in a.models.split(",") for p in a.precisions.split(",")):
        s = SHAPES[name]
        dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[precision]
        model = GPT(**s).eval().to(dtype)
        HS = s["C"] // s["NH"]
        for B in map(int, a.batches.split(",")):
            caches = [(torch.empty(B, s["NH"], s["T"], HS, dtype=dtype), torch.empty(B, s["NH"], s["T"], HS, dtype=dtype))
                      for _ in range(s["L"])]
            with torch.inference_mode():
                # Prefill one sequence at a time (as Loom's bench does), into rows of a batch-B cache.
                t0 = now()
                for b in range(B):
                    prompt = torch.randint(0, s["V"], (1, a.prompt_tokens))
                    one = [(k[b:b + 1], v[b:b + 1]) for k, v in caches]
                    model(prompt, one, 0)
                prefill_s = now() - t0
                steps = []
                for n in range(a.new_tokens):
                    tokens = torch.randint(0, s["V"], (B, 1))
                    t1 = now()
                    model(tokens, caches, a.prompt_tokens + n)
                    steps.append(now() - t1)
            print(json.dumps({"impl": "pytorch", "torch": torch.__version__, "model": name, "precision": precision, "threads": a.threads, "clock": "cpu" if a.threads == 1 else "wall",
                              "batch": B, "prompt_tokens": a.prompt_tokens, "new_tokens": a.new_tokens,
                              "prefill_tokens_per_s": B * a.prompt_tokens / prefill_s,
                              "decode_tokens_per_s": B * a.new_tokens / sum(steps)}), flush=True)


if __name__ == "__main__":
    main()
