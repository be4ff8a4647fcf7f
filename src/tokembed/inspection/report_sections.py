"""The sections of the HTML report, in page order: each takes the ``ReportInput`` and returns HTML.

Every value shown is escaped here; pictures come from ``tokembed.inspection.plot`` as PNG ``data:`` URIs.
"""

from __future__ import annotations

import base64
import html
import json
import math
from collections.abc import Sequence
from pathlib import Path

import torch

from tokembed.inspection.table import EmbeddingTable

__all__ = ["SECTIONS"]

# Asked about when the user names no words and there are no counts to find frequent ones.
DEFAULT_WORDS = (" the", " man", " woman", " king", " house", " good", " said", " one", " time", " picture")
DEFAULT_TEXT = "I had always thought Jack Gisburn rather a cheap genius--though a good fellow enough."
ANALOGY = ((" king", " woman"), (" man",))
NO_COUNTS = (
    "No corpus was given and the table records no token counts, so frequencies and under-trained tokens are not "
    "shown (pass --corpus: the text or shard folder it was trained on; checkpoints of this tokembed record them)."
)


# ----------------------------------------------------------------------------------------- HTML helpers
def _img(fig, alt: str) -> str:
    from tokembed._plot import figure_png

    data = base64.b64encode(figure_png(fig)).decode("ascii")
    return f'<figure><img alt="{html.escape(alt)}" src="data:image/png;base64,{data}"><figcaption>{html.escape(alt)}</figcaption></figure>'


def _tok(label: str) -> str:
    return f"<code>{html.escape(repr(label))}</code>"


def _note(text: str) -> str:
    return f'<p class="note">{html.escape(text)}</p>'


def _table(header: Sequence[str] | None, rows: Sequence[Sequence[str]]) -> str:
    # Cells are HTML already (escaped by the caller); header names are plain text.
    head = "<thead><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in header) + "</tr></thead>" if header else ""
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table>{head}<tbody>{body}</tbody></table>"


def _marked(table: EmbeddingTable, token_id: int, label_html: str) -> str:
    """A token's label, with its count and the under-trained mark when the table has counts."""
    n = table.count(token_id)
    if n is None:
        return label_html
    if n < table.min_count:
        return f'{label_html} <span class="rare">(read {n:,}&times;: under-trained)</span>'
    return label_html


def _num(x: float | None, fmt: str = ".3f") -> str:
    return "&ndash;" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, fmt)


# --------------------------------------------------------------------------------------------- sections
def summary(given) -> str:
    t, c = given.table, given.checkpoint_config
    rows = [
        ("source", html.escape(t.source or "(in memory)")),
        ("token table", f"{t.vocab_size:,} tokens &times; {t.dim} dimensions"),
        ("tokenizer", html.escape(getattr(t.tokenizer, "name", "none") if t.tokenizer is not None else "none")),
        ("positional scheme", html.escape(t.positional)),
    ]
    if t.positions is not None:
        rows.append(("position table", f"{t.positions.shape[0]:,} positions &times; {t.dim}"))
    n = t.norms
    rows.append(
        ("token vector norms", f"mean {float(n.mean()):.4g}, min {float(n.min()):.4g}, max {float(n.max()):.4g}")
    )
    for key in ("step", "tokens_seen"):
        if c is not None and isinstance(c.get(key), int):
            rows.append((key.replace("_", " "), f"{c[key]:,}"))
    if t.counts is not None:
        read, distinct, rare = int(t.counts.sum()), int((t.counts > 0).sum()), int(t.undertrained_ids().numel())
        rows.append(("token counts", f"{html.escape(t.counts_source)}: {read:,} tokens, {distinct:,} distinct"))
        rows.append(("under-trained", f"{rare:,} tokens read fewer than {t.min_count} times"))
    page = "<h2>Summary</h2>" + _table(None, [(html.escape(k), v) for k, v in rows])
    return page + ("" if t.counts is not None else _note(NO_COUNTS))


def training(given) -> str:
    log = _read_log(given)
    if log is None:
        return ""
    from tokembed._plot import plot_loss

    try:
        return "<h2>Training</h2>" + _img(plot_loss(log), "Training and validation loss against the step")
    except (ValueError, KeyError, TypeError) as e:
        return "<h2>Training</h2>" + _note(f"log.json could not be drawn: {e}")


def _read_log(given) -> dict | None:
    if given.checkpoint is None or not (given.checkpoint / "log.json").is_file():
        return None
    try:
        return json.loads((given.checkpoint / "log.json").read_text(encoding="utf-8"))
    except ValueError:
        return None


