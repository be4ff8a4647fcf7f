"""The chapter end to end: text -> tokens -> windows -> a batch -> token + positional embeddings."""

from __future__ import annotations

from typing import cast

import torch

from tokembed.data.book import GPTDatasetV1, create_dataloader_v1
from tokembed.embeddings import InputEmbedding, LearnedPositionalEmbedding, TokenEmbedding
from tokembed.tokenizer import ENDOFTEXT, Tokenizer, TokenizerLike, get_tokenizer, gpt2_files, tokenizer_identity

__all__ = ["chapter_walk", "default_corpus"]


def default_corpus() -> tuple[str, str]:
    """A text every Python install carries offline: the interpreter's documentation topics.

    Returns:
        (name, text): the topics of ``pydoc_data.topics`` in sorted order, joined by blank lines.
    """
    from pydoc_data.topics import topics

    return "pydoc_data.topics (Python's documentation topics)", "\n\n".join(topics[k] for k in sorted(topics))


def _rounded(t: torch.Tensor, digits: int = 4) -> list:
    # Through float64 so that JSON shows 0.6, not float32's 0.6000000238418579.
    return torch.round(t.detach().double(), decimals=digits).tolist()


def _tokenizer_facts(enc: Tokenizer) -> dict:
    ident = tokenizer_identity(enc)
    if ident.source == "gpt2":
        vocab_bpe, encoder_json = gpt2_files()
        files = {"vocab.bpe": str(vocab_bpe), "encoder.json": str(encoder_json)}
    else:
        files = {name: ident.source for name, _ in ident.files}
    eot = enc.decode_single_token_bytes(enc.eot_token).decode("utf-8", "replace")
    return {
        "name": enc.name,
        "n_vocab": enc.n_vocab,
        "endoftext": {"token": eot, "id": enc.eot_token},
        "files": files,
        "offline": True,
    }


def chapter_walk(
    text: str | None = None,
    *,
    source: str | None = None,
    batch_size: int = 8,
    max_length: int = 4,
    stride: int | None = None,
    dim: int = 256,
    seed: int = 123,
    tokenizer: TokenizerLike = "gpt2",
) -> dict:
    """Run the chapter's example and return every fact it prints, as plain data.

    Args:
        text: the corpus; default :func:`default_corpus`.
        source: a name for the text in the output.
        batch_size, max_length, stride: the loader's settings (stride defaults to max_length, as in the chapter).
        dim: the embedding width (the chapter's 256).
        seed: the seed of the chapter's small table (123).
        tokenizer: the chapter's ``"gpt2"``, or any name or file `tokembed.get_tokenizer` takes.
    """
    if text is None:
        source, text = default_corpus()
    stride = max_length if stride is None else stride
    enc = get_tokenizer(tokenizer)
    n_tokens = len(enc.encode(text, allowed_special={ENDOFTEXT})) if isinstance(text, str) else 0

    # The seed-123 table of 6 tokens x 3 dimensions and the lookup of token 3.
    torch.manual_seed(seed)
    table = TokenEmbedding(6, 3)
    lookup = table(torch.tensor([3]))  # (1,3)

    # The first batch of the loader, shuffle=False as in the chapter.
    loader = create_dataloader_v1(
        text, batch_size=batch_size, max_length=max_length, stride=stride, shuffle=False, tokenizer=enc
    )
    inputs, targets = next(iter(loader))  # (B,T), (B,T)

    # Token + absolute positional embeddings: (B,T,D) + (T,D) -> (B,T,D).
    embed = InputEmbedding(enc.n_vocab, dim, context_length=max_length)
    token_embeddings = embed.token(inputs)  # (B,T,D)
    position = cast(LearnedPositionalEmbedding, embed.position)  # the default scheme, learned: a table
    pos_embeddings = position(torch.arange(max_length))  # (T,D)
    input_embeddings = embed(inputs)  # (B,T,D)

    tok, pos = torch.tensor([0.5, -0.2, 0.1]), torch.tensor([0.1, 0.3, -0.1])
    return {
        "tokenizer": _tokenizer_facts(enc),
        "text": {"source": source or "text", "characters": len(text), "tokens": n_tokens},
        "loader": {
            "batch_size": batch_size,
            "max_length": max_length,
            "stride": stride,
            "shuffle": False,
            "windows": len(cast(GPTDatasetV1, loader.dataset)),  # the drop-in's loader is over a GPTDatasetV1
            "batches": len(loader),
        },
        "first_batch": {
            "inputs": inputs.tolist(),
            "targets": targets.tolist(),
            "first_window_tokens": [enc.decode([i]) for i in inputs[0].tolist()],
            "first_target_tokens": [enc.decode([i]) for i in targets[0].tolist()],
        },
        "seed_table": {"seed": seed, "weight": _rounded(table.weight), "token_3": _rounded(lookup)[0]},
        "shapes": {
            "token_embeddings": list(token_embeddings.shape),
            "positional_embeddings": list(pos_embeddings.shape),
            "input_embeddings": list(input_embeddings.shape),
        },
        "worked_example": {"token": tok.tolist(), "position": pos.tolist(), "combined": _rounded(tok + pos)},
    }
