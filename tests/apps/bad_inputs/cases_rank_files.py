"""The rank files of a sharded checkpoint: missing, special files, truncated, damaged, from
another checkpoint."""
import os
import shutil
from pathlib import Path

from run import Case

CLASS = "rank files"


def cases(fx):
    rows = []

    def damage(what, change, expect, resume=False):
        run = fx.trained("sharded")
        f = Path(fx.sharded_checkpoint_dir(run)) / "rank-00000.safetensors"
        change(f)
        if resume:
            rows.append(Case(what + " (train --resume latest)", ["train", *fx.tiny, "--steps", "2", "--checkpoint-format",
                                                                  "sharded", "--out-dir", run, "--resume", "latest"], expect))
        else:
            rows.append(Case(what, ["sample", "--checkpoint", run, "--tokens", "4"], expect))

    def rewrite(content):
        return lambda f: f.write_bytes(content(f.read_bytes()))

    def special(make):
        def change(f):
            os.remove(f)
            make(str(f))
        return change

    name = r"rank-00000.safetensors"
    damage("missing", lambda f: os.remove(f), r"missing its rank file 'rank-00000.safetensors'")
    damage("a directory", special(os.mkdir), r"rank-00000.safetensors' is a directory")
    damage("a FIFO", special(os.mkfifo), r"rank-00000.safetensors' is a FIFO")
    damage("a FIFO", special(os.mkfifo), r"rank-00000.safetensors' is a FIFO", resume=True)
    damage("a link to /dev/zero", special(lambda p: os.symlink("/dev/zero", p)), r"character device")
    damage("a link to itself", special(lambda p: os.symlink(os.path.basename(p), p)), r"symbolic link loop|rank-00000")
    damage("empty", rewrite(lambda b: b""), name)
    damage("cut in half", rewrite(lambda b: b[: len(b) // 2]), name)
    damage("one bit flipped (in the optimizer state sample never reads)", rewrite(lambda b: b[:-50] + bytes([b[-50] ^ 4]) + b[-49:]),
           r"rank file 'rank-00000.safetensors' is corrupted")
    damage("one bit flipped", rewrite(lambda b: b[:-50] + bytes([b[-50] ^ 4]) + b[-49:]), name, resume=True)
    damage("4 KiB of zeros appended", rewrite(lambda b: b + b"\0" * 4096), name)

    def from_other(f):
        other = fx.trained("single")
        shutil.copy(fx.checkpoint_file(other), f)
    damage("another checkpoint's file in its place", from_other, name)
    return rows
