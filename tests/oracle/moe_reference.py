#!/usr/bin/env python3
"""PyTorch oracle for Loom's mixture-of-experts layer (src/loom/nn/moe.hpp).

Usage: moe_reference.py IN.safetensors OUT.safetensors

IN (written by tests/oracle/test_moe_oracle.cpp):
  x             (B, T, C) layer input
  dy            (B, T, C) the gradient of the loss with respect to the output
  param.<name>  router.weight (E, C); experts.fc_weight (E, 4C, C), experts.fc_bias (E, 4C),
                experts.proj_weight (E, C, 4C), experts.proj_bias (E, C)
  __metadata__  top_k, capacity_factor, aux_loss_coef (strings)
OUT:
  y             (B, T, C) the layer's output
  aux           (1,) the Switch load-balancing loss before its coefficient
  loss          (1,) sum(y * dy) + aux_loss_coef * aux
  grad.x, grad.<name>   d loss / d input and parameters

Written from the papers, not from Loom: softmax router, torch.topk, gates renormalised over
the top k, per-sequence capacity ceil(f k T / E) filled first choices first and earlier
tokens first, tanh GELU experts, aux = mean over sequences of E * sum_i f_i P_i.
Exit status: 0 on success, 2 on bad usage, 3 when torch or numpy is missing.
"""
import math
import sys

try:
    import torch

    from gpt_reference import read_tensor_file, write_tensor_file
except ImportError as e:
    print(f"moe_reference.py: cannot import torch/numpy ({e})", file=sys.stderr)
    sys.exit(3)


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    tensors, meta = read_tensor_file(sys.argv[1])
    t = {k: torch.tensor(v, dtype=torch.float64 if v.dtype.kind == "f" else torch.int64) for k, v in tensors.items()}
    K, f, coef = int(meta["top_k"]), float(meta["capacity_factor"]), float(meta["aux_loss_coef"])
    names = ["router.weight", "experts.fc_weight", "experts.fc_bias", "experts.proj_weight", "experts.proj_bias"]
    p = {n: t["param." + n].clone().requires_grad_(True) for n in names}
    x = t["x"].clone().requires_grad_(True)
    B, T, C = x.shape
    E = p["router.weight"].shape[0]

    probs = torch.softmax(x @ p["router.weight"].T, dim=-1)  # (B, T, E)
    top_p, top_e = torch.topk(probs, K, dim=-1)              # (B, T, K)
    gates = top_p / top_p.sum(-1, keepdim=True)
    keep = torch.ones(B, T, K, dtype=torch.bool)
    if f > 0:
        capacity = math.ceil(f * K * T / E)
        for b in range(B):
            used = [0] * E
            for j in range(K):
                for s in range(T):
                    e = int(top_e[b, s, j])
                    keep[b, s, j] = used[e] < capacity
                    used[e] += int(keep[b, s, j])
    # Every expert on every token, then the chosen ones picked out.
    h = torch.einsum("btc,ehc->bteh", x, p["experts.fc_weight"]) + p["experts.fc_bias"]
    a = torch.nn.functional.gelu(h, approximate="tanh")
    out = torch.einsum("bteh,ech->btec", a, p["experts.proj_weight"]) + p["experts.proj_bias"]  # (B, T, E, C)
    chosen = torch.gather(out, 2, top_e.unsqueeze(-1).expand(B, T, K, C))                       # (B, T, K, C)
    y = (chosen * (gates * keep).unsqueeze(-1)).sum(2)

    share = torch.nn.functional.one_hot(top_e, E).sum(2).double().mean(1) / K  # (B, E), not differentiable
    aux = (E * (share * probs.mean(1)).sum(-1)).mean()
    loss = (y * t["dy"]).sum() + coef * aux
    loss.backward()

    out_t = {"y": y.detach().float().numpy(), "aux": aux.detach().float().reshape(1).numpy(),
             "loss": loss.detach().float().reshape(1).numpy(), "grad.x": x.grad.float().numpy()}
    for n in names:
        out_t["grad." + n] = p[n].grad.float().numpy()
    write_tensor_file(sys.argv[2], out_t, {"torch.version": torch.__version__})
    return 0


if __name__ == "__main__":
    sys.exit(main())
