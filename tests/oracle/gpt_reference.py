#!/usr/bin/env python3
"""PyTorch oracle for Loom's GPT: loss, every parameter gradient, and AdamW training.

Usage: gpt_reference.py IN.safetensors OUT.safetensors

IN (written by tests/oracle/test_pytorch_oracle.cpp through loom::train::save_tensor_file):
  param.<name>    every Loom parameter by its dotted name, float32
  check.idx       (B, T) int32 tokens for the gradient check; check.targets likewise
  train.idx       (S, B, T) int32: one batch per AdamW step; train.targets likewise
  __metadata__    vocab_size, n_layer, n_head, n_embd, block_size, lr, beta1, beta2, eps,
                  weight_decay (strings); optional precision: "bf16" runs every forward
                  under torch.autocast("cpu", dtype=torch.bfloat16) (fp32 master weights)
OUT (read back by the test; carries the metadata Loom's reader requires):
  loss            (1,) mean cross-entropy of check.* over the first V logit columns
  grad.<name>     d loss / d parameter
  train.losses    (S,) the loss of each AdamW step, before that step's update
  final.<name>    parameters after the S steps

The model is built independently of Loom's choices where it can be: the AdamW groups come
from the usual rule (matrices decay; biases and LayerNorm gains do not), not from Loom.
Exit status: 0 on success, 2 on bad usage or input, 3 when torch or numpy is missing.
"""
import json
import struct
import sys
import zlib

try:
    import numpy as np
    import torch

    from torch_gpt import GPT, adamw_groups
except ImportError as e:  # the C++ test turns this into a failure with this message
    print(f"gpt_reference.py: cannot import torch/numpy ({e}); the PyTorch oracle needs "
          f"torch and numpy for {sys.executable}", file=sys.stderr)
    sys.exit(3)

DTYPES = {"F32": np.float32, "I32": np.int32}
TAGS = {np.dtype(np.float32): "F32", np.dtype(np.int32): "I32"}


def read_tensor_file(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    meta = header.pop("__metadata__", {})
    data = blob[8 + n:]
    if "loom.crc32" in meta and str(zlib.crc32(data)) != meta["loom.crc32"]:
        raise ValueError(f"{path}: checksum mismatch")
    tensors = {}
    for name, e in header.items():
        b, end = e["data_offsets"]
        arr = np.frombuffer(data[b:end], dtype=DTYPES[e["dtype"]]).reshape(e["shape"])
        tensors[name] = arr.copy()
    return tensors, meta


def write_tensor_file(path, tensors, meta=None):
    """safetensors layout plus Loom's required metadata (format version, size, CRC-32)."""
    header, chunks, offset = {}, [], 0
    for name in sorted(tensors):  # Loom requires name order, contiguous
        arr = np.ascontiguousarray(tensors[name])
        if arr.dtype not in TAGS:
            arr = arr.astype(np.float32)
        raw = arr.tobytes()
        header[name] = {"dtype": TAGS[arr.dtype], "shape": list(arr.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    data = b"".join(chunks)
    m = dict(meta or {})
    m["loom.format_version"] = "1"
    m["loom.data_bytes"] = str(len(data))
    m["loom.crc32"] = str(zlib.crc32(data))
    header["__metadata__"] = m
    text = json.dumps(header).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        f.write(data)


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    torch.manual_seed(0)
    tensors, meta = read_tensor_file(sys.argv[1])
    params = {k[len("param."):]: v for k, v in tensors.items() if k.startswith("param.")}
    v = int(meta["vocab_size"])
    vp = params["embedding.wte"].shape[0]
    model = GPT(v, vp, int(meta["block_size"]), int(meta["n_layer"]), int(meta["n_head"]),
                int(meta["n_embd"]))
    names = set(dict(model.named_parameters()))
    if names != set(params):
        print(f"gpt_reference.py: parameter names differ; only in Loom: {sorted(set(params) - names)}; "
              f"only in PyTorch: {sorted(names - set(params))}", file=sys.stderr)
        return 2
    model.load_state_dict({k: torch.from_numpy(a) for k, a in params.items()}, strict=True)

    bf16 = meta.get("precision", "fp32") == "bf16"

    def forward(i, t):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            return model(i, t)

    out = {}
    idx = torch.from_numpy(tensors["check.idx"]).long()
    targets = torch.from_numpy(tensors["check.targets"]).long()
    loss = forward(idx, targets)
    loss.backward()
    out["loss"] = np.array([loss.item()], dtype=np.float32)
    for name, p in model.named_parameters():
        out["grad." + name] = p.grad.detach().numpy().copy()
    model.zero_grad(set_to_none=True)

    opt = torch.optim.AdamW(
        adamw_groups(model, float(meta["weight_decay"])), lr=float(meta["lr"]), betas=(float(meta["beta1"]), float(meta["beta2"])),
        eps=float(meta["eps"]), foreach=False)
    train_idx = torch.from_numpy(tensors["train.idx"]).long()
    train_targets = torch.from_numpy(tensors["train.targets"]).long()
    losses = []
    for s in range(train_idx.shape[0]):
        opt.zero_grad(set_to_none=True)
        loss = forward(train_idx[s], train_targets[s])
        loss.backward()
        opt.step()
        losses.append(loss.item())
    out["train.losses"] = np.array(losses, dtype=np.float32)
    for name, p in model.named_parameters():
        out["final." + name] = p.detach().numpy().copy()
    write_tensor_file(sys.argv[2], out, {"torch.version": torch.__version__})
    return 0


if __name__ == "__main__":
    sys.exit(main())
