#!/usr/bin/env python3
"""The layers of docs/architecture.md, checked on the includes of src/loom/.

Each folder may include its own headers and those of the folders before it in LAYERS,
never one after it; and no header includes itself through a chain (an include cycle).
Prints every violation and exits 1, or prints a one-line summary and exits 0.
"""
import os
import re
import sys

# Lowest first. "." is src/loom/ itself (error.hpp).
LAYERS = [".", "tensor", "trace", "kernels", "data", "comm", "nn", "optim", "parallel", "plan", "report", "train"]
INCLUDE = re.compile(r'^\s*#include "loom/([^"]+)"')


def folder_of(rel):
    return rel.split("/")[0] if "/" in rel else "."


def main(src):
    includes = {}
    for root, _, files in os.walk(src):
        for name in files:
            if name.endswith((".hpp", ".cpp")):
                path = os.path.join(root, name)
                rel = os.path.relpath(path, src)
                with open(path, encoding="utf-8") as f:
                    includes[rel] = [m.group(1) for m in map(INCLUDE.match, f) if m]
    problems = []
    for rel, targets in sorted(includes.items()):
        mine = folder_of(rel)
        if mine not in LAYERS:
            problems.append(f"{rel}: folder '{mine}' is not in the layer list (add it to LAYERS and docs/architecture.md)")
            continue
        for target in targets:
            theirs = folder_of(target)
            if theirs in LAYERS and LAYERS.index(theirs) > LAYERS.index(mine):
                problems.append(f"{rel} includes loom/{target}: '{mine}' must not depend on '{theirs}', a layer above it")
            if target not in includes:
                problems.append(f"{rel} includes loom/{target}, which does not exist")
    # Include cycles among headers: depth-first search with colours.
    state = {}

    def visit(node, chain):
        state[node] = "open"
        for target in includes.get(node, []):
            if state.get(target) == "open":
                cycle = chain[chain.index(target):] + [target] if target in chain else [node, target]
                problems.append("include cycle: " + " -> ".join(cycle))
            elif target in includes and target not in state:
                visit(target, chain + [target])
        state[node] = "done"

    for node in sorted(includes):
        if node not in state:
            visit(node, [node])
    for p in problems:
        print(p)
    if problems:
        print(f"layers: {len(problems)} problem(s)")
        return 1
    print(f"layers: {len(includes)} files, {len(LAYERS)} layers, no upward include, no include cycle")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "src/loom"))