def token_pictures(given) -> str:
    from tokembed.inspection.plot import plot_norm_vs_frequency, plot_projection

    t, c = given.table, given.config
    source = t.counts_source or "no counts"
    pics = [
        _img(
            plot_projection(t, method="pca", n_points=c.n_points, label_top=c.label_top),
            f"PCA projection of the token embeddings ({source})",
        )
    ]
    if _want_tsne(c):
        pics.append(
            _img(
                plot_projection(t, method="tsne", n_points=c.n_points, label_top=c.label_top),
                f"t-SNE map of the token embeddings ({source})",
            )
        )
    elif c.tsne is None:
        pics.append(_note("t-SNE is not drawn: install scikit-learn (pip install 'tokembed[tsne]')."))
    if t.counts is not None:
        pics.append(_img(plot_norm_vs_frequency(t), f"Embedding norm against token frequency ({source})"))
    return "<h2>Token embeddings</h2>" + "".join(pics)


def _want_tsne(config) -> bool:
    if config.tsne is not None:
        return config.tsne
    try:
        import sklearn  # noqa: F401
    except ImportError:
        return False
    return True


def undertrained(given) -> str:
    from tokembed.inspection.undertrained import indicators, known_unused_ids, undertrained_tokens

    t = given.table
    head = "<h2>Under-trained tokens</h2>"
    if t.counts is None:
        reference = known_unused_ids(t.tokenizer, t.vocab_size)
        if not reference:
            return head + _note(NO_COUNTS)
        cosine = indicators(t.tokens, reference)["cosine"]
        top = torch.argsort(cosine, stable=True)[:20].tolist()
        listed = ", ".join(_tok(t.label(i)) for i in top)
        return (
            head
            + _note(NO_COUNTS)
            + f"<p>The 20 tokens most like the never-in-UTF-8 byte tokens by Magikarp's cosine indicator (candidates, unconfirmed): {listed}</p>"
        )
    result = undertrained_tokens(t, limit=20)
    rows, found, reference = result.tokens, result.detection, result.reference
    intro = (
        f"<p>{result.total:,} of {t.vocab_size:,} tokens were read fewer than {t.min_count} times "
        f"({int((t.counts == 0).sum()):,} never). Their vectors mean little: every answer below marks them. "
        "Land &amp; Bartolo 2024 (&ldquo;Fishing for Magikarp&rdquo;) find such tokens from the table alone; "
        f"here their indicators are scored against the recorded counts: a row is flagged when its indicator is at most "
        f"the largest among the {len(reference)} byte tokens that never occur in UTF-8.</p>"
    )
    detect = (
        _table(
            ["indicator", "flagged", "precision", "recall", "random precision", "average precision"],
            [
                (
                    html.escape(d.indicator),
                    f"{d.flagged:,}",
                    _num(d.precision),
                    _num(d.recall),
                    _num(d.base_rate),
                    _num(d.average_precision),
                )
                for d in found.values()
            ],
        )
        if found
        else _note("The tokenizer has no byte tokens that never occur in UTF-8: the indicators are not scored.")
    )
    listed = _table(
        ["id", "token", "read", "norm", "cosine indicator"],
        [(str(r.id), _tok(r.token), f"{r.count:,}", f"{r.norm:.4g}", _num(r.cosine, ".4f")) for r in rows],
    )
    return head + intro + detect + "<p>The first 20, fewest reads first:</p>" + listed


def isotropy(given) -> str:
    from tokembed.embeddings.isotropy import isotropy_of_table

    t = given.table
    now = isotropy_of_table(t.tokens, t.counts, min_count=t.min_count)
    labels = {"all": "all rows", "trained": f"trained rows (read &ge; {t.min_count} times)"}
    rows = [
        (
            labels[k],
            f"{v.rows:,}",
            f"{v.mean_cosine:+.4f}",
            f"{v.top_pc_share:.3f}",
            f"{v.top10_pc_share:.3f}",
            f"{v.isoscore:.4f}",
        )
        for k, v in now.items()
        if v is not None
    ]
    page = (
        "<h2>Isotropy</h2><p>How evenly the rows fill the space: the mean cosine between all pairs of rows (0 when "
        "directions are spread evenly), the share of variance on the first (and first ten) principal components, and "
        "IsoScore (Rudman et al. 2022: 1 isotropic, 0 all on one line).</p>"
        + _table(["rows", "n", "mean cosine", "PC1 share", "PC1-10 share", "IsoScore"], rows)
    )
    history = (_read_log(given) or {}).get("isotropy") or []
    if history:
        hist = [(f"{r['step']:,}", *(_iso_cell(r.get(k)) for k in ("all", "trained"))) for r in history]
        page += "<p>Over the run's checkpoints (from log.json; trained rows: read &ge; 10 times by then):</p>"
        page += _table(["step", "all rows: mean cos / PC1 / IsoScore", "trained rows: mean cos / PC1 / IsoScore"], hist)
    elif t.counts is None:
        page += _note(NO_COUNTS)
    return page


