"""A decoder-only transformer (GPT-2 layout) for the language-model workload: named
sizes, the model, and its parameter and FLOP counts.

Layout: token embedding + *learned* position embedding (GPT-2's; one row per position up
to the run's sequence length), N pre-norm blocks (LayerNorm -> causal self-attention
through ``scaled_dot_product_attention(is_causal=True)`` -> residual; LayerNorm -> MLP
d -> 4d -> d with GELU -> residual), a final LayerNorm and an output head whose weight
*is* the token embedding (tied). Linear layers have biases, as GPT-2's.

Q, K and V are three Linear layers (not one fused one) so that a column-wise tensor
parallel split gives every rank whole heads. The blocks live in a ModuleDict keyed
"0".."L-1": a pipeline stage deletes the blocks it does not own and keeps the names.
The forward pass skips the parts a pipeline stage lacks (embeddings: not the first
stage; norm and head: not the last) and returns the logits of every position
flattened to (batch x seq, vocab), so a plain ``CrossEntropyLoss`` against the flattened
next tokens is the loss for every backend.

The vocabulary of the GPT sizes is 50304: GPT-2's 50257 tokens padded to a multiple of
64 (as nanoGPT does), so that every tensor-parallel degree up to 64 splits the embedding
and head evenly and their matmuls have tensor-core friendly shapes.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from .names import TRANSFORMER_SHAPES

GPT2_VOCAB = 50257
VOCAB = 50304  # GPT2_VOCAB padded to a multiple of 64


@dataclass(frozen=True)
class GPTConfig:
    """The shape of one named size."""

    n_layers: int
    d_model: int
    n_heads: int
    vocab_size: int = VOCAB

    @property
    def head_dim(self) -> int:
        """Q: the width of one attention head."""
        return self.d_model // self.n_heads

    @property
    def d_ff(self) -> int:
        """The MLP's hidden width (4 x d_model)."""
        return 4 * self.d_model


#: gpt-tiny (~0.24 M parameters at seq 64) and gpt-mini (~1.3 M) for CPU tests; gpt-125m,
#: gpt-350m and gpt-1.3b have the shapes of GPT-2 small, GPT-3 Medium and GPT-3 XL.
SIZES: dict[str, GPTConfig] = {
    name: GPTConfig(n_layers=layers, d_model=d, n_heads=heads, vocab_size=vocab)
    for name, (layers, d, heads, vocab) in TRANSFORMER_SHAPES.items()
}


class Attention(nn.Module):
    """Causal multi-head self-attention; the head count follows from the (possibly
    tensor-parallel, i.e. narrower) width of the Q projection's output."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        d = cfg.d_model
        self.head_dim = cfg.head_dim
        self.q, self.k, self.v = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.o = nn.Linear(d, d)

    def forward(self, x: Tensor) -> Tensor:
        b, t, _ = x.shape

        def heads(y: Tensor) -> Tensor:  # (b, t, h*q) -> (b, h, t, q)
            return y.view(b, t, -1, self.head_dim).transpose(1, 2)

        y = F.scaled_dot_product_attention(heads(self.q(x)), heads(self.k(x)),
                                           heads(self.v(x)), is_causal=True)
        return self.o(y.transpose(1, 2).reshape(b, t, -1))


class MLP(nn.Module):
    """d -> 4d -> d with GELU."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.fc = nn.Linear(cfg.d_model, cfg.d_ff)
        self.proj = nn.Linear(cfg.d_ff, cfg.d_model)

    def forward(self, x: Tensor) -> Tensor:
        return self.proj(F.gelu(self.fc(x)))


