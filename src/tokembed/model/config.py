"""`GPTConfig`: the shape of a GPT (vocabulary, context, width, depth, heads, positional scheme), validated at construction.

Saved in every checkpoint's config.json and read back with `GPTConfig.from_dict`; `tokembed.model.gpt.GPT` builds
the modules from it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from tokembed._checks import check_int, check_number, check_positive_int, check_probability, config_from_dict
from tokembed.embeddings.names import positional_scheme
from tokembed.embeddings.rotary import ROPE_SCALINGS, rotary_dim
from tokembed.tokenizer.gpt2 import GPT2_EOT, GPT2_N_VOCAB


@dataclass(frozen=True)
class GPTConfig:
    """The shape of a GPT. Defaults: a tiny model that learns on a CPU in minutes.

    Attributes:
        vocab_size: token table rows (50,257: GPT-2's BPE).
        context_length: the training context. The learned table has this many rows and the
            model cannot read further; the other schemes can be run on longer sequences.
        dim: model width D (GPT-2 small: 768).
        n_layers: transformer blocks.
        n_heads: attention heads; must divide ``dim``.
        dropout: on embeddings, attention weights and residual branches.
        positional: ``learned``, ``sinusoidal``, ``rope``, ``alibi``, ``t5``, ``shaw`` or ``none``.
        tie_embeddings: share the token table with the output head (GPT-2 does).
        bias: biases in the linear layers (GPT-2 has them).
        rope_base, rope_scaling, rope_factor: RoPE's frequency base and long-context scaling
            (None, ``"linear"`` position interpolation, ``"ntk"``, ``"yarn"``, ``"llama3"``) by
            ``rope_factor`` >= 1; ``context_length`` is the original length YaRN and Llama 3 scale from.
        rope_fraction: partial RoPE: the share of each head's dimensions that is rotated (1: all).
        t5_num_buckets, t5_max_distance: T5's buckets (32 and 128 in T5).
        shaw_max_distance: Shaw's clipping distance k (16 in the paper).
        document_mask: keep packed documents apart. A window cut from the token stream often holds the
            end of one document and the start of the next; with this, a token attends only to earlier
            tokens of its own document, and positions restart at 0 after every ``<|endoftext|>``
            (``eot_token``, which belongs to the document it ends). GPT-2 trained without it.
        eot_token: the separator that ends a document (default GPT-2's ``<|endoftext|>``; ``tokembed train``
            takes it from the data's tokenizer, like ``vocab_size``).
    """

    vocab_size: int = GPT2_N_VOCAB  # the chapter's tokenizer; training takes the data's
    context_length: int = 128
    dim: int = 64
    n_layers: int = 2
    n_heads: int = 4
    dropout: float = 0.0
    positional: str = "learned"
    tie_embeddings: bool = True
    bias: bool = True
    rope_base: float = 10000.0
    rope_scaling: str | None = None
    rope_factor: float = 1.0
    rope_fraction: float = 1.0
    t5_num_buckets: int = 32
    t5_max_distance: int = 128
    shaw_max_distance: int = 16
    document_mask: bool = False
    eot_token: int = GPT2_EOT

    def __post_init__(self) -> None:
        for name in (
            "vocab_size",
            "context_length",
            "dim",
            "n_layers",
            "n_heads",
            "t5_num_buckets",
            "t5_max_distance",
            "shaw_max_distance",
        ):
            check_positive_int(name, getattr(self, name))
        check_probability("dropout", self.dropout)
        scheme = positional_scheme(self.positional)
        if self.dim % self.n_heads:
            raise ValueError(
                f"n_heads={self.n_heads} does not divide dim={self.dim}; choose n_heads among the divisors of dim or change dim"
            )
        head_dim = self.dim // self.n_heads
        if scheme.even == "head_dim" and head_dim % 2:
            raise ValueError(
                f"{scheme.name} needs an even head width, got dim/n_heads = {self.dim}/{self.n_heads} = {head_dim}; change dim or n_heads"
            )
        if scheme.even == "dim" and self.dim % 2:
            raise ValueError(f"{scheme.name} positions need an even dim, got {self.dim}")
        if self.rope_scaling is not None and self.rope_scaling not in ROPE_SCALINGS:
            raise ValueError(
                f"rope_scaling must be None or one of {', '.join(ROPE_SCALINGS)}, got {self.rope_scaling!r}"
            )
        object.__setattr__(self, "rope_factor", check_number("rope_factor", self.rope_factor, min=1.0, noun=""))
        if self.positional == "rope":
            rotary_dim(head_dim, self.rope_fraction)  # raises, naming the fraction, when it rotates no whole pair
        if (
            not isinstance(self.tie_embeddings, bool)
            or not isinstance(self.bias, bool)
            or not isinstance(self.document_mask, bool)
        ):
            raise TypeError(
                f"tie_embeddings, bias and document_mask must be True or False, got {self.tie_embeddings!r}, {self.bias!r} and {self.document_mask!r}"
            )
        object.__setattr__(self, "eot_token", check_int("eot_token", self.eot_token))
        if self.document_mask and not 0 <= self.eot_token < self.vocab_size:
            raise ValueError(
                f"eot_token {self.eot_token} is outside the vocabulary (size {self.vocab_size}); document_mask needs the id that ends documents"
            )

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> GPTConfig:
        """Build from a dict (e.g. a checkpoint's ``config.json``), naming unknown keys."""
        return config_from_dict(cls, d)
