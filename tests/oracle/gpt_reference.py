#!/usr/bin/env python3
"""PyTorch oracle for Loom's GPT: loss, every parameter gradient, and AdamW training.

Usage: gpt_reference.py IN.safetensors OUT.safetensors

IN (written by tests/oracle/test_pytorch_oracle.cpp through loom::train::save_tensor_file):
  param.<name>    every Loom parameter by its dotted name, float32
  check.idx       (B, T) int32 tokens for the gradient check; check.targets likewise
  train.idx       (S, B, T) int32: one batch per AdamW step; train.targets likewise
  check.dropout   optional (sites, B, T, C) float32: Loom's hidden-dropout masks (0 or
                  1 / (1 - p)) for the check batch, multiplied in where torch_gpt.GPT says;
                  train.dropout likewise (S, sites, B, T, C)
  check.attn_dropout  optional (L, B, NH, T, T) float32: Loom's attention-dropout masks on
                  each block's probabilities; train.attn_dropout likewise (S, L, B, NH, T, T)
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

def bf16_gemm_accumulates_in_fp32():
    """Whether this CPU's bf16 GEMM in torch sums in fp32, as autocast's oneDNN kernels do on
    CPUs with AVX-512: its error is then the output's one rounding to bf16. Some builds on
    AVX2-only CPUs sum in lower precision (measured with torch 1.13 on an AMD EPYC with AVX2:
    a (64, 512) x (512, 64) product off by 5.3e-2 of its scale, 18x its rounding's 2.9e-3)."""
    g = torch.Generator().manual_seed(0)
    a = torch.randn(64, 512, generator=g).bfloat16()
    b = torch.randn(512, 64, generator=g).bfloat16()
    exact = a.float() @ b.float()
    error = ((a @ b).float() - exact).abs().max()
    rounding = (exact.bfloat16().float() - exact).abs().max()
    return bool(error <= 2 * rounding)


def emulate_bf16_gemms_with_fp32_accumulation():
    """Autocast's bf16 GEMMs (linear, matmul) as they run on CPUs that have bf16 kernels:
    operands rounded to bf16, products summed in fp32, the result rounded to bf16. The casts
    are autograd's, so backward rounds the gradients where autocast does. Other ops are
    autocast's own."""
    print("gpt_reference.py: torch's bf16 GEMM does not sum in fp32 on this CPU; emulating it",
          file=sys.stderr)

    def bf16_gemm(fp32_gemm):
        def run(*args):
            if not torch.is_autocast_cpu_enabled():
                return fp32_gemm(*args)
            rounded = [a.to(torch.bfloat16).float() if torch.is_tensor(a) and a.is_floating_point() else a
                       for a in args]
            with torch.autocast("cpu", enabled=False):
                return fp32_gemm(*rounded).to(torch.bfloat16)
        return run

    torch.nn.functional.linear = bf16_gemm(torch.nn.functional.linear)
    torch.Tensor.__matmul__ = bf16_gemm(torch.Tensor.__matmul__)


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
    if bf16 and not bf16_gemm_accumulates_in_fp32():
        emulate_bf16_gemms_with_fp32_accumulation()

    def forward(i, t, dropout=None, attn_dropout=None):
        masks = None if dropout is None else torch.from_numpy(dropout)
        attn_masks = None if attn_dropout is None else torch.from_numpy(attn_dropout)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            return model(i, t, masks, attn_masks)

    out = {}
    idx = torch.from_numpy(tensors["check.idx"]).long()
    targets = torch.from_numpy(tensors["check.targets"]).long()
    loss = forward(idx, targets, tensors.get("check.dropout"), tensors.get("check.attn_dropout"))
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
        train_dropout, train_attn_dropout = tensors.get("train.dropout"), tensors.get("train.attn_dropout")
        loss = forward(train_idx[s], train_targets[s], None if train_dropout is None else train_dropout[s],
                       None if train_attn_dropout is None else train_attn_dropout[s])
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
