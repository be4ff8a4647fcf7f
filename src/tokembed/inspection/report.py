"""`tokembed report`: one self-contained HTML page about an embedding table.

The page holds the pictures (PNG, embedded as ``data:`` URIs), the neighbour tables, an analogy,
the tokens of a sample text and the checkpoint's settings. It has no script and no link to
anything outside itself: it opens offline, from a mail attachment as well as from disk.
"""

from __future__ import annotations

import base64
import html
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from tokembed._checks import check_int
from tokembed.embeddings.names import SCHEMES
from tokembed.inspection.counts import token_counts
from tokembed.inspection.load import is_tokembed_checkpoint, load_table
from tokembed.inspection.table import EmbeddingTable

__all__ = ["ReportConfig", "write_report"]

# Asked about when the user names no words and no corpus gives frequent ones.
DEFAULT_WORDS = (" the", " man", " woman", " king", " house", " good", " said", " one", " time", " picture")
DEFAULT_TEXT = "I had always thought Jack Gisburn rather a cheap genius--though a good fellow enough."
ANALOGY = ((" king", " woman"), (" man",))


@dataclass(frozen=True)
class ReportConfig:
    """What goes into a report.

    Args:
        corpus: text the table was trained on (file or folder of ``*.txt``), for frequencies;
            default: the checkpoint's ``train.data`` when it is text.
        words: words whose neighbours are listed (as written: mind GPT-2's leading space);
            default: the corpus's most frequent words, else a fixed list.
        topn: neighbours per word.
        n_points: tokens placed in the projections.
        label_top: tokens labelled in the projections.
        tsne: also draw a t-SNE map: True, False, or None for "when scikit-learn is installed".
        text: the text whose tokens are tabled; default: the corpus's start.
        max_positions: positions shown in the heatmap (all if None).
    """

    corpus: str | Path | None = None
    words: Sequence[str] | None = None
    topn: int = 8
    n_points: int = 1500
    label_top: int = 40
    tsne: bool | None = None
    text: str | None = None
    max_positions: int | None = 256

    def __post_init__(self) -> None:
        for name in ("topn", "n_points", "label_top"):
            v = getattr(self, name)
            check_int(name, v, min=1, noun="an integer")
        if self.n_points < 3:
            raise ValueError(f"n_points must be >= 3 for a projection, got {self.n_points}")
        if self.max_positions is not None and (not isinstance(self.max_positions, int) or self.max_positions < 2):
            raise ValueError(f"max_positions must be an integer >= 2 or None, got {self.max_positions!r}")


def _img(fig, alt: str) -> str:
    from tokembed._plot import figure_png

    data = base64.b64encode(figure_png(fig)).decode("ascii")
    return f'<figure><img alt="{html.escape(alt)}" src="data:image/png;base64,{data}"><figcaption>{html.escape(alt)}</figcaption></figure>'


def _tok(label: str) -> str:
    return f"<code>{html.escape(repr(label))}</code>"


def _table(header: Sequence[str] | None, rows: Sequence[Sequence[str]]) -> str:
    # Cells are HTML already (escaped by the caller); header names are plain text.
    head = "<thead><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in header) + "</tr></thead>" if header else ""
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table>{head}<tbody>{body}</tbody></table>"


def _frequent_words(table: EmbeddingTable, counts: torch.Tensor, n: int) -> list[str]:
    # The most frequent tokens that are words (letters, maybe after a space), for the neighbour tables.
    words = []
    for i in torch.argsort(counts[: table.vocab_size], descending=True, stable=True).tolist():
        if counts[i] == 0 or len(words) >= n:
            break
        lab = table.label(i)
        if lab.strip().isalpha() and len(lab.strip()) > 2:
            words.append(lab)
    return words


