"""`loom convert --from-gpt2 DIR`: a GPT-2 checkpoint directory as its releases ship it
(config.json, model.safetensors, vocab.json, merges.txt), here tiny (1 block, 8 wide, zero
weights) and written by hand, each case breaking one thing."""
import json
import os
import struct
import sys
from pathlib import Path

from run import Case, ROOT

sys.path.insert(0, str(ROOT / "tests" / "data"))
from gpt2_bpe_reference import BYTE_ENCODER  # noqa: E402  (GPT-2's byte-to-unicode table)

CLASS = "gpt2 checkpoint"

C, NH, L, T = 8, 2, 1, 8
MERGES = ["Ġ t", "h e"]


def vocabulary():
    vocab = {ch: i for i, ch in enumerate(BYTE_ENCODER.values())}
    for m in MERGES:
        vocab[m.replace(" ", "")] = len(vocab)
    vocab["<|endoftext|>"] = len(vocab)
    return vocab


V = len(vocabulary())
CONFIG = {"model_type": "gpt2", "activation_function": "gelu_new", "n_positions": T, "n_ctx": T, "n_embd": C,
          "n_layer": L, "n_head": NH, "vocab_size": V, "layer_norm_epsilon": 1e-5, "n_inner": None}


def shapes():
    """GPT-2's tensor names and shapes (Conv1D weights input-major)."""
    s = {"wte.weight": [V, C], "wpe.weight": [T, C], "ln_f.weight": [C], "ln_f.bias": [C]}
    for l in range(L):
        h = f"h.{l}."
        s.update({h + "ln_1.weight": [C], h + "ln_1.bias": [C], h + "ln_2.weight": [C], h + "ln_2.bias": [C],
                  h + "attn.c_attn.weight": [C, 3 * C], h + "attn.c_attn.bias": [3 * C],
                  h + "attn.c_proj.weight": [C, C], h + "attn.c_proj.bias": [C],
                  h + "mlp.c_fc.weight": [C, 4 * C], h + "mlp.c_fc.bias": [4 * C],
                  h + "mlp.c_proj.weight": [4 * C, C], h + "mlp.c_proj.bias": [C]})
    return s


def safetensors(tensors, dtype="F32"):
    """An F32 safetensors file of zeros with the given names and shapes."""
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, shape in tensors.items():
        n = 4
        for d in shape:
            n *= d
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + bytes(offset)


