"""The run directory (--out-dir) and what is in it: not a directory, another run, a lock."""
import json
import os
import socket
from pathlib import Path

from run import Case

CLASS = "out_dir"


def cases(fx):
    def train(what, out, expect, extra=()):
        return Case(what, ["train", *fx.tiny, "--steps", "1", *extra, "--out-dir", out], expect)

    a_file = fx.file("outfile", "not a directory")
    other_run = fx.trained("single")
    locked = fx.directory("locked")
    # A live owner: this process (the harness) outlives the case.
    Path(locked, ".loom.lock").write_text(json.dumps({"host": socket.gethostname(), "pid": os.getpid()}))
    tokenize_in = fx.file("tok-in.txt", "hello world " * 100)
    garbage_lock = fx.directory("garbage-lock")
    Path(garbage_lock, ".loom.lock").write_text("\x00\x01 not json")
    return [
        train("empty", "", r"out_dir is empty"),
        train("a regular file", a_file, r"out_dir '.*outfile' is a regular file, not a directory"),
        train("a path below a file", a_file + "/run", r"outfile/run"),
        train("/dev/null", "/dev/null", r"/dev/null"),
        train("a FIFO", fx.fifo("out.fifo"), r"out.fifo"),
        train("a symbolic link loop", fx.link_loop("outloop"), r"outloop"),
        train("holds another run's checkpoints", other_run, r"overwrite|resume"),
        train("held by a live run (lock file)", locked, r"lock file"),
        train("a lock file that is not JSON", garbage_lock, r"lock file"),
        train("resume latest in an empty directory", fx.directory("empty-run"), r"resume = 'latest', but out_dir '.*empty-run' holds no checkpoint .*: --resume auto starts fresh where there is none",
              ["--resume", "latest"]),
        Case("tokenize OUT is IN", ["tokenize", tokenize_in, tokenize_in], r"is the input text .* itself"),
        Case("tokenize OUT a directory", ["tokenize", fx.file("tok-in2.txt", "hello world " * 100), fx.directory("tok-dir")],
             r"OUT '.*tok-dir' is a directory"),
        Case("convert --to ''", ["convert", "--from", other_run, "--to", ""], r"--to is empty"),
        Case("convert --to a file", ["convert", "--from", other_run, "--to", a_file], r"outfile"),
        Case("convert --to an existing .safetensors", ["convert", "--from", other_run, "--to",
             fx.file("precious.safetensors", "a file convert must not replace")], r"precious.safetensors' exists"),
        Case("pipeline_svg in a missing directory (np 2)", ["train", *fx.tiny, "--steps", "1", "--n-layer", "2", "--pp", "2",
             "--pipeline-svg", "/nonexistent/dir/p.svg", *fx.out()], r"/nonexistent/dir/p.svg", ranks=2, slow=True),
    ]