class Block(nn.Module):
    """Pre-norm transformer block: x + attn(ln1(x)), then x + mlp(ln2(x))."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.attn = Attention(cfg)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.mlp = MLP(cfg)

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    """The whole model, or (after `keep_stage`) one pipeline stage of it."""

    def __init__(self, cfg: GPTConfig, seq_len: int,
                 activation_checkpointing: bool = False) -> None:
        super().__init__()
        self.cfg, self.seq_len = cfg, seq_len
        self.activation_checkpointing = activation_checkpointing
        #: set by a pipeline stage, whose forward runs inside the schedule: autocast here
        self.autocast_dtype: torch.dtype | None = None
        self.tok_emb: nn.Embedding | None = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos_emb: nn.Embedding | None = nn.Embedding(seq_len, cfg.d_model)
        self.blocks = nn.ModuleDict({str(i): Block(cfg) for i in range(cfg.n_layers)})
        self.norm: nn.LayerNorm | None = nn.LayerNorm(cfg.d_model)
        self.head: nn.Linear | None = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.head.weight = self.tok_emb.weight  # tied
        self._init_weights()

    def _init_weights(self) -> None:
        """GPT-2's: N(0, 0.02), residual projections scaled by 1/sqrt(2L), zero biases."""
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif ".ln" in name or name.startswith("norm."):
                nn.init.ones_(p)
            else:
                residual = name.endswith(("attn.o.weight", "mlp.proj.weight"))
                std = 0.02 / (2 * self.cfg.n_layers) ** 0.5 if residual else 0.02
                nn.init.normal_(p, std=std)

    def keep_stage(self, first: int, last: int, is_first: bool, is_last: bool) -> None:
        """Become the pipeline stage of blocks first..last-1 (embeddings on the first
        stage, final norm and head on the last); block names are kept."""
        for key in list(self.blocks):
            if not first <= int(key) < last:
                del self.blocks[key]
        if not is_first:
            self.tok_emb = self.pos_emb = None
        if not is_last:
            self.norm = self.head = None

    def forward(self, x: Tensor) -> Tensor:
        """Token ids (b, t) -> logits (b*t, vocab); a pipeline stage maps hidden states
        (b, t, d) where it lacks the embeddings and returns them where it lacks the head."""
        if self.autocast_dtype is not None:
            with torch.autocast(x.device.type, dtype=self.autocast_dtype):
                return self._forward(x)
        return self._forward(x)

    def _forward(self, x: Tensor) -> Tensor:
        if self.tok_emb is not None and self.pos_emb is not None:
            pos = torch.arange(x.shape[1], device=x.device)
            x = self.tok_emb(x) + self.pos_emb(pos)
        for block in self.blocks.values():
            if self.activation_checkpointing and torch.is_grad_enabled():
                x = checkpoint(block, x, use_reentrant=False)
            else:
                x = block(x)
        if self.norm is None or self.head is None:
            return x
        return self.head(self.norm(x).flatten(0, 1))  # a new tensor, not a view


def config(name: str) -> GPTConfig:
    """The shape of a named size; ValueError listing the names when unknown."""
    if name not in SIZES:
        raise ValueError(f"unknown transformer {name!r}; valid: {', '.join(SIZES)}")
    return SIZES[name]


def build(name: str, seq_len: int, activation_checkpointing: bool = False) -> GPT:
    """A freshly initialised model of a named size (on torch's default device)."""
    return GPT(config(name), seq_len, activation_checkpointing)


def num_parameters(cfg: GPTConfig, seq_len: int) -> int:
    """Parameters of the model (the tied head counted once): embeddings V*d + T*d,
    per block 12d^2 + 13d (Q, K, V, O, fc, proj weights and biases, two LayerNorms),
    final LayerNorm 2d."""
    d = cfg.d_model
    return cfg.vocab_size * d + seq_len * d + cfg.n_layers * (12 * d * d + 13 * d) + 2 * d


def matmul_parameters(cfg: GPTConfig) -> int:
    """N of the FLOP formula: the weights a token's activations are multiplied by.

    Per block Q, K, V, O (4d^2) and the MLP (2 x 4d^2), plus the head (V x d, which is the
    tied token embedding: counted once, as the head's matmul). Not counted: biases and
    LayerNorm parameters (element-wise adds and scales, no matmul), the position
    embedding and the token embedding's lookup (gathers, no FLOPs).
    """
    return cfg.n_layers * 12 * cfg.d_model ** 2 + cfg.vocab_size * cfg.d_model


def flops_per_token(cfg: GPTConfig, seq_len: int) -> int:
    """Training FLOPs per token, forward + backward: 6N + 12*L*H*Q*T (PaLM, appendix B).

    6N: a matmul with N weights costs 2N FLOPs per token forward and 4N backward
    (gradients of input and weight). 12*L*H*Q*T: per layer, QK^T and AV cost 2*T*H*Q
    FLOPs each per token forward, times 3 for forward + backward. Attention is counted
    as if not causal (PaLM's and torchtitan's convention), although a causal kernel may
    skip about half of it. Recomputation under activation checkpointing is not counted
    (model FLOPs, not hardware FLOPs).
    """
    return (6 * matmul_parameters(cfg)
            + 12 * cfg.n_layers * cfg.n_heads * cfg.head_dim * seq_len)


def synthetic_tokens(batch: int, seq_len: int, vocab: int, device: torch.device,
                     generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
    """Random token ids (batch, seq_len) and their next-token targets, flattened to
    (batch*seq_len,): one random sequence of seq_len + 1 tokens per sample."""
    ids = torch.randint(0, vocab, (batch, seq_len + 1), generator=generator)
    return ids[:, :-1].contiguous().to(device), ids[:, 1:].reshape(-1).to(device)
