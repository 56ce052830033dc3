#!/usr/bin/env python3
"""A tiny GPT-2 checkpoint in the layout GPT-2's public releases use, and its logits from a
GPT-2 forward written here in PyTorch (float32), for Loom's converter test.
Usage: gpt2_checkpoint_reference.py OUT_DIR
Writes OUT_DIR/good/{config.json, model.safetensors, vocab.json, merges.txt, tokens.json, logits.f32}
and broken copies: OUT_DIR/missing (a tensor left out), OUT_DIR/linear_shape (c_attn stored
as nn.Linear (3C, C) instead of Conv1D (C, 3C)), OUT_DIR/extra (a block more than n_layer).
   or: gpt2_checkpoint_reference.py --logits DIR TOKENS_JSON OUT_F32
The same GPT-2 forward over the checkpoint in DIR (its config.json's sizes; Loom's export, say)
for the token ids in TOKENS_JSON, its logits written to OUT_F32.
"""
import json
import math
import os
import shutil
import struct
import sys

import torch

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data"))
from gpt2_bpe_reference import BYTE_ENCODER  # noqa: E402  (GPT-2's byte-to-unicode table)

C, NH, L, T_MAX = 32, 4, 2, 16
MERGES = ["Ġ t", "h e", "Ġt he", "l l", "ll o", "Ġ w", "o r", "Ġw or", "Ġwor l", "Ġworl d", "i n", "Ġ a"]


def vocabulary():
    vocab = {ch: i for i, ch in enumerate(BYTE_ENCODER.values())}
    for m in MERGES:
        a, b = m.split(" ")
        vocab[a + b] = len(vocab)
    vocab["<|endoftext|>"] = len(vocab)
    return vocab


def weights(V, gen):
    def randn(*shape, std):
        return torch.randn(*shape, generator=gen) * std

    w = {"wte.weight": randn(V, C, std=0.5), "wpe.weight": randn(T_MAX, C, std=0.2)}
    for l in range(L):
        h = f"h.{l}."
        for ln in ("ln_1", "ln_2"):
            w[h + ln + ".weight"] = 1 + randn(C, std=0.1)
            w[h + ln + ".bias"] = randn(C, std=0.1)
        # Conv1D: weight (in, out), y = x @ W + b.
        for name, (i, o) in {"attn.c_attn": (C, 3 * C), "attn.c_proj": (C, C), "mlp.c_fc": (C, 4 * C),
                             "mlp.c_proj": (4 * C, C)}.items():
            w[h + name + ".weight"] = randn(i, o, std=0.2)
            w[h + name + ".bias"] = randn(o, std=0.05)
        w[h + "attn.bias"] = torch.tril(torch.ones(T_MAX, T_MAX)).view(1, 1, T_MAX, T_MAX)  # the mask buffer old files carry
    w["ln_f.weight"] = 1 + randn(C, std=0.1)
    w["ln_f.bias"] = randn(C, std=0.1)
    return w


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def forward(w, idx, C=C, NH=NH, L=L):
    T = idx.shape[0]
    x = w["wte.weight"][idx] + w["wpe.weight"][:T]
    ln = lambda x, p: torch.nn.functional.layer_norm(x, (C,), w[p + ".weight"], w[p + ".bias"], eps=1e-5)
    conv1d = lambda x, p: x @ w[p + ".weight"] + w[p + ".bias"]
    hs = C // NH
    for l in range(L):
        h = f"h.{l}."
        q, k, v = conv1d(ln(x, h + "ln_1"), h + "attn.c_attn").split(C, dim=-1)
        q, k, v = (t.view(T, NH, hs).transpose(0, 1) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        att = att.masked_fill(torch.tril(torch.ones(T, T)) == 0, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(0, 1).reshape(T, C)
        x = x + conv1d(y, h + "attn.c_proj")
        x = x + conv1d(gelu_new(conv1d(ln(x, h + "ln_2"), h + "mlp.c_fc")), h + "mlp.c_proj")
    return ln(x, "ln_f") @ w["wte.weight"].T  # the LM head is tied to wte


def write_safetensors(path, tensors):
    # Data in reverse name order (writers need not sort), an F32 file as GPT-2's release has.
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name in sorted(tensors, reverse=True):
        data = tensors[name].contiguous().numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(tensors[name].shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def write_dir(path, config, tensors, vocab):
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config, f)
    write_safetensors(os.path.join(path, "model.safetensors"), tensors)
    with open(os.path.join(path, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f)
    with open(os.path.join(path, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n" + "\n".join(MERGES) + "\n")


def main(out):
    vocab = vocabulary()
    V = len(vocab)
    config = {"model_type": "gpt2", "activation_function": "gelu_new", "n_positions": T_MAX, "n_ctx": T_MAX, "n_embd": C,
              "n_layer": L, "n_head": NH, "vocab_size": V, "layer_norm_epsilon": 1e-5, "n_inner": None}
    gen = torch.Generator().manual_seed(1234)
    w = weights(V, gen)
    good = os.path.join(out, "good")
    write_dir(good, config, w, vocab)
    tokens = torch.randint(0, V, (T_MAX,), generator=gen)
    with torch.no_grad():
        logits = forward(w, tokens)
    with open(os.path.join(good, "tokens.json"), "w") as f:
        json.dump(tokens.tolist(), f)
    with open(os.path.join(good, "logits.f32"), "wb") as f:
        f.write(logits.numpy().astype("<f4").tobytes())
    missing = {k: v for k, v in w.items() if k != "h.1.mlp.c_fc.bias"}
    write_dir(os.path.join(out, "missing"), config, missing, vocab)
    linear = dict(w, **{"h.0.attn.c_attn.weight": w["h.0.attn.c_attn.weight"].T})
    write_dir(os.path.join(out, "linear_shape"), config, linear, vocab)
    extra = dict(w, **{"h.2.ln_1.weight": w["h.1.ln_1.weight"]})
    write_dir(os.path.join(out, "extra"), config, extra, vocab)


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        assert e["dtype"] == "F32", (name, e["dtype"])
        a, b = e["data_offsets"]
        out[name] = torch.frombuffer(bytearray(data[8 + n + a:8 + n + b]), dtype=torch.float32).view(e["shape"])
    return out


def logits_of(directory, tokens_json, out_f32):
    with open(os.path.join(directory, "config.json")) as f:
        config = json.load(f)
    w = read_safetensors(os.path.join(directory, "model.safetensors"))
    with open(tokens_json) as f:
        tokens = torch.tensor(json.load(f))
    with torch.no_grad():
        logits = forward(w, tokens, C=config["n_embd"], NH=config["n_head"], L=config["n_layer"])
    with open(out_f32, "wb") as f:
        f.write(logits.numpy().astype("<f4").tobytes())


if __name__ == "__main__":
    if sys.argv[1] == "--logits":
        logits_of(*sys.argv[2:5])
    else:
        main(sys.argv[1])
