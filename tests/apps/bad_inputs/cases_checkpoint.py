"""Single-file checkpoints (safetensors) given to `loom sample`, `loom train --resume` and
`loom convert`: truncated, damaged headers, tensors and metadata, links, another model."""
import os
import struct
import zlib
from pathlib import Path

from run import Case

CLASS = "checkpoint file"


def cases(fx):
    rows = []

    def sample(what, run, expect):
        rows.append(Case(what, ["sample", "--checkpoint", run, "--tokens", "4"], expect))

    def first_tensor(h):
        return next(k for k in h if k != "__metadata__")

    def raw(what, content, expect):
        """A run whose checkpoint file is replaced by these bytes (a function of the original)."""
        run = fx.trained("single")
        path = Path(fx.checkpoint_file(run))
        path.write_bytes(content(path.read_bytes()))
        sample(what, run, expect)

    def header(what, edit, expect):
        def apply(h):
            edit(h)
            return h
        sample(what, fx.edit_checkpoint(what, apply), expect)

    def meta(key, value):
        def edit(h):
            if value is None:
                del h["__metadata__"][key]
            else:
                h["__metadata__"][key] = value
        return edit

    def tensor(field, value):
        def edit(h):
            h[first_tensor(h)][field] = value
        return edit

    name = r"checkpoint-00000001.safetensors"
    raw("empty file", lambda b: b"", name)
    raw("4 bytes", lambda b: b[:4], name)
    raw("cut after the header", lambda b: b[:8 + struct.unpack("<Q", b[:8])[0]], name)
    raw("cut in the middle of the data", lambda b: b[: len(b) // 2], name)
    raw("header length 2^63", lambda b: struct.pack("<Q", 1 << 63) + b[8:], name)
    raw("header length past the end", lambda b: struct.pack("<Q", len(b)) + b[8:], name)
    raw("header not JSON", lambda b: struct.pack("<Q", 8) + b"not json" + b[8 + struct.unpack("<Q", b[:8])[0]:], name)
    raw("header a JSON array", lambda b: struct.pack("<Q", 2) + b"[]", name)
    raw("header JSON nested 100000 deep", lambda b: struct.pack("<Q", 200000) + b"[" * 100000 + b"]" * 100000, name)
    raw("one data bit flipped", lambda b: b[:-100] + bytes([b[-100] ^ 1]) + b[-99:], r"corrupted: checksum")
    raw("zeros appended", lambda b: b + b"\0" * 64, name)
    header("unknown dtype", tensor("dtype", "F128"), r"dtype|F128")
    header("dtype a number", tensor("dtype", 7), name)
    header("shape with a negative size", tensor("shape", [-16]), name)
    header("shape of 2^62 elements", tensor("shape", [1 << 31, 1 << 31]), name)
    header("shape disagreeing with the offsets", tensor("shape", [17]), name)
    header("offsets past the data", tensor("data_offsets", [0, 1 << 40]), name)
    header("offsets reversed", tensor("data_offsets", [64, 0]), name)
    header("offsets not numbers", tensor("data_offsets", ["a", "b"]), name)
    header("a tensor's entry removed from the header", lambda h: h.pop(first_tensor(h)), r"tensor '.*' has invalid data offsets")
    header("an unknown tensor added", lambda h: h.__setitem__("model.extra", {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]}),
           r"model\.extra")
    header("no metadata", lambda h: h.pop("__metadata__"), name)
    header("metadata: CRC missing", meta("loom.crc32", None), r"has no checksum")
    header("metadata: CRC not a number", meta("loom.crc32", "abc"), r"does not match the recorded abc")
    header("metadata: CRC wrong", meta("loom.crc32", "12345"), r"does not match the recorded 12345")
    header("metadata: kind not a checkpoint", meta("loom.kind", "weights"), name)
    header("metadata: format_version 99", meta("loom.format_version", "99"), r"format_version|version")
    header("metadata: step 'abc'", meta("step", "abc"), r"step")
    header("metadata: config not TOML", meta("config", "[model\nn_layer = "), r"stored configuration")
    header("metadata: config n_layer 10^8", meta("config", "[model]\nn_layer = 100000000\nn_head = 2\nn_embd = 16\n"),
           r"needs .* more than the")
    header("metadata: config n_head 3 (not the weights')", meta("config", "[model]\nn_layer = 1\nn_head = 3\nn_embd = 16\n"),
           r"n_embd \(16\) must be divisible by n_head \(3\)")
    header("metadata: config of a 2-layer model", meta("config", "[model]\nn_layer = 2\nn_head = 2\nn_embd = 16\nblock_size = 16\n"),
           r"model\.blocks\.1")
    header("metadata: config a number key nan", meta("config", "[optim]\nlr = nan\n"), r"lr must be a finite number")
    header("metadata: tokenizer missing", meta("tokenizer", None), r"tokenizer")
    # The CRC covers only the data: the step counts are checked for what they are.
    header("metadata: step -5", meta("step", "-5"), name + r"': invalid step '-5' \(a count of steps, an integer >= 0\)")
    header("metadata: step '1x'", meta("step", "1x"), name + r"': invalid step '1x'")
    header("metadata: optimizer_steps -3", meta("optimizer_steps", "-3"), name + r"': invalid optimizer_steps '-3'")
    raw("one byte appended", lambda b: b + b"\0",
        name + r"' is longer than its header says: (\d+) data bytes, the header says \d+ \(1 extra\)")
    raw("one byte cut off the end", lambda b: b[:-1], name + r"' is truncated: \d+ data bytes, its header says \d+")

    def poison(value, tensor="model.lm_head.weight"):
        """A weight set to value, the CRC recomputed: a file as a diverged run (or an editor) leaves it."""
        def edit(h):
            _, data = fx.read_safetensors(fx.checkpoint_file(fx._trained["single"]))
            key = tensor if tensor in h else next(k for k in sorted(h) if k.startswith("model."))
            at = h[key]["data_offsets"][0] + 4 * 3
            data = data[:at] + struct.pack("<f", value) + data[at + 4:]
            h["__metadata__"]["loom.crc32"] = str(zlib.crc32(data))
            return h, data
        return edit

    nan = float("nan")
    sample("a NaN weight (checksum recomputed)", fx.edit_checkpoint("nan", poison(nan)),
           name + r"': tensor 'model\.[\w.]+' holds a non-finite value \(nan at element 3\)")
    sample("an infinite weight (checksum recomputed)", fx.edit_checkpoint("inf", poison(float("inf"))),
           name + r"': tensor 'model\.[\w.]+' holds a non-finite value \(inf at element 3\)")
    rows.append(Case("eval: a NaN weight", ["eval", "--checkpoint", fx.edit_checkpoint("nan", poison(nan)), "--data", fx.data],
                     name + r"': tensor 'model\.[\w.]+' holds a non-finite value \(nan"))
    run = fx.edit_checkpoint("nan", poison(nan))
    rows.append(Case("resume from a NaN weight", ["train", *fx.tiny, "--steps", "2", "--out-dir", run, "--resume", "latest"],
                     name + r"': tensor 'model\.[\w.]+' holds a non-finite value \(nan"))
    # Renamed, so the name's step does not catch it first: the resume of the report ("resumed at step -5").
    run = fx.edit_checkpoint("step", meta("step", "-5"))
    renamed = str(Path(run) / "mine.safetensors")
    os.rename(fx.checkpoint_file(run), renamed)
    rows.append(Case("resume from a renamed file with step -5", ["train", *fx.tiny, "--steps", "2", *fx.out(), "--resume",
                                                                 renamed], r"mine\.safetensors': invalid step '-5'"))

    # Links and directories: what `latest` names.
    run = fx.trained("single")
    os.remove(Path(run, "latest"))
    os.symlink("checkpoint-99999999.safetensors", Path(run, "latest"))
    os.remove(fx.checkpoint_file(fx._trained["single"]).replace(str(fx._trained["single"]), run))
    sample("latest names a missing file, no other checkpoint", run, r"no complete checkpoint in")
    run = fx.trained("single")
    os.remove(Path(run, "latest"))
    os.symlink("latest", Path(run, "latest"))
    sample("latest points at itself", run, r"symbolic link loop")

    # Resuming: another model's checkpoint is refused naming the keys, before anything is written.
    run = fx.trained("single")
    rows.append(Case("resume into a 2-layer model", ["train", *fx.tiny, "--n-layer", "2", "--steps", "2", "--out-dir", run,
                                                      "--resume", "latest"], r"n_layer"))
    run = fx.trained("single")
    rows.append(Case("resume with the byte tokenizer", ["train", *fx.tiny, "--tokenizer", "byte", "--steps", "2", "--out-dir",
                                                         run, "--resume", "latest"], r"tokenizer|vocab"))
    run = fx.trained("single")
    rows.append(Case("resume a file that is not a checkpoint", ["train", *fx.tiny, "--steps", "2", *fx.out(), "--resume",
                                                                 fx.file("junk.safetensors", b"\0" * 100)], r"junk.safetensors"))
    rows.append(Case("convert from a missing checkpoint", ["convert", "--from", "/nonexistent/c", "--to", fx.path("conv")],
                     r"/nonexistent/c"))
    return rows