def cases(fx):
    def gpt2_dir(name, config=None, model=None, vocab=None, merges=None, drop=()):
        d = Path(fx.path(name))
        d.mkdir()
        files = {"config.json": json.dumps(CONFIG) if config is None else config,
                 "model.safetensors": safetensors(shapes()) if model is None else model,
                 "vocab.json": json.dumps(vocabulary()) if vocab is None else vocab,
                 "merges.txt": "#version: 0.2\n" + "\n".join(MERGES) + "\n" if merges is None else merges}
        for f, content in files.items():
            if f not in drop:
                (d / f).write_bytes(content.encode() if isinstance(content, str) else content)
        return str(d)

    def convert(what, expect, **kw):
        return Case(what, ["convert", "--from-gpt2", gpt2_dir("gpt2", **kw), "--to", fx.path("out.safetensors")], expect)

    def config_with(**changes):
        c = dict(CONFIG)
        for k, v in changes.items():
            if v is None:
                del c[k]
            else:
                c[k] = v
        return json.dumps(c)

    def model_with(change):
        s = shapes()
        change(s)
        return safetensors(s)

    missing = model_with(lambda s: s.pop("h.0.mlp.c_fc.bias"))
    linear = model_with(lambda s: s.update({"h.0.attn.c_attn.weight": [3 * C, C]}))
    extra = model_with(lambda s: s.update({"h.1.ln_1.weight": [C]}))
    vocab_no_byte = {t: i for i, t in enumerate(t for t in vocabulary() if t != "Ġ")}  # byte 32
    return [
        Case("a directory that does not exist", ["convert", "--from-gpt2", "/nonexistent/gpt2", "--to", fx.path("o.safetensors")],
             r"GPT-2 checkpoint directory '/nonexistent/gpt2' does not exist"),
        Case("a file, not a directory", ["convert", "--from-gpt2", fx.file("gpt2file", "x"), "--to", fx.path("o.safetensors")],
             r"GPT-2 checkpoint directory '.*gpt2file' is not a directory"),
        convert("config.json missing", r"config\.json", drop=("config.json",)),
        convert("config.json not JSON", r"config\.json' is not valid JSON", config='{"n_embd": 8,'),
        convert("config.json a list", r"config\.json' must be a JSON object", config="[1, 2]"),
        convert("config.json without n_head", r"config\.json' has no 'n_head'", config=config_with(n_head=None)),
        convert("config.json n_layer 0", r"config\.json': 'n_layer'", config=config_with(n_layer=0)),
        convert("config.json n_embd a string", r"config\.json': 'n_embd'", config=config_with(n_embd="8")),
        convert("config.json n_embd not divisible by n_head", r"n_embd \(8\) must be divisible by n_head \(3\)", config=config_with(n_head=3)),
        convert("config.json layer_norm_epsilon 1e-6", r"layer_norm_epsilon is", config=config_with(layer_norm_epsilon=1e-6)),
        convert("config.json activation relu", r"activation_function \"relu\"", config=config_with(activation_function="relu")),
        convert("config.json vocab_size not vocab.json's", rf"says vocab_size 50257, its vocab\.json has {V} tokens", config=config_with(vocab_size=50257)),
        convert("config.json n_layer 2^24 (huge model)", r"GPT-2 model of|memory|n_layer", config=config_with(n_layer=1 << 24)),
        convert("model.safetensors missing", r"model\.safetensors", drop=("model.safetensors",)),
        convert("model.safetensors empty", r"model\.safetensors' is truncated \(0 bytes\)", model=b""),
        convert("model.safetensors header length past the end", r"model\.safetensors", model=struct.pack("<Q", 1 << 40) + b"{}"),
        convert("model.safetensors header not JSON", r"model\.safetensors' has a malformed safetensors header", model=struct.pack("<Q", 4) + b"{{{{"),
        convert("a tensor missing", r"model\.safetensors' has no tensor 'h\.0\.mlp\.c_fc\.bias'", model=missing),
        convert("c_attn in nn.Linear's shape", r"tensor 'h\.0\.attn\.c_attn\.weight' is \(24, 8\), config\.json's sizes need \(8, 24\)", model=linear),
        convert("a block more than n_layer", r"has tensor 'h\.1\.ln_1\.weight', which GPT-2's layout for n_layer 1 does not", model=extra),
        convert("an I64 tensor", r"has dtype I64", model=safetensors(shapes(), dtype="I64")),
        convert("vocab.json missing", r"vocab\.json", drop=("vocab.json",)),
        convert("vocab.json not JSON", r"vocab\.json' line 1: not valid JSON", vocab='{"a": 0,'),
        convert("vocab.json a list", r"vocab\.json' must be a JSON object of token -> id", vocab="[1]"),
        convert("vocab.json an id not an integer", r"the id of 'x' is not an integer", vocab=json.dumps({**vocabulary(), "x": "1"})),
        convert("vocab.json an id given twice", r"id 0 is given to two tokens", vocab=json.dumps({**vocabulary(), "xy": 0})),
        convert("vocab.json without a byte's token", r"no token for byte 32", vocab=json.dumps(vocab_no_byte)),
        convert("merges.txt missing", r"merges\.txt", drop=("merges.txt",)),
        convert("merges.txt a line of one token", r"merges\.txt.*'Ġt'|merge", merges="#version: 0.2\nĠt\n"),
        convert("merges.txt naming an unknown token", r"merge 1 'q z' makes 'qz', which|names a token", merges="#version: 0.2\nq z\n"),
    ]
