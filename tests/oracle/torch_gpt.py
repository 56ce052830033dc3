"""The PyTorch twin of Loom's GPT, used as the numerical oracle (gpt_reference.py) and as
the speed baseline (bench/pytorch_train.py), so both compare Loom with the same model.

nanoGPT for PyTorch 1.13 with Loom's parameter names: token + position embedding, pre-LN
blocks, manual causal attention (1.13 has no scaled_dot_product_attention), GELU tanh,
LayerNorm eps 1e-5, LM head tied to the token table, vocabulary padded to Vp (the loss
reads only the first V columns).
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Embedding(nn.Module):
    def __init__(self, vp, block_size, c):
        super().__init__()
        self.wte = nn.Parameter(torch.zeros(vp, c))
        self.wpe = nn.Parameter(torch.zeros(block_size, c))

    def forward(self, idx):
        t = idx.shape[1]
        return F.embedding(idx, self.wte) + self.wpe[:t].unsqueeze(0)


class CausalSelfAttention(nn.Module):
    def __init__(self, c, nh, block_size):
        super().__init__()
        self.nh = nh
        self.qkv = nn.Linear(c, 3 * c)
        self.proj = nn.Linear(c, c)
        mask = torch.ones(block_size, block_size, dtype=torch.bool).tril()
        self.register_buffer("mask", mask.view(1, 1, block_size, block_size), persistent=False)

    def forward(self, x, drop_probs=None):
        """drop_probs: an attention-dropout mask (B, NH, T, T) (0 or 1 / (1 - p)) on the probabilities."""
        b, t, c = x.shape
        hs = c // self.nh
        q, k, v = self.qkv(x).split(c, dim=2)  # [q | k | v], heads contiguous in each
        q = q.view(b, t, self.nh, hs).transpose(1, 2)
        k = k.view(b, t, self.nh, hs).transpose(1, 2)
        v = v.view(b, t, self.nh, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        att = att.masked_fill(~self.mask[:, :, :t, :t], float("-inf"))
        att = F.softmax(att, dim=-1)
        if drop_probs is not None:
            att = att * drop_probs
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        return self.proj(y)


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.fc = nn.Linear(c, 4 * c)
        self.proj = nn.Linear(4 * c, c)

    def forward(self, x):
        return self.proj(F.gelu(self.fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, c, nh, block_size):
        super().__init__()
        self.ln1 = nn.LayerNorm(c, eps=1e-5)
        self.attn = CausalSelfAttention(c, nh, block_size)
        self.ln2 = nn.LayerNorm(c, eps=1e-5)
        self.mlp = MLP(c)

    def forward(self, x, drop_attn=None, drop_mlp=None, drop_probs=None):
        """drop_attn, drop_mlp: dropout masks (0 or 1 / (1 - p)) on each branch's output before the
        residual add; drop_probs: on the attention probabilities."""
        a = self.attn(self.ln1(x), drop_probs)
        x = x + (a if drop_attn is None else a * drop_attn)
        m = self.mlp(self.ln2(x))
        return x + (m if drop_mlp is None else m * drop_mlp)


class GPT(nn.Module):
    def __init__(self, v, vp, block_size, n_layer, nh, c):
        super().__init__()
        self.v = v
        self.embedding = Embedding(vp, block_size, c)
        self.blocks = nn.ModuleList([Block(c, nh, block_size) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(c, eps=1e-5)

    def forward(self, idx, targets, dropout=None, attn_dropout=None):
        """dropout: the hidden dropout's masks (sites, B, T, C), given rather than drawn so that
        another implementation's draws can be replayed: site 0 the embedding's output, then each
        block's attention and MLP outputs (1 + 2l, 2 + 2l), as Megatron-LM's hidden dropout.
        attn_dropout: the attention dropout's masks (L, B, NH, T, T) on block l's probabilities."""
        x = self.embedding(idx)
        if dropout is not None:
            x = x * dropout[0]
        for l, b in enumerate(self.blocks):
            hidden = (None, None) if dropout is None else (dropout[1 + 2 * l], dropout[2 + 2 * l])
            x = b(x, *hidden, None if attn_dropout is None else attn_dropout[l])
        logits = F.linear(self.ln_f(x), self.embedding.wte)  # tied head, (B, T, Vp)
        real = logits[..., :self.v].float()  # padding columns take no part; the loss in fp32 (also under autocast)
        return F.cross_entropy(real.reshape(-1, self.v), targets.reshape(-1).long())

    def init_gpt2(self, n_layer):
        """GPT-2 initialisation, as Loom's: N(0, 0.02), residual projections by 1/sqrt(2L)."""
        for name, p in self.named_parameters():
            if p.dim() >= 2:
                std = 0.02 / math.sqrt(2 * n_layer) if name.endswith("proj.weight") else 0.02
                nn.init.normal_(p, mean=0.0, std=std)


def adamw_groups(model, weight_decay):
    """The usual two AdamW groups: matrices decay; biases and LayerNorm gains do not."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