def _iso_cell(r: dict | None) -> str:
    return "&ndash;" if not r else f"{r['mean_cosine']:+.4f} / {r['top_pc_share']:.3f} / {r['isoscore']:.4f}"


def neighbours(given) -> str:
    t, c = given.table, given.config
    rows = []
    for w in _words(t, c):
        try:
            nb = t.neighbours(w, topn=c.topn)
        except ValueError as e:
            rows.append((_tok(w) if isinstance(w, str) else str(w), html.escape(str(e))))
            continue
        shown = _tok(w) if isinstance(w, str) else f"id {w} {_tok(t.label(w))}"
        ids = [w] if isinstance(w, int) else t.ids(w)
        shown = shown if len(ids) != 1 else _marked(t, ids[0], shown)
        rows.append((shown, ", ".join(f"{_marked(t, n.id, _tok(n.token))} {n.score:.3f}" for n in nb)))
    page = (
        "<h2>Nearest neighbours</h2><p>Cosine similarity; a word of several tokens is the mean of its tokens' vectors.</p>"
        + _table(["word", f"{c.topn} nearest tokens (cosine)"], rows)
    )
    return page + _analogy(t, c)


def _words(t: EmbeddingTable, c) -> list:
    if c.words is not None:
        return list(c.words)
    if t.counts is not None:
        return _frequent_words(t, 10)
    return list(DEFAULT_WORDS) if t.tokenizer is not None else [0, 1, 2]


def _frequent_words(table: EmbeddingTable, n: int) -> list[str]:
    # The most frequent tokens that are words (letters, maybe after a space), for the neighbour tables.
    words: list[str] = []
    counts = table.counts  # (V,) reads per id
    if counts is None:
        return words
    for i in torch.argsort(counts, descending=True, stable=True).tolist():
        if counts[i] == 0 or len(words) >= n:
            break
        lab = table.label(i)
        if lab.strip().isalpha() and len(lab.strip()) > 2:
            words.append(lab)
    return words


def _analogy(t: EmbeddingTable, c) -> str:
    if t.tokenizer is None:
        return ""
    (pos, neg) = ANALOGY
    try:
        ans = t.most_similar(positive=list(pos), negative=list(neg), topn=c.topn)
    except ValueError as e:
        return _note(f"Analogy not computed: {e}")
    inputs = [_marked(t, t.ids(w)[0], _tok(w)) for w in (neg[0], pos[0], pos[1])]
    answers = ", ".join(f"{_marked(t, n.id, _tok(n.token))} {n.score:.3f}" for n in ans)
    return f"<p>Analogy {inputs[0]} is to {inputs[1]} as {inputs[2]} is to: {answers}</p>"


def text_tokens(given) -> str:
    t = given.table
    if t.tokenizer is None:
        return ""
    text, origin = _sample_text(given)
    try:
        rows = t.token_table(text)[:60]
    except ValueError as e:
        return "<h2>Tokens of a text</h2>" + _note(str(e))
    cells = [
        (
            str(r.position),
            str(r.id),
            _marked(t, r.id, _tok(r.token)),
            f"{r.norm:.4g}",
            "&ndash;" if r.count is None else f"{r.count:,}",
        )
        for r in rows
    ]
    return f"<h2>Tokens of a text</h2><p>{html.escape(origin)}: {_tok(text[:200])}</p>" + _table(
        ["position", "id", "token", "norm", "read"], cells
    )


def data_sources(data: str | dict | None) -> list[Path]:
    """The paths a checkpoint's data record names: one text file or shard folder, or a mixture's sources (its
    spec, ``{"sources": [[path, weight], ...], "seed"}``), in the mixture's order."""
    if isinstance(data, dict):
        return [Path(str(src[0])) for src in data.get("sources") or [] if isinstance(src, (list, tuple)) and src]
    return [Path(data)] if data else []