_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:2rem auto;max-width:1100px;padding:0 1rem;color:#222;background:#fff}
h1{font-size:1.6rem}h2{margin-top:2.2rem;border-bottom:1px solid #ddd;padding-bottom:.3rem}
table{border-collapse:collapse;margin:.6rem 0;font-size:.9rem}th,td{border:1px solid #ddd;padding:.25rem .6rem;text-align:left;vertical-align:top}
th{background:#f4f4f4}code{background:#f6f6f6;padding:0 .2rem}figure{margin:1rem 0}img{max-width:100%;border:1px solid #eee}
figcaption{font-size:.85rem;color:#555}.grid{display:flex;flex-wrap:wrap;gap:1rem}.note{color:#666;font-size:.9rem}
"""


def write_report(
    source, out: str | Path, *, config: ReportConfig = ReportConfig(), overwrite: bool = False, progress: bool = False
) -> Path:
    """Write the HTML report about ``source`` to ``out``.

    Args:
        source: a checkpoint directory, an exported table, GPT-2 weights, or an ``EmbeddingTable``.
        out: the ``.html`` file to write (atomically).
        config: what to include.
        overwrite: replace an existing file.
        progress: progress bars (corpus counting, then one step per section).

    Returns:
        ``out``.

    Raises:
        ModuleNotFoundError: matplotlib (extra ``plot``) is not installed.
    """
    from tokembed._atomic import atomic_create, check_target

    out = Path(out)
    check_target(out, overwrite)  # fail before the slow part
    from tqdm.auto import tqdm

    r = _ReportData.gather(source, config, progress=progress)
    steps = [
        lambda: _summary_section(r),
        lambda: _training_section(r),
        lambda: _embeddings_section(r, config),  # the slow one: PCA and t-SNE pictures
        lambda: _neighbours_section(r, config),
        lambda: _text_section(r, config),
        lambda: _positions_section(r, config),
        lambda: _settings_section(r),
    ]
    sections = [step() for step in tqdm(steps, desc="report", unit="section", disable=not progress, leave=False)]
    title = f"tokembed report: {r.table.source or 'embedding table'}"
    page = (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>"
        f"<h1>{html.escape(title)}</h1>" + "".join(sections) + "</body></html>\n"
    )
    with atomic_create(out, overwrite=overwrite) as f:
        f.write(page)
    return out


@dataclass
class _ReportData:
    """What the sections are drawn from: the table, its checkpoint (if any), the corpus and its counts."""

    table: EmbeddingTable
    ckpt: Path | None
    ckpt_config: dict | None
    corpus: str | None
    counts: torch.Tensor | None
    notes: list[str]

    @classmethod
    def gather(cls, source, config: ReportConfig, *, progress: bool = False) -> _ReportData:
        table = source if isinstance(source, EmbeddingTable) else load_table(source)
        ckpt = None
        if not isinstance(source, EmbeddingTable) and Path(source).is_dir() and is_tokembed_checkpoint(Path(source)):
            ckpt = Path(source)
        ckpt_config = None
        if ckpt is not None:
            from tokembed.model.checkpoint import read_checkpoint_config

            ckpt_config = read_checkpoint_config(ckpt)
        data = cls(table, ckpt, ckpt_config, config.corpus, None, [])
        data._count_corpus(config, progress=progress)
        return data

    def _count_corpus(self, config: ReportConfig, *, progress: bool = False) -> None:
        if self.corpus is None and self.ckpt_config is not None:
            data = (self.ckpt_config.get("train") or {}).get("data")
            if data and (Path(data).is_file() or Path(data).is_dir()):
                self.corpus = data
        if self.table.tokenizer is None:
            return
        if self.corpus is None:
            self.notes.append("No corpus was given, so token frequencies are not shown (pass --corpus FILE).")
            return
        try:
            self.counts = token_counts(
                self.corpus, tokenizer=self.table.tokenizer, vocab_size=self.table.vocab_size, progress=progress
            )
        except (ValueError, FileNotFoundError) as e:
            if config.corpus is not None:
                raise
            self.notes.append(
                f"Token frequencies are not shown: the training data could not be read as text ({e}). Pass --corpus."
            )


def _summary_section(r: _ReportData) -> str:
    table = r.table
    tokenizer = getattr(table.tokenizer, "name", "none") if table.tokenizer is not None else "none"
    summary = [
        ("source", html.escape(table.source or "(in memory)")),
        ("token table", f"{table.vocab_size:,} tokens &times; {table.dim} dimensions"),
        ("tokenizer", html.escape(tokenizer)),
        ("positional scheme", html.escape(table.positional)),
    ]
    if table.positions is not None:
        summary.append(("position table", f"{table.positions.shape[0]:,} positions &times; {table.dim}"))
    norms = table.norms
    summary.append(
        (
            "token vector norms",
            f"mean {float(norms.mean()):.4g}, min {float(norms.min()):.4g}, max {float(norms.max()):.4g}",
        )
    )
    for key in ("step", "tokens_seen") if r.ckpt_config is not None else ():
        if key in r.ckpt_config:
            v = r.ckpt_config[key]
            summary.append((key.replace("_", " "), f"{v:,}" if isinstance(v, int) else html.escape(str(v))))
    if r.counts is not None:
        c = r.counts
        summary.append(
            ("corpus", f"{html.escape(str(r.corpus))}: {int(c.sum()):,} tokens, {int((c > 0).sum()):,} distinct")
        )
    notes = "".join(f'<p class="note">{html.escape(n)}</p>' for n in r.notes)
    return "<h2>Summary</h2>" + _table(None, [(html.escape(k), v) for k, v in summary]) + notes


def _training_section(r: _ReportData) -> str:
    if r.ckpt is None or not (r.ckpt / "log.json").is_file():
        return ""
    from tokembed._plot import plot_loss

    try:
        log = json.loads((r.ckpt / "log.json").read_text(encoding="utf-8"))
        return "<h2>Training</h2>" + _img(plot_loss(log), "Training and validation loss against the step")
    except (ValueError, KeyError, TypeError) as e:
        return f'<h2>Training</h2><p class="note">log.json could not be drawn: {html.escape(str(e))}</p>'


def _embeddings_section(r: _ReportData, config: ReportConfig) -> str:
    from tokembed.inspection.plot import plot_norm_vs_frequency, plot_projection

    def projection(method: str) -> str:
        fig = plot_projection(
            r.table, counts=r.counts, method=method, n_points=config.n_points, label_top=config.label_top
        )
        return _img(
            fig, "PCA projection of the token embeddings" if method == "pca" else "t-SNE map of the token embeddings"
        )

    pics = [projection("pca")]
    want_tsne = config.tsne
    if want_tsne is None:
        try:
            import sklearn  # noqa: F401

            want_tsne = True
        except ImportError:
            want_tsne = False
        if not want_tsne:
            pics.append(
                "<p class=\"note\">t-SNE is not drawn: install scikit-learn (pip install 'tokembed[tsne]').</p>"
            )
    if want_tsne:
        pics.append(projection("tsne"))
    if r.counts is not None:
        pics.append(_img(plot_norm_vs_frequency(r.table, r.counts), "Embedding norm against token frequency"))
    return "<h2>Token embeddings</h2>" + "".join(pics)


def _report_words(r: _ReportData, config: ReportConfig) -> list:
    if config.words is not None:
        return list(config.words)
    if r.counts is not None:
        return _frequent_words(r.table, r.counts, 10)
    return list(DEFAULT_WORDS) if r.table.tokenizer is not None else [0, 1, 2]


def _neighbours_section(r: _ReportData, config: ReportConfig) -> str:
    table, rows = r.table, []
    for w in _report_words(r, config):
        try:
            nb = table.neighbours(w, topn=config.topn)
        except ValueError as e:
            rows.append((_tok(w) if isinstance(w, str) else str(w), html.escape(str(e))))
            continue
        shown = _tok(w) if isinstance(w, str) else f"id {w} {_tok(table.label(w))}"
        rows.append((shown, ", ".join(f"{_tok(n.token)} {n.score:.3f}" for n in nb)))
    out = (
        "<h2>Nearest neighbours</h2><p>Cosine similarity; a word of several tokens is the mean of its tokens' vectors.</p>"
        + _table(["word", f"{config.topn} nearest tokens (cosine)"], rows)
    )
    if table.tokenizer is None:
        return out
    (pos, neg) = ANALOGY
    try:
        ans = table.most_similar(positive=list(pos), negative=list(neg), topn=config.topn)
    except ValueError as e:
        return out + f'<p class="note">Analogy not computed: {html.escape(str(e))}</p>'
    found = ", ".join(f"{_tok(n.token)} {n.score:.3f}" for n in ans)
    return out + f"<p>Analogy {_tok(neg[0])} is to {_tok(pos[0])} as {_tok(pos[1])} is to: {found}</p>"


def _text_section(r: _ReportData, config: ReportConfig) -> str:
    if r.table.tokenizer is None:
        return ""
    text = config.text
    if text is None and r.corpus is not None and Path(r.corpus).is_file():
        text = Path(r.corpus).read_text(encoding="utf-8", errors="replace")[:200]
    text = text or DEFAULT_TEXT
    try:
        trows = r.table.token_table(text)[:60]
    except ValueError as e:
        return f'<h2>Tokens of a text</h2><p class="note">{html.escape(str(e))}</p>'
    rows = [(str(t.position), str(t.id), _tok(t.token), f"{t.norm:.4g}") for t in trows]
    return f"<h2>Tokens of a text</h2><p>{_tok(text[:200])}</p>" + _table(["position", "id", "token", "norm"], rows)


def _positions_section(r: _ReportData, config: ReportConfig) -> str:
    from tokembed.inspection.plot import plot_position_distance, plot_position_similarity

    table = r.table
    if table.positions is None:
        scheme = SCHEMES.get(table.positional)
        if not table.positional or (scheme is not None and scheme.acts == "none"):
            return ""
        return (
            f'<h2>Position embeddings</h2><p class="note">{html.escape(table.positional)} positions act inside '
            "attention: there is no per-position vector to show.</p>"
        )
    P = table.positions.shape[0]
    shown = P if config.max_positions is None else min(P, config.max_positions)
    sim = table.position_similarity()
    offs = [k for k in (1, 2, 4, 8, 16, 64) if k < P]
    rows = [(str(k), f"{float(torch.diagonal(sim, k).mean()):.4f}") for k in offs]
    return (
        "<h2>Position embeddings</h2>"
        + _img(
            plot_position_similarity(table, max_positions=shown),
            f"Cosine similarity between the first {shown} of {P} positions",
        )
        + _img(plot_position_distance(table), "Distance of each position's vector to its neighbours")
        + _table(["positions apart", "mean cosine similarity"], rows)
    )


def _settings_section(r: _ReportData) -> str:
    if r.ckpt_config is None:
        return ""
    settings = {
        **{f"model.{k}": v for k, v in (r.ckpt_config.get("model") or {}).items()},
        **{f"train.{k}": v for k, v in (r.ckpt_config.get("train") or {}).items()},
    }
    rows = [(html.escape(k), html.escape(json.dumps(v))) for k, v in settings.items()]
    return "<h2>Settings</h2>" + _table(["setting", "value"], rows)
