"""Graphs for `loom train --model gcn` (--data <prefix>): the LINQS citation format
(<prefix>.content + <prefix>.cites), Loom's text format (<prefix>.edges, .features, .labels),
its binary format (.lgraph) and R-MAT specifications (rmat:...)."""
import os
import struct
from pathlib import Path

from run import Case

CLASS = "graph"

# A valid 3-node graph in each format; each case replaces one file.
CONTENT = "10 1 0 a\n20 0 1 b\n30 1 1 a\n"
CITES = "10 20\n20 30\n"
FEATURES = "1 0\n0 1\n1 1\n"
LABELS = "0 train\n1 val\n0 test\n"
EDGES = "0 1\n1 2\n"


def cases(fx):
    def graph(name, files):
        """A prefix with the given files: a str is written, "dir" makes a directory, "fifo" a FIFO."""
        prefix = fx.path(name)
        for ext, content in files.items():
            p = prefix + "." + ext
            if content == "dir":
                os.makedirs(p)
            elif content == "fifo":
                os.mkfifo(p)
            else:
                Path(p).write_text(content)
        return prefix

    def train(what, prefix, expect, split="0:1,1:2,2:3", extra=()):
        split_args = ["--split", split] if split else []
        return Case(what, ["train", "--model", "gcn", "--data", prefix, "--steps", "1", "--threads", "1",
                           *split_args, *extra, *fx.out()], expect)

    def linqs(what, content=CONTENT, cites=CITES, expect="", extra=()):
        return train("LINQS: " + what, graph("linqs", {"content": content, "cites": cites}), expect, extra=extra)

    def text(what, features=FEATURES, labels=LABELS, edges=EDGES, expect="", split="0:1,1:2,2:3", extra=()):
        return train("text graph: " + what, graph("tg", {"features": features, "labels": labels, "edges": edges}),
                     expect, split, extra)

    def lgraph(what, expect, features=(1, 0, 0, 1, 1, 1), labels=(0, 1, 0), split=(1, 2, 3), classes=2):
        """A 3-node, 2-feature binary graph (edges 0-1, 1-2) with these values."""
        body = (b"LOOMGRPH" + struct.pack("<II", 1, 0) + struct.pack("<4q", 3, 2, 2, classes) +
                struct.pack("<2q", 0, 1) + struct.pack("<2q", 1, 2) + struct.pack("<6f", *features) +
                struct.pack("<3i", *labels) + struct.pack("<3b", *split))
        prefix = fx.directory("lgraph")
        Path(prefix, "g.lgraph").write_bytes(body)
        return train("binary graph: " + what, os.path.join(prefix, "g.lgraph"), expect, split="")

    return [
        train("no graph files at the prefix", fx.path("nograph"), r"no graph at '.*nograph'"),
        linqs("empty .content (no nodes)", content="", expect=r"\.content: empty graph \(no nodes\)"),
        linqs("a .content row with only an id and a class", content="10 a\n", expect=r"\.content:1: expected '<paper id> <features...> <class>', got 2 field"),
        linqs("ragged .content rows", content="10 1 0 a\n20 1 b\n30 1 1 a\n", expect=r"\.content:2: 1 feature values, expected 2"),
        linqs("a paper id that is not a number", content="x10 1 0 a\n20 0 1 b\n30 1 1 a\n", expect=r"paper id must be an integer, got 'x10'"),
        linqs("a paper id twice", content="10 1 0 a\n10 0 1 b\n30 1 1 a\n", expect=r"paper id 10 appears twice"),
        linqs("a feature that is not a number", content="10 1 zz a\n20 0 1 b\n30 1 1 a\n", expect=r"feature must be a finite number, got 'zz'"),
        linqs("a feature 'nan'", content="10 1 nan a\n20 0 1 b\n30 1 1 a\n", expect=r"feature must be a finite number, got 'nan'"),
        linqs(".cites naming a missing paper id", cites="10 20\n20 99\n", expect=r"\.cites:2: paper id 99 is not in"),
        linqs(".cites with a negative id", cites="-5 20\n", expect=r"paper id -5 is not in"),
        linqs(".cites with three fields", cites="10 20 30\n", expect=r"\.cites.*expected '<cited id> <citing id>', got 3 field"),
        linqs(".cites id past int64", cites="10 99999999999999999999\n", expect=r"paper id must be an integer, got '99999999999999999999'"),
        train("LINQS: .content is a directory", graph("linqsdir", {"content": "dir", "cites": CITES}), r"\.content' is a directory, not a regular file"),
        train("LINQS: .cites is a FIFO (would block)", graph("linqsfifo", {"content": CONTENT, "cites": "fifo"}), r"\.cites' is a FIFO \(named pipe\), not a regular file"),
        train("LINQS: .cites missing", graph("linqsnocites", {"content": CONTENT}), r"\.cites"),
        train("LINQS: default split (pygcn's) on a 3-node graph",
              graph("linqsnosplit", {"content": CONTENT, "cites": CITES}), r"goes past the 3", split=""),
        text("empty .features (no nodes)", features="", expect=r"\.features: empty graph \(no nodes\)"),
        text("ragged .features rows", features="1 0\n0\n1 1\n", expect=r"\.features:2: 1 feature values, expected 2"),
        text("a label missing", labels="0 train\n1 val\n", expect=r"\.labels: 2 labels for the 3 nodes"),
        text("more labels than nodes", labels=LABELS + "1 none\n", expect=r"more labels than the 3 nodes"),
        text("a class below -1", labels="0 train\n-2 val\n0 test\n", expect=r"\.labels:2: class must be -1 or in 0\.\.65535 \(at most 65536 classes\), got -2"),
        text("a class of 10^9", labels="0 train\n1000000000 val\n0 test\n",
             expect=r"tg\.labels:2: class must be -1 or in 0\.\.65535 \(at most 65536 classes\), got 1000000000"),
        text("a single class among the labelled nodes", labels="0 train\n0 val\n-1 none\n", split="",
             expect=r"tg\.labels: the labelled nodes hold 1 class; node classification needs at least 2"),
        linqs("a single class (every paper 'a')", content="10 1 0 a\n20 0 1 a\n30 1 1 a\n",
              expect=r"linqs\.content: the labelled nodes hold 1 class; node classification needs at least 2"),
        text("an unknown split word", labels="0 train\n1 validate\n0 test\n", expect=r"split must be train, val, test or none, got 'validate'"),
        text("an unlabelled node in a split", labels="0 train\n-1 val\n0 test\n", expect=r"unlabelled node \(class -1\) cannot be in a split"),
        text("an edge to node N (out of range)", edges="0 1\n1 3\n", expect=r"\.edges:2: node 3 is out of range: the graph has 3 nodes"),
        text("an edge from a negative node", edges="-1 0\n", expect=r"node -1 is out of range"),
        text("an edge with one end", edges="0\n", expect=r"\.edges.*expected '<src> <dst>', got 1 field"),
        text("an edge end that is not a number", edges="0 one\n", expect=r"node index must be an integer, got 'one'"),
        # A grid counts each block's entries when the graph is opened: that pass meets them first.
        text("an edge to node N, on a 3D grid", edges="0 1\n1 3\n", extra=("--tp-3d", "1,1,1"),
             expect=r"\.edges:2: node 3 is out of range: the graph has 3 nodes"),
        text("an edge with one end, on a 3D grid", edges="0 1\n0\n", extra=("--tp-3d", "1,1,1"),
             expect=r"\.edges:2: expected '<src> <dst>', got 1 field"),
        linqs("a cited paper not in .content, on a 3D grid", cites="10 20\n20 40\n", extra=("--tp-3d", "1,1,1"),
              expect=r"\.cites:2: paper id 40 is not in .*linqs\.content"),
        train("text graph: .features is a directory", graph("tgdir", {"features": "dir", "labels": LABELS, "edges": EDGES}), r"\.features' is a directory, not a regular file"),
        train("text graph: .edges is a FIFO (would block)", graph("tgfifo", {"features": FEATURES, "labels": LABELS, "edges": "fifo"}), r"\.edges' is a FIFO \(named pipe\), not a regular file"),
        text("a split range past the graph", expect=r"range 2:9 goes past the 3", split="0:1,1:2,2:9"),
        lgraph("a NaN feature", expect=r"g\.lgraph: node 1 has feature 0 = nan, not a finite number", features=[1, 0, float("nan"), 1, 1, 1]),
        lgraph("an infinite feature", expect=r"g\.lgraph: node 2 has feature 1 = -inf, not a finite number",
               features=[1, 0, 0, 1, 1, float("-inf")]),
        lgraph("10^9 classes in the header", expect=r"g\.lgraph: impossible sizes in the header: .*K 1000000000 \(at most 65536 classes\)",
               classes=10 ** 9),
        lgraph("a single class among the labelled nodes", expect=r"g\.lgraph: the labelled nodes hold 1 class", labels=[0, 0, -1],
               split=[1, 2, 0]),
        train("R-MAT: a key given twice", "rmat:scale=4,scale=5", r"'rmat:scale=4,scale=5': R-MAT key 'scale' is given twice", split=""),
        train("R-MAT: seed -1", "rmat:scale=4,seed=-1", r"'rmat:scale=4,seed=-1': seed must be >= 0, got -1", split=""),
    ]
