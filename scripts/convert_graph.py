#!/usr/bin/env python3
"""Writes a graph in Loom's text format (docs/graphs.md) for `loom train --model gcn`.

    convert_graph.py npz  GRAPH.npz  OUT_PREFIX
    convert_graph.py linqs PREFIX    OUT_PREFIX

npz: arrays edge_index (2, E) ints, x (N, F) floats, y (N,) ints (-1: unlabelled) and
optionally train_mask, val_mask, test_mask (N,) booleans -- the layout of a PyTorch
Geometric `Data` object saved with numpy.savez(path, edge_index=..., x=..., y=..., ...),
and of OGB node-property exports. linqs: <PREFIX>.content and <PREFIX>.cites (classes
numbered in sorted order of their names, as Loom's LINQS reader does; no split).
Writes OUT_PREFIX.edges, OUT_PREFIX.features and OUT_PREFIX.labels, or, when OUT_PREFIX
ends in .lgraph, that one file in Loom's binary format (src/loom/data/binary_graph.cpp),
which loads without parsing text. Needs numpy.
"""
import sys

import numpy as np


def read_npz(path):
    data = np.load(path)
    for key in ("edge_index", "x", "y"):
        if key not in data:
            sys.exit(f"{path}: missing array '{key}' (has {sorted(data.keys())})")
    n = data["x"].shape[0]
    split = np.array(["none"] * n, dtype=object)
    for name in ("train", "val", "test"):
        if f"{name}_mask" in data:
            split[np.asarray(data[f"{name}_mask"], dtype=bool)] = name
    return np.asarray(data["edge_index"]), np.asarray(data["x"], dtype=np.float32), np.asarray(data["y"]).reshape(-1), split


def read_linqs(prefix):
    ids, rows, classes = [], [], []
    with open(prefix + ".content") as f:
        for number, line in enumerate(f, 1):
            fields = line.split()
            if not fields:
                continue
            if len(fields) < 3:
                sys.exit(f"{prefix}.content:{number}: expected '<paper id> <features...> <class>'")
            ids.append(int(fields[0]))
            rows.append([float(v) for v in fields[1:-1]])
            classes.append(fields[-1])
    index = {paper: i for i, paper in enumerate(ids)}
    names = sorted(set(classes))
    y = np.array([names.index(c) for c in classes])
    edges = []
    with open(prefix + ".cites") as f:
        for number, line in enumerate(f, 1):
            fields = line.split()
            if not fields:
                continue
            try:
                cited, citing = index[int(fields[0])], index[int(fields[1])]
            except (KeyError, ValueError, IndexError):
                sys.exit(f"{prefix}.cites:{number}: unknown paper id or malformed line")
            edges.append((citing, cited))
    edge_index = np.array(edges, dtype=np.int64).T.reshape(2, -1)
    return edge_index, np.array(rows, dtype=np.float32), y, np.array(["none"] * len(ids), dtype=object)


def write(prefix, edge_index, x, y, split):
    n = x.shape[0]
    if edge_index.size and (edge_index.min() < 0 or edge_index.max() >= n):
        sys.exit(f"edge_index names nodes outside 0..{n - 1}")
    np.savetxt(prefix + ".edges", edge_index.T, fmt="%d", header="src dst", comments="# ")
    np.savetxt(prefix + ".features", x, fmt="%.9g", header=f"{n} nodes x {x.shape[1]} features", comments="# ")
    with open(prefix + ".labels", "w") as f:
        f.write("# class split\n")
        for label, part in zip(y, split):
            f.write(f"{int(label)} {part}\n")


def write_binary(path, edge_index, x, y, split):
    n, f = x.shape
    if edge_index.size and (edge_index.min() < 0 or edge_index.max() >= n):
        sys.exit(f"edge_index names nodes outside 0..{n - 1}")
    codes = {"none": 0, "train": 1, "val": 2, "test": 3}
    classes = int(np.max(y)) + 1 if len(y) else 0
    with open(path, "wb") as out:
        out.write(b"LOOMGRPH")
        out.write(np.array([1, 0], dtype="<u4").tobytes())  # version, reserved
        out.write(np.array([n, edge_index.shape[1], f, classes], dtype="<i8").tobytes())
        out.write(np.ascontiguousarray(edge_index[0], dtype="<i8").tobytes())
        out.write(np.ascontiguousarray(edge_index[1], dtype="<i8").tobytes())
        out.write(np.ascontiguousarray(x, dtype="<f4").tobytes())
        out.write(np.ascontiguousarray(y, dtype="<i4").tobytes())
        out.write(np.array([codes[s] for s in split], dtype="<i1").tobytes())


def main():
    if len(sys.argv) != 4 or sys.argv[1] not in ("npz", "linqs"):
        sys.exit(__doc__)
    kind, source, out = sys.argv[1:]
    graph = read_npz(source) if kind == "npz" else read_linqs(source)
    if out.endswith(".lgraph"):
        write_binary(out, *graph)
        print(f"wrote {out}")
        return
    write(out, *graph)
    print(f"wrote {out}.edges, {out}.features, {out}.labels")


if __name__ == "__main__":
    main()
