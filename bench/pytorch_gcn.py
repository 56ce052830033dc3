#!/usr/bin/env python3
"""PyTorch baselines for bench/gcn_vs_pytorch.sh.

    pytorch_gcn.py epoch  PREFIX THREADS EPOCHS   # a pygcn-style GCN on a LINQS graph: ms per epoch, test acc
    pytorch_gcn.py spmm   CSR_DIR THREADS WIDTHS     # torch.sparse.mm on the CSRs `loom bench spmm --save-csr` wrote (Â, Âᵀ)

The GCN is written the usual way (tkipf/pygcn's GraphConvolution: adj @ (x @ W) + b with a
sparse adj, ReLU, dropout 0.5, log-softmax + NLL, Adam lr 0.01 weight decay 5e-4), on the
same symmetric normalisation, row-normalised features and split as Loom's configs/cora.toml.
An epoch is one training step (forward, backward, Adam), as Loom's progress line times it.
"""
import json
import sys
import time

import numpy as np
import torch


def load_linqs(prefix):
    ids, rows, classes = [], [], []
    for line in open(prefix + ".content"):
        f = line.split()
        ids.append(int(f[0]))
        rows.append(np.array(f[1:-1], dtype=np.float32))
        classes.append(f[-1])
    index = {p: i for i, p in enumerate(ids)}
    names = sorted(set(classes))
    y = torch.tensor([names.index(c) for c in classes])
    x = torch.from_numpy(np.stack(rows))
    x = x / x.abs().sum(1, keepdim=True).clamp_min(1e-30)
    edges = [(index[int(a)], index[int(b)]) for a, b in (line.split() for line in open(prefix + ".cites"))]
    return x, y, normalized_adjacency(len(ids), edges)


def normalized_adjacency(n, edges):
    pairs = set()
    for a, b in edges:
        pairs.add((a, b))
        pairs.add((b, a))
    pairs.update((i, i) for i in range(n))
    idx = torch.tensor(sorted(pairs)).T
    deg = torch.bincount(idx[0], minlength=n).float()
    val = deg[idx[0]].rsqrt() * deg[idx[1]].rsqrt()
    return torch.sparse_coo_tensor(idx, val, (n, n)).coalesce()


class GraphConvolution(torch.nn.Module):
    def __init__(self, i, o):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.empty(i, o))
        self.bias = torch.nn.Parameter(torch.zeros(o))
        torch.nn.init.xavier_uniform_(self.weight)

    def forward(self, x, adj):
        return torch.spmm(adj, x @ self.weight) + self.bias


class GCN(torch.nn.Module):
    def __init__(self, f, h, k):
        super().__init__()
        self.gc1, self.gc2 = GraphConvolution(f, h), GraphConvolution(h, k)

    def forward(self, x, adj):
        x = torch.nn.functional.dropout(torch.relu(self.gc1(x, adj)), 0.5, self.training)
        return torch.log_softmax(self.gc2(x, adj), dim=1)


def epoch(prefix, threads, epochs):
    torch.set_num_threads(threads)
    torch.manual_seed(1)
    x, y, adj = load_linqs(prefix)
    train, test = torch.arange(140), torch.arange(500, 1500)
    model = GCN(x.shape[1], 16, int(y.max()) + 1)
    opt = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    times = []
    for _ in range(epochs):
        t0 = time.perf_counter()
        model.train()
        opt.zero_grad()
        loss = torch.nn.functional.nll_loss(model(x, adj)[train], y[train])
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
    model.eval()
    acc = (model(x, adj)[test].argmax(1) == y[test]).float().mean().item()
    print(json.dumps({"impl": "pytorch", "threads": threads, "median_epoch_s": float(np.median(times[5:])),
                      "min_epoch_s": float(np.min(times[5:])), "test_acc": acc}))


def load_csr(csr_dir):
    row_ptr = torch.from_numpy(np.fromfile(csr_dir + "/row_ptr.i64", dtype=np.int64))
    col = torch.from_numpy(np.fromfile(csr_dir + "/col.i32", dtype=np.int32).astype(np.int64))
    val = torch.from_numpy(np.fromfile(csr_dir + "/val.f32", dtype=np.float32))
    n = len(row_ptr) - 1
    return torch.sparse_csr_tensor(row_ptr, col, val, (n, n))


def spmm(csr_dir, threads, widths):
    """Â B and Âᵀ dC (the backward's product, on the transposed CSR Loom saved) for each width."""
    torch.set_num_threads(threads)
    mats = {"A": load_csr(csr_dir), "At": load_csr(csr_dir + "/transposed")}
    for d in widths:
        for op, a in mats.items():
            n, nnz = a.shape[0], a.values().numel()
            b = torch.full((n, d), 0.5)
            torch.sparse.mm(a, b)
            times, start = [], time.perf_counter()
            while len(times) < 5 or (time.perf_counter() - start < 1.0 and len(times) < 200):
                t0 = time.perf_counter()
                torch.sparse.mm(a, b)
                times.append(time.perf_counter() - t0)
            s = float(np.median(times))
            moved = 8.0 * (n + 1) + 8.0 * nnz + 8.0 * n * d
            print(json.dumps({"impl": "torch.sparse.mm", "op": op, "nodes": n, "nnz": nnz, "width": d, "threads": threads,
                              "median_s": s, "gflops": 2.0 * nnz * d / s / 1e9, "gbytes_per_s": moved / s / 1e9}))


if __name__ == "__main__":
    if sys.argv[1] == "epoch":
        epoch(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    else:
        spmm(sys.argv[2], int(sys.argv[3]), [int(w) for w in sys.argv[4].split(",")])
