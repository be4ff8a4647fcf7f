"""What each positional scheme is, without torch: the names users type and what each name means.

Model, training, inspection and the CLI ask a scheme what it is (where it acts, whether its table is
bounded, how its per-position vectors are had), never compare its name. ``tokembed.embeddings.registry``
builds the modules behind the names.

=============  ==========================  =========  ==========================================
name           where it acts               bounded    per-position vectors
=============  ==========================  =========  ==========================================
learned        added to the input          yes        a stored table (the chapter's)
sinusoidal     added to the input          no         a formula (Vaswani et al.)
rope           rotates queries and keys    no         none (a rotation per position)
alibi          added to attention scores   no         none (a bias per distance and head)
t5             added to attention scores   no         none (a learned bias per distance bucket)
shaw           scores and values           no         none (learned vectors per clipped distance)
none           nowhere (NoPE)              no         none: order comes from the causal mask alone
=============  ==========================  =========  ==========================================
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["POSITIONAL_NAMES", "ROPE_SCALINGS", "SCHEMES", "PositionalScheme", "positional_scheme"]

# RoPE's long-context scalings (tokembed.embeddings.rotary defines them): position interpolation,
# NTK-aware base, YaRN, Llama 3.
ROPE_SCALINGS = ("linear", "ntk", "yarn", "llama3")


@dataclass(frozen=True)
class PositionalScheme:
    """What a scheme name means.

    Attributes:
        name: what users type.
        acts: ``"input"`` (a vector added to each token's embedding), ``"rotate"`` (rotates queries and
            keys), ``"score"`` (a term added to attention scores) or ``"none"``.
        per_layer: each attention layer gets its own module (it has per-layer parameters).
        bounded: the scheme cannot read past ``context_length`` (a table with one row per position).
        vectors: how per-position vectors are had: ``"table"`` (stored weights), ``"formula"``
            (computed from the position), or None (the scheme has none to show).
        even: the width that must be even: ``"dim"`` (sin/cos pairs), ``"head_dim"`` (rotated pairs), or None.
        reference: where it comes from.
    """

    name: str
    acts: str
    per_layer: bool
    bounded: bool
    vectors: str | None
    even: str | None
    reference: str


SCHEMES: dict[str, PositionalScheme] = {
    s.name: s
    for s in (
        PositionalScheme("learned", "input", False, True, "table", None, "GPT-2 (Radford et al. 2019); the chapter"),
        PositionalScheme("sinusoidal", "input", False, False, "formula", "dim", "Vaswani et al. 2017, section 3.5"),
        PositionalScheme("rope", "rotate", False, False, None, "head_dim", "Su et al. 2021 (RoFormer)"),
        PositionalScheme("alibi", "score", False, False, None, None, "Press et al. 2022 (Train Short, Test Long)"),
        PositionalScheme("t5", "score", False, False, None, None, "Raffel et al. 2020 (T5), section 2.1"),
        PositionalScheme(
            "shaw", "score", True, False, None, None, "Shaw et al. 2018 (relative position representations)"
        ),
        PositionalScheme("none", "none", False, False, None, None, "Haviv et al. 2022; Kazemnejad et al. 2023 (NoPE)"),
    )
}
POSITIONAL_NAMES: tuple[str, ...] = tuple(SCHEMES)


def positional_scheme(name: str) -> PositionalScheme:
    """The scheme called ``name``; raises ValueError listing the names for anything else."""
    if not isinstance(name, str) or name not in SCHEMES:
        raise ValueError(f"unknown positional scheme {name!r}; choose one of {', '.join(POSITIONAL_NAMES)}")
    return SCHEMES[name]
