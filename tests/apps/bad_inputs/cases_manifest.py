"""Sharded checkpoints' manifest.json: the file, its JSON, its records of tensors, pieces,
files, layout and step."""
import json
import os
import struct
import zlib
from pathlib import Path

from run import Case

CLASS = "manifest"


def cases(fx):
    rows = []

    def sample(what, run, expect):
        rows.append(Case(what, ["sample", "--checkpoint", run, "--tokens", "4"], expect))

    def edit(what, change, expect):
        sample(what, fx.edit_manifest(what, change), expect)

    def resume(what, change, expect):
        """train --resume latest from the sharded run whose manifest went through change."""
        run = fx.edit_manifest(what, change)
        rows.append(Case(what + " (train --resume latest)", ["train", *fx.tiny, "--steps", "2", "--checkpoint-format",
                                                             "sharded", "--out-dir", run, "--resume", "latest"], expect))

    def drop(name):
        def change(m):
            del m["tensors"][name]
            return m
        return change

    def replace_file(what, make, expect):
        """The manifest replaced by what make(path) leaves at its path."""
        run = fx.trained("sharded")
        m = Path(fx.sharded_checkpoint_dir(run)) / "manifest.json"
        os.remove(m)
        make(str(m))
        sample(what, run, expect)

    def first(m):
        return next(iter(m["tensors"].values()))

    def set_in(path, value):
        def change(m):
            node = m
            for k in path[:-1]:
                node = node[k] if not callable(k) else k(node)
            if value is None:
                del node[path[-1]]
            else:
                node[path[-1]] = value
            return m
        return change

    piece = lambda m: first(m)["pieces"][0]  # noqa: E731
    rank_file = lambda m: next(iter(m["files"].values()))  # noqa: E731
    where = "manifest"

    replace_file("missing (a crashed writer): no complete checkpoint", lambda p: None, r"no complete checkpoint in")
    replace_file("a directory", lambda p: os.mkdir(p), r"manifest.json' is a directory")
    replace_file("a FIFO", lambda p: os.mkfifo(p), r"manifest.json' is a FIFO")
    replace_file("257 MiB (sparse)", lambda p: open(p, "wb").truncate(257 << 20), r"more than the limit of 256")
    edit("empty", lambda m: "", where)
    edit("not JSON", lambda m: "{ not json", where)
    edit("a JSON array", lambda m: "[]", where)
    edit("JSON nested 100000 deep", lambda m: "[" * 100000 + "]" * 100000, where)
    edit("format unknown", set_in(["format"], "zip"), r"is not a Loom checkpoint manifest")
    edit("format_version 99", set_in(["format_version"], 99), r"version")
    edit("format_version a string", set_in(["format_version"], "1"), where)
    edit("step differs from its directory", set_in(["step"], 7), r"step")
    edit("step negative", set_in(["step"], -1), r"step")
    edit("no tensors", set_in(["tensors"], {}), r"model\.")
    edit("a tensor missing", lambda m: m["tensors"].pop(next(iter(m["tensors"]))) and m, r"model\.blocks\.0\.attn\.proj\.bias")
    edit("tensors a list", set_in(["tensors"], []), r"has no tensor 'model\.")
    # A resume needs the optimizer state too: a tensor taken out is named, never left at its
    # initial values.
    resume("a parameter missing", drop("model.blocks.0.mlp.fc.weight"),
           r"checkpoint '.*' has no tensor 'model\.blocks\.0\.mlp\.fc\.weight' \(64, 16\)")
    resume("an AdamW moment missing", drop("optim.exp_avg_sq.ln_f.bias"),
           r"checkpoint '.*' has no tensor 'optim\.exp_avg_sq\.ln_f\.bias' \(16\)")
    edit("a tensor's shape negative", lambda m: (first(m).__setitem__("shape", [-16]), m)[1], where)
    edit("a tensor's shape of 2^62 elements", lambda m: (first(m).__setitem__("shape", [1 << 31, 1 << 31]), m)[1], where)
    edit("a piece past its tensor's end", set_in([piece, "end"], 1 << 40), where)
    edit("a piece reversed", set_in([piece, "begin"], 17), where)
    edit("a piece in an unlisted file", set_in([piece, "file"], "rank-00009.safetensors"), r"rank-00009")
    edit("a piece's file '../../etc/passwd'", set_in([piece, "file"], "../../etc/passwd"), r"passwd")
    edit("a piece's key unknown", set_in([piece, "key"], "model.nothing"), r"model\.nothing")
    edit("a piece's CRC wrong", set_in([piece, "crc32"], 1), r"crc|CRC|checksum|corrupt")
    edit("a piece's second split given in part",
         set_in([piece, "slice"], {"dim": 0, "parts": 1, "index": 0, "blocks": 1, "dim2": 0}),
         r"a second split needs dim2, parts2 and index2 together")
    edit("a piece's second split out of range",
         set_in([piece, "slice"], {"dim": 0, "parts": 1, "index": 0, "blocks": 1, "dim2": 0, "parts2": 1, "index2": 1}),
         r"second slice \(dim 0, part 1 of 1\) does not fit shape")
    edit("layout tp_3d not a grid", set_in(["layout", "tp_3d"], "2,2"), r"invalid layout: tp_3d must be")
    edit("pieces that do not cover the tensor", lambda m: (first(m)["pieces"].clear(), m)[1], where)
    edit("a rank file's CRC wrong", set_in([rank_file, "crc32"], 1), r"rank file 'rank-00000.safetensors' is corrupted")
    edit("a rank file's CRC -1", set_in([rank_file, "crc32"], -1), r"rank-00000.safetensors")
    edit("a rank file's size wrong", set_in([rank_file, "bytes"], 5), r"rank-00000.safetensors")
    edit("files empty", set_in(["files"], {}), r"rank-00000.safetensors")
    edit("layout tp 0", set_in(["layout", "tp"], 0), r"invalid layout dp 1, pp 1, tp 0")
    edit("layout missing", set_in(["layout"], None), where)
    edit("config not TOML", set_in(["config"], "[model\n"), r"configuration|TOML")
    edit("tokenizer garbage", set_in(["tokenizer"], "bpe:xyz"), r"tokenizer")
    edit("tokenizer missing", set_in(["tokenizer"], None), r"tokenizer")
    edit("optimizer_steps a string", set_in(["optimizer_steps"], "many"), where)
    edit("optimizer_steps -7", set_in(["optimizer_steps"], -7), r"manifest\.json': invalid optimizer_steps -7")
    edit("tensors missing", set_in(["tensors"], None), r"manifest\.json': missing or invalid field 'tensors'")
    edit("a rank file's entry without bytes", set_in([rank_file, "bytes"], None),
         r"manifest\.json': missing or invalid field 'files\.rank-00000\.safetensors'")

    # A NaN weight in a rank file, every checksum recomputed: refused naming the tensor.
    run = fx.trained("sharded")
    d = Path(fx.sharded_checkpoint_dir(run))
    m = json.loads((d / "manifest.json").read_text())
    name, tensor = next((k, t) for k, t in m["tensors"].items() if k.startswith("model."))
    piece = tensor["pieces"][0]
    rank_path = d / piece["file"]
    header, data = fx.read_safetensors(rank_path)
    begin, end = header[piece["key"]]["data_offsets"]
    data = data[:begin] + struct.pack("<f", float("nan")) + data[begin + 4:]
    header["__metadata__"]["loom.crc32"] = str(zlib.crc32(data))
    fx.write_safetensors(rank_path, header, data)
    piece["crc32"] = zlib.crc32(data[begin:end])
    m["files"][piece["file"]] = {"bytes": rank_path.stat().st_size, "crc32": zlib.crc32(rank_path.read_bytes())}
    (d / "manifest.json").write_text(json.dumps(m, indent=1))
    sample("a NaN weight in a rank file (checksums recomputed)", run,
           r"checkpoint '.*checkpoint-00000001': tensor '" + name.replace(".", r"\.") + r"' holds a non-finite value \(nan at element 0\)")

    # A file of the sharded checkpoint named instead of its directory (its manifest, a rank's
    # file): refused naming the directory to give.
    for part in ("manifest.json", "rank-00000.safetensors"):
        run = fx.trained("sharded")
        path = str(Path(fx.sharded_checkpoint_dir(run)) / part)
        expect = r"'.*checkpoint-00000001/" + part.replace(".", r"\.") + \
                 r"' is a file of the sharded checkpoint '.*checkpoint-00000001': give that directory"
        rows.append(Case(f"train --resume its {part}", ["train", *fx.tiny, "--steps", "2", *fx.out(f"resume-{part}"),
                                                        "--resume", path], expect))
        rows.append(Case(f"convert --from its {part}", ["convert", "--from", path, "--to", fx.path(f"{part}.safetensors")],
                         expect))
        sample(f"sample --checkpoint its {part}", path, expect)
    return rows
