"""What the PyTorch baselines share: the model Loom is checked against and the BLAS report.

Importing this module puts tests/oracle on the path, so `from torch_baseline import GPT,
adamw_groups, loaded_blas` gives the baselines the oracle's model (one definition for both).
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "oracle"))
from torch_gpt import GPT, adamw_groups  # noqa: E402,F401


def add_model_args(ap, batch_help=None):
    """The model and step flags both baselines share, with `loom bench train`'s names."""
    ap.add_argument("--n-layer", type=int, default=6)
    ap.add_argument("--n-head", type=int, default=6)
    ap.add_argument("--n-embd", type=int, default=384)
    ap.add_argument("--block-size", type=int, default=256)
    ap.add_argument("--vocab-size", type=int, default=65)
    ap.add_argument("--batch-size", type=int, default=8, help=batch_help)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)


def loaded_blas():
    """The BLAS libraries this process loaded: PyTorch's fp32 matmul speed is theirs."""
    try:
        with open("/proc/self/maps") as f:
            libs = {line.split()[-1] for line in f if ".so" in line}
    except OSError:
        return "unknown"
    hits = sorted(p for p in libs if any(k in os.path.basename(p) for k in ("blas", "mkl_rt", "blis")))
    return ",".join(hits) or "none"
