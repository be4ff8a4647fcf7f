"""The model's shape and positional scheme: ``GPTConfig``, the ``"model"`` part of a checkpoint's config.json.

The positional scheme is a name (``positional``) and that scheme's options (``positional_options``, the
frozen dataclass the scheme declares: ``RopeOptions``, ``T5Options``, ...); the scheme builds its own module
from them. Configs written by tokembed 0.1 held the options flat (``rope_base``, ``t5_num_buckets``, ...):
``GPTConfig.from_dict`` reads them, and the constructor still takes them for one release, with a warning.
"""

from __future__ import annotations

import dataclasses
import functools
import warnings
from dataclasses import asdict, dataclass
from typing import Any

from tokembed._checks import check_int, check_positive_int, check_probability, config_from_dict
from tokembed.embeddings.names import options_from_flat, positional_scheme
from tokembed.embeddings.scheme import ModelShape, PositionalScheme
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
        positional: the positional scheme: ``learned``, ``sinusoidal``, ``rope``, ``alibi``, ``t5``,
            ``shaw``, ``none``, or one registered with ``tokembed.register_scheme``.
        positional_options: the scheme's options: None (its defaults), a dict, or its options dataclass
            (``RopeOptions(base=..., scaling=..., factor=..., fraction=...)``, ``T5Options(num_buckets=...,
            max_distance=...)``, ``ShawOptions(max_distance=...)``, ``SinusoidalOptions(base=...)``); stored
            as the dataclass. RoPE's scalings start from ``context_length``.
        tie_embeddings: share the token table with the output head (GPT-2 does).
        bias: biases in the linear layers (GPT-2 has them).
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
    positional_options: Any = None
    tie_embeddings: bool = True
    bias: bool = True
    document_mask: bool = False
    eot_token: int = GPT2_EOT

    def __post_init__(self) -> None:
        for name in ("vocab_size", "context_length", "dim", "n_layers", "n_heads"):
            check_positive_int(name, getattr(self, name))
        check_probability("dropout", self.dropout)
        scheme = positional_scheme(self.positional)
        object.__setattr__(self, "positional_options", scheme.make_options(self.positional_options))
        if self.dim % self.n_heads:
            raise ValueError(
                f"n_heads={self.n_heads} does not divide dim={self.dim}; choose n_heads among the divisors of dim or change dim"
            )
        scheme.check(self.positional_options, self.shape)  # e.g. RoPE's pairs need an even head width
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

    @property
    def scheme(self) -> PositionalScheme:
        """The positional scheme (what it is, its options, its builder)."""
        return positional_scheme(self.positional)

    @property
    def shape(self) -> ModelShape:
        """The widths the positional module is built for."""
        return ModelShape(dim=self.dim, n_heads=self.n_heads, context_length=self.context_length)

    def to_dict(self) -> dict:
        """A JSON-ready dict: the scheme's options as a dict under ``positional_options``."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> GPTConfig:
        """Build from a dict (e.g. a checkpoint's ``config.json``), naming unknown keys.

        A dict without ``positional_options`` is read in tokembed 0.1's layout: its flat scheme fields
        (``rope_base``, ``rope_scaling``, ``rope_factor``, ``rope_fraction``, ``t5_num_buckets``,
        ``t5_max_distance``, ``shaw_max_distance``) become the options of its scheme.
        """
        if isinstance(d, dict) and "positional_options" not in d:
            d = _from_flat(d)
        return config_from_dict(cls, d)


_FIELDS = tuple(f.name for f in dataclasses.fields(GPTConfig))


def _from_flat(d: dict) -> dict:
    """tokembed 0.1's layout -> today's: the flat options of the config's scheme in ``positional_options``."""
    known = {k: v for k, v in d.items() if k in _FIELDS}
    flat = {k: v for k, v in d.items() if k not in _FIELDS}
    options, rest = options_from_flat(known.get("positional", GPTConfig.positional), flat)
    return {**known, **rest, "positional_options": options}  # rest: unknown keys, named by from_dict


def _accept_flat_options(init):
    """``GPTConfig(rope_base=...)`` as 0.1 wrote it: moved into ``positional_options``, with a DeprecationWarning."""

    @functools.wraps(init)
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        flat = {k: kwargs.pop(k) for k in list(kwargs) if k not in _FIELDS}
        if flat:
            given = {**dict(zip(_FIELDS, args)), **kwargs}
            options, unknown = options_from_flat(given.get("positional", GPTConfig.positional), flat)
            if unknown:
                raise TypeError(
                    f"GPTConfig got unexpected keyword arguments {sorted(unknown)}; its fields are {list(_FIELDS)}"
                )
            warnings.warn(
                f"GPTConfig({', '.join(f'{k}=' for k in flat)}) is deprecated: pass positional_options="
                f"{dataclasses.asdict(options)} (the scheme's option names)",
                DeprecationWarning,
                stacklevel=2,
            )
            if given.get("positional_options") is None:
                given["positional_options"] = options
            return init(self, **given)
        return init(self, *args, **kwargs)

    return __init__


GPTConfig.__init__ = _accept_flat_options(GPTConfig.__init__)  # type: ignore[method-assign]