def _sample_text(given) -> tuple[str, str]:
    """The start of the run's own training data (text file or shard folder; a mixture's first source), else the
    chapter's sentence."""
    if given.config.text is not None:
        return given.config.text, "the given text"
    data = ((given.checkpoint_config or {}).get("train") or {}).get("data")
    sources = data_sources(data)
    of = f" (the first of the mixture's {len(sources)} sources)" if isinstance(data, dict) else ""
    path = sources[0] if sources else None
    if path is not None and path.is_file():
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read(200), f"the start of the training data {path}{of}"
    if path is not None and ((path / "manifest.json").is_file() or Path(f"{path}.idx").is_file()):
        from tokembed.shards.reader import open_shards

        shards = open_shards(path, split="train")
        ids = [int(i) for i in shards.read(0, min(60, shards.n_tokens))]
        return given.table.tokenizer.decode(ids), f"the start of the training data {path}{of}"
    return DEFAULT_TEXT, "the chapter's story (the table records no training data to read)"


def positions(given) -> str:
    t = given.table
    head = "<h2>Position embeddings</h2>"
    if t.positions is not None:
        return head + _absolute_positions(t, t.positions, given.config)
    from tokembed.inspection.plot import plot_position_picture
    from tokembed.inspection.positions import checkpoint_position_pictures, describe_scheme, has_position_modules

    about = f"<p>{html.escape(describe_scheme(t.positional))}</p>"
    if not has_position_modules(t.positional):
        return head + about
    if given.checkpoint is None:
        return (
            head
            + about
            + _note("The positional modules live in the checkpoint: report on the checkpoint directory to see them.")
        )
    try:
        pictures = checkpoint_position_pictures(given.checkpoint, max_positions=given.config.max_positions)
    except (ValueError, OSError) as e:
        return head + about + _note(f"The model could not be loaded to draw its positional modules: {e}")
    return head + about + "".join(_img(plot_position_picture(p), p.title) for p in pictures)


def _absolute_positions(t: EmbeddingTable, positions: torch.Tensor, config) -> str:
    from tokembed.inspection.plot import plot_position_distance, plot_position_similarity

    P = positions.shape[0]  # positions: t.positions, (P,D)
    shown = P if config.max_positions is None else min(P, config.max_positions)
    sim = t.position_similarity()
    offs = [k for k in (1, 2, 4, 8, 16, 64) if k < P]
    return (
        _img(
            plot_position_similarity(t, max_positions=shown),
            f"Cosine similarity between the first {shown} of {P} {t.positional} positions",
        )
        + _img(plot_position_distance(t), "Distance of each position's vector to its neighbours")
        + _table(
            ["positions apart", "mean cosine similarity"],
            [(str(k), f"{float(torch.diagonal(sim, k).mean()):.4f}") for k in offs],
        )
    )


def settings(given) -> str:
    c = given.checkpoint_config
    if c is None:
        return ""
    applied = {**_model_settings(c.get("model") or {}), **_train_settings(c.get("train") or {})}
    rows = [(html.escape(k), html.escape(json.dumps(v))) for k, v in applied.items()]
    return "<h2>Settings</h2><p>Those that applied to this run.</p>" + _table(["setting", "value"], rows)


def _model_settings(model: dict) -> dict:
    """The model's settings: its scheme's options (0.1's flat fields read as them) and the module they build."""
    from tokembed.model.config import GPTConfig

    config = GPTConfig.from_dict(model)
    out = {f"model.{k}": v for k, v in config.to_dict().items()}
    if not config.document_mask:
        out.pop("model.eot_token", None)  # the separator only the document mask reads
    if not out["model.positional_options"]:
        out.pop("model.positional_options")  # a scheme without options
    module = config.scheme.module(config.positional_options, config.shape)  # asked of the scheme itself
    if module is not None:
        out["model.positional module"] = f"{type(module).__name__}({module.extra_repr()})"
    out["model.positional acts"] = config.scheme.acts
    return out


def _train_settings(train: dict) -> dict:
    """The training settings, without those the run's data made moot."""
    out = {f"train.{k}": v for k, v in train.items() if v is not None or k == "stride"}
    if train.get("stride") is None and "max_length" in train:
        out["train.stride"] = f"{train['max_length']} (max_length: windows do not overlap)"
    data = train.get("data")
    if isinstance(data, dict) or (data and Path(data).is_dir()):
        out.pop("train.val_fraction", None)  # shard folders (a mixture's too) bring their own val split
    return out


SECTIONS = (summary, training, token_pictures, undertrained, isotropy, neighbours, text_tokens, positions, settings)
