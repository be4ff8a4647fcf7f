"""A small GPT-2-style decoder that is given its positional scheme.

    ids (B,T) -> InputEmbedding (tokens [+ positions]) -> n_layers x Block -> LayerNorm -> head -> logits (B,T,V)
    Block: x + attn(ln1(x)) then x + mlp(ln2(x))   (pre-norm, as GPT-2)

The positional scheme is one object (``GPTConfig.scheme``, built from ``positional`` and
``positional_options``): a scheme that acts on the input lives in the embedding, the others build one
module handed to every attention layer (one per layer when the scheme says ``per_layer``, as Shaw's
tables are). Input and output embeddings are tied by default: the head's weight *is* the token table
(one tensor), as in GPT-2.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from tokembed._checks import check_index_tensor, check_int, long_ids
from tokembed.data.batch import IGNORE_INDEX
from tokembed.embeddings.input import InputEmbedding
from tokembed.embeddings.interface import AttentionPositional
from tokembed.model.attention import CausalSelfAttention, KVCache
from tokembed.model.config import GPTConfig
from tokembed.model.loss import linear_cross_entropy
from tokembed.model.masks import DocumentMask

__all__ = ["GPT", "KVCache", "document_ids", "document_positions"]


class MLP(nn.Module):
    """D -> 4D -> GELU (tanh approximation, as GPT-2) -> D. Shapes: (B, T, D) -> (B, T, D)."""

    def __init__(self, dim: int, *, dropout: float, bias: bool) -> None:
        super().__init__()
        self.fc = nn.Linear(dim, 4 * dim, bias=bias)
        self.proj = nn.Linear(4 * dim, dim, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.proj(F.gelu(self.fc(x), approximate="tanh")))


class Block(nn.Module):
    """Pre-norm transformer block. Shapes: (B, T, D) -> (B, T, D)."""

    def __init__(
        self, config: GPTConfig, positional: AttentionPositional | None, *, shared_positional: bool = False
    ) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(config.dim, bias=config.bias)
        self.attn = CausalSelfAttention(
            config.dim,
            config.n_heads,
            dropout=config.dropout,
            positional=positional,
            bias=config.bias,
            shared_positional=shared_positional,
        )
        self.ln2 = nn.LayerNorm(config.dim, bias=config.bias)
        self.mlp = MLP(config.dim, dropout=config.dropout, bias=config.bias)

    def forward(
        self,
        x: torch.Tensor,
        position_ids: torch.Tensor,
        *,
        cache: KVCache | None,
        layer: int,
        documents: DocumentMask | None = None,
    ) -> torch.Tensor:
        x = x + self.attn(self.ln1(x), position_ids, cache=cache, layer=layer, documents=documents)
        return x + self.mlp(self.ln2(x))


def document_ids(ids: torch.Tensor, eot_token: int) -> torch.Tensor:
    """Which document each token belongs to, counting from 0 in each row: ids (B, T) -> (B, T) long.

    A new document starts after every ``eot_token``; the separator belongs to the document it ends.
    """
    is_eot = (ids == eot_token).long()  # (B,T)
    return is_eot.cumsum(dim=1) - is_eot


def document_positions(doc: torch.Tensor) -> torch.Tensor:
    """Each token's position inside its document: document ids (B, T) -> (B, T) long, 0 at each start."""
    t = torch.arange(doc.shape[1], device=doc.device).expand_as(doc)  # (B,T)
    starts = torch.ones_like(doc, dtype=torch.bool)
    starts[:, 1:] = doc[:, 1:] != doc[:, :-1]
    return (
        t - torch.where(starts, t, torch.zeros_like(t)).cummax(dim=1).values
    )  # minus the start of the token's document


