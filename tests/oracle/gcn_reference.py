#!/usr/bin/env python3
"""PyTorch oracle for Loom's GCN: loss, every parameter gradient, and 10 Adam steps.

Usage: gcn_reference.py DIR

DIR holds (written by tests/oracle/test_gcn_oracle.cpp), raw little-endian arrays with
their shapes in meta.json:
  adjacency.f32 (N, N) the dense normalised adjacency Â; features.f32 (N, F);
  targets.i32 (N) class or -1; param.<name>.f32 for conv<l>.weight (in, out) and conv<l>.bias;
  meta.json: shapes, layers, lr, beta1, beta2, eps, weight_decay, steps.
Writes back into DIR: loss.f32 (1), grad.<name>.f32, losses.f32 (steps), final.<name>.f32.
The model is written the usual way (pygcn's GraphConvolution: adj @ (x @ W) + b, ReLU
between layers, no dropout) with Kipf & Welling's L2 on the first layer's weights in the loss
and torch.optim.Adam without weight decay. Exit 3 when torch or numpy is missing.
"""
import json
import os
import sys

try:
    import numpy as np
    import torch
except ImportError as e:
    print(f"gcn_reference.py: cannot import torch/numpy ({e})", file=sys.stderr)
    sys.exit(3)


def main():
    d = sys.argv[1]
    meta = json.load(open(os.path.join(d, "meta.json")))

    def load(name, dtype):
        return torch.from_numpy(np.fromfile(os.path.join(d, name), dtype=dtype).reshape(meta["shapes"][name]).copy())

    def save(name, t):
        t.detach().to(torch.float32).numpy().tofile(os.path.join(d, name))

    torch.set_default_dtype(torch.float64)  # the reference in double: Loom's fp32 error is what is measured
    adj = load("adjacency.f32", np.float32).double()
    x = load("features.f32", np.float32).double()
    targets = load("targets.i32", np.int32).long()
    names = [f"conv{l}.{kind}" for l in range(meta["layers"]) for kind in ("weight", "bias")]
    params = {n: load(f"param.{n}.f32", np.float32).double().requires_grad_(True) for n in names}
    labelled = targets >= 0

    def loss_fn():
        h = x
        for l in range(meta["layers"]):
            h = adj @ (h @ params[f"conv{l}.weight"]) + params[f"conv{l}.bias"]
            if l + 1 < meta["layers"]:
                h = torch.relu(h)
        ce = torch.nn.functional.cross_entropy(h[labelled], targets[labelled])
        return ce + meta["weight_decay"] / 2 * (params["conv0.weight"] ** 2).sum()

    loss = loss_fn()
    loss.backward()
    save("loss.f32", loss.reshape(1))
    for n in names:
        save(f"grad.{n}.f32", params[n].grad)
    opt = torch.optim.Adam(list(params.values()), lr=meta["lr"], betas=(meta["beta1"], meta["beta2"]), eps=meta["eps"])
    losses = []
    for _ in range(meta["steps"]):
        opt.zero_grad()
        l = loss_fn()
        l.backward()
        opt.step()
        losses.append(l.item())
    save("losses.f32", torch.tensor(losses))
    for n in names:
        save(f"final.{n}.f32", params[n])


if __name__ == "__main__":
    main()