class GPT(nn.Module):
    """A GPT-2-style decoder (see the module docstring).

    Weights start as GPT-2's: every linear and embedding weight N(0, 0.02), biases 0, and the
    projections that end a residual branch (``attn.proj``, ``mlp.proj``) N(0, 0.02/sqrt(2 n_layers)),
    so the residual stream's variance does not grow with depth.

    State dict keys: ``embed.token.weight`` (V, D), ``embed.position.*`` for a scheme on the input
    (``embed.position.weight`` (C, D) for learned positions), ``positional.*`` for a scheme in attention
    shared by the layers (T5: ``positional.bias.weight`` (buckets, H)), ``blocks.{i}....`` (with
    ``blocks.{i}.attn.positional.*`` for a per-layer scheme: Shaw's ``key``/``value``), ``norm.*``, and
    ``head.weight`` (the token table itself when tied).
    """

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        if not isinstance(config, GPTConfig):
            raise TypeError(f"config must be a GPTConfig, got {type(config).__name__}")
        self.config = config
        c, scheme = config, config.scheme
        self.embed = InputEmbedding(
            c.vocab_size,
            c.dim,
            c.context_length,
            dropout=c.dropout,
            positional=c.positional,
            positional_options=c.positional_options,
        )

        def attention_module() -> (
            AttentionPositional | None
        ):  # the scheme's module for the attention layers, if it acts there
            return scheme.module(c.positional_options, c.shape) if scheme.in_attention else None

        if scheme.per_layer:  # each layer its own module (Shaw's tables), stored as `blocks.{i}.attn.positional.*`
            self.positional = None
            self.blocks = nn.ModuleList(Block(c, attention_module()) for _ in range(c.n_layers))
        else:  # one module for all layers (T5's table is shared, as in T5), stored once as `positional.*`
            self.positional = attention_module()
            self.blocks = nn.ModuleList(Block(c, self.positional, shared_positional=True) for _ in range(c.n_layers))
        self.norm = nn.LayerNorm(c.dim, bias=c.bias)
        self.head = nn.Linear(c.dim, c.vocab_size, bias=False)
        self.apply(self._init_weights)
        for name, p in self.named_parameters():
            if name.endswith(("attn.proj.weight", "mlp.proj.weight")):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * c.n_layers))
        if c.tie_embeddings:
            self.head.weight = self.embed.token.weight  # one tensor: gradients from both uses add up

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    @property
    def max_length(self) -> int | None:
        """The longest sequence the model can read: ``context_length`` for learned positions, else None (no limit)."""
        return self.config.context_length if self.config.scheme.bounded else None

    def num_parameters(self) -> int:
        """Trainable parameters, counting a tied table once."""
        return sum(p.numel() for p in self.parameters())  # parameters() yields a shared tensor once

    def hidden(
        self,
        ids: torch.Tensor,
        *,
        position_ids: torch.Tensor | None = None,
        offset: int = 0,
        cache: KVCache | None = None,
        document_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The final (normalised) hidden states: ids (B, T) -> (B, T, D). Arguments as ``forward``."""
        if isinstance(ids, torch.Tensor):
            ids = long_ids(ids)  # uint16 (the shards' dtype) and other integer dtypes: int64 for every op below
        if cache is not None and position_ids is None and offset == 0:
            offset = cache.length
        documents = None
        if self.config.document_mask or document_ids is not None:
            if cache is not None or offset:
                who = "a model with document_mask=True" if self.config.document_mask else "document_ids"
                raise ValueError(
                    f"{who} reads whole windows: no KVCache or offset (got {'a cache' if cache is not None else f'offset={offset}'}); "
                    "pass the whole sequence (generate() does this itself)"
                )
            doc = self._documents(ids, document_ids)  # (B,T) or None
            if doc is not None:
                documents = DocumentMask(doc)  # one mask (dense, or FlexAttention's block mask) for every layer
                if position_ids is None:
                    position_ids = document_positions(doc)  # (B,T): positions restart with each document
        x, position_ids = self.embed(
            ids, position_ids=position_ids, offset=offset, return_positions=True
        )  # (B,T,D), (T,)|(B,T)
        for i, block in enumerate(self.blocks):
            x = block(x, position_ids, cache=cache, layer=i, documents=documents)
        if cache is not None:
            cache.length += ids.shape[1]
        return self.norm(x)  # (B,T,D)

    def _documents(self, ids: torch.Tensor, given: torch.Tensor | None) -> torch.Tensor | None:
        """Which document each token is in: ``given`` (the loader's metadata), else from the separators."""
        if given is None:
            if isinstance(ids, torch.Tensor) and ids.dim() == 2:  # anything else: the embedding names the problem
                return document_ids(ids, self.config.eot_token)  # (B,T)
            return None
        if not isinstance(given, torch.Tensor) or given.shape != getattr(ids, "shape", None):
            raise ValueError(
                f"document_ids must have the shape of ids {tuple(getattr(ids, 'shape', ()))}, got "
                f"{tuple(given.shape) if isinstance(given, torch.Tensor) else type(given).__name__}; pass batch.document_ids()"
            )
        given = given.to(ids.device)
        new = torch.ones_like(given, dtype=torch.bool)  # (B,T): where a document starts ...
        new[:, 1:] = given[:, 1:] != given[:, :-1]  # ... wherever the id changes, as positions restart
        return new.long().cumsum(dim=1) - 1  # (B,T) 0, 1, ...: ids used again ([0 0 1 0]) name another document

    def forward(
        self,
        ids: torch.Tensor,
        *,
        position_ids: torch.Tensor | None = None,
        offset: int = 0,
        cache: KVCache | None = None,
        document_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Next-token logits.

        Args:
            ids: (B, T) token ids.
            position_ids: (T,) or (B, T) position of each token; default ``offset .. offset+T-1``.
                Restart them at document boundaries to give each document its own positions.
            offset: the first position when ``position_ids`` is not given (default: the number of
                tokens already in ``cache``, else 0).
            cache: a ``KVCache`` to read earlier keys/values from and append this call's to.
            document_ids: (B, T) document of each token (a loader's ``DocumentBatch.document_ids()``; a document
                starts wherever the id changes, so ``[0, 0, 1, 0]`` is three documents): attention stays within documents (FlexAttention where it runs, see `tokembed.model.masks`) and, without
                ``position_ids``, positions restart at each. Default with ``document_mask``: from the separators.

        Returns:
            (B, T, vocab_size) float logits.
        """
        h = self.hidden(ids, position_ids=position_ids, offset=offset, cache=cache, document_ids=document_ids)
        return self.head(h)  # (B,T,D) -> (B,T,V)

    def loss(self, ids: torch.Tensor, targets: torch.Tensor, *, reduction: str = "mean", **kwargs) -> torch.Tensor:
        """Cross-entropy of the next-token predictions: ids, targets (B, T) -> scalar.

        Equal to ``F.cross_entropy(model(ids).flatten(0, 1), targets.flatten())`` but computed in
        chunks without storing the (B*T, V) logits (see ``tokembed.loss``): about 2x faster for the
        output layer on a CPU. ``reduction="sum"`` gives the summed loss (no gradient; evaluation).
        Targets of -100 (``IGNORE_INDEX``: a packed document's last token, padding) are left out, as
        ``F.cross_entropy`` leaves them out. ``kwargs`` go to `hidden` (``position_ids``, ``document_ids``).
        """
        if targets.shape != ids.shape:
            raise ValueError(f"targets must have the shape of ids {tuple(ids.shape)}, got {tuple(targets.shape)}")
        keep = targets.flatten() != IGNORE_INDEX if isinstance(targets, torch.Tensor) else None  # (B*T,)
        if keep is not None and not keep.all():
            rows = check_index_tensor(
                "target id", targets.flatten()[keep], self.config.vocab_size, what="the vocabulary"
            )
            h = self.hidden(ids, **kwargs).flatten(0, 1)[keep]  # (N, D): only the tokens that predict something
            return linear_cross_entropy(h, self.head.weight, rows, reduction=reduction)
        targets = check_index_tensor("target id", targets, self.config.vocab_size, what="the vocabulary")
        h = self.hidden(ids, **kwargs)  # (B,T,D)
        return linear_cross_entropy(h.flatten(0, 1), self.head.weight, targets.flatten(), reduction=reduction)

    def new_cache(self) -> KVCache:
        return KVCache(self.config.n_layers)

    @torch.no_grad()
    def generate(
        self,
        ids: torch.Tensor,
        max_new_tokens: int,
        *,
        temperature: float = 1.0,
        top_k: int | None = None,
        generator: torch.Generator | None = None,
        use_cache: bool = True,
    ) -> torch.Tensor:
        """Sample ``max_new_tokens`` tokens after ``ids``.

        With learned positions the model reads at most ``context_length`` tokens: the context is
        cropped to the last ``context_length`` (and the cache dropped, since positions shift).
        The other schemes keep extending the context, one cached token per step.

        Args:
            ids: (B, T) prompt ids.
            max_new_tokens: how many tokens to add.
            temperature: divides the logits; 0 means greedy (argmax).
            top_k: sample among the k most likely tokens only.
            generator: a ``torch.Generator`` for reproducible sampling.
            use_cache: reuse keys and values of earlier tokens (same result, faster).

        Returns:
            (B, T + max_new_tokens) ids.
        """
        check_int("max_new_tokens", max_new_tokens, min=0, noun="an integer")
        if not temperature >= 0:
            raise ValueError(f"temperature must be >= 0 (0 = greedy), got {temperature!r}")
        if top_k is not None and (not isinstance(top_k, int) or top_k < 1):
            raise ValueError(f"top_k must be an integer >= 1 or None, got {top_k!r}")
        if self.config.document_mask:
            use_cache = False  # the cache keeps no document ids: recompute the window at each step
        was_training = self.training
        self.eval()
        try:
            limit = self.max_length
            out = ids
            cache = self.new_cache() if use_cache and (limit is None or ids.shape[1] <= limit) else None
            logits = self(out if limit is None else out[:, -limit:], cache=cache)[:, -1]  # (B,V)
            for step in range(max_new_tokens):
                nxt = _sample(logits, temperature, top_k, generator)  # (B,1)
                out = torch.cat((out, nxt), dim=1)
                if step == max_new_tokens - 1:
                    break
                if cache is not None and (limit is None or out.shape[1] <= limit):
                    logits = self(nxt, cache=cache)[:, -1]
                else:
                    cache = None  # cropped: every position shifts, earlier keys are stale
                    logits = self(out if limit is None else out[:, -limit:])[:, -1]
            return out
        finally:
            self.train(was_training)


def _sample(
    logits: torch.Tensor, temperature: float, top_k: int | None, generator: torch.Generator | None
) -> torch.Tensor:
    """(B, V) logits -> (B, 1) ids."""
    if temperature == 0:
        return logits.argmax(dim=-1, keepdim=True)
    logits = logits / temperature
    if top_k is not None:
        kth = torch.topk(logits, min(top_k, logits.shape[-1]), dim=-1).values[:, -1:]  # (B,1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return torch.multinomial(torch.softmax(logits, dim=-1), 1, generator=generator)
