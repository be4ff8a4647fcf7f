"""`tokembed report`: one self-contained HTML page about an embedding table.

The page holds the pictures (PNG, embedded as ``data:`` URIs), the under-trained tokens and how
well Magikarp's indicators find them, the table's isotropy over the run, the neighbour tables, an
analogy, the tokens of a text from the run's own data, what the positional scheme does, and the
settings that applied to the run. Token frequencies follow the one rule of
``tokembed.inspection.counts``: the counts the table records, or ``corpus`` instead. The page has no
script and no link to anything outside itself: it opens offline, from a mail attachment as well as
from disk. The sections are written by ``tokembed.inspection.report_sections``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tokembed.inspection.counts import table_with_counts
from tokembed.inspection.load import is_tokembed_checkpoint, load_table
from tokembed.inspection.report_config import ReportConfig
from tokembed.inspection.table import EmbeddingTable

__all__ = ["ReportConfig", "write_report"]


@dataclass(frozen=True)
class ReportInput:
    """What every section reads: the table (with its counts), the checkpoint if any, and the config."""

    table: EmbeddingTable
    checkpoint: Path | None
    checkpoint_config: dict | None
    config: ReportConfig


_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:2rem auto;max-width:1100px;padding:0 1rem;color:#222;background:#fff}
h1{font-size:1.6rem}h2{margin-top:2.2rem;border-bottom:1px solid #ddd;padding-bottom:.3rem}
table{border-collapse:collapse;margin:.6rem 0;font-size:.9rem}th,td{border:1px solid #ddd;padding:.25rem .6rem;text-align:left;vertical-align:top}
th{background:#f4f4f4}code{background:#f6f6f6;padding:0 .2rem}figure{margin:1rem 0}img{max-width:100%;border:1px solid #eee}
figcaption{font-size:.85rem;color:#555}.grid{display:flex;flex-wrap:wrap;gap:1rem}.note{color:#666;font-size:.9rem}
.rare{color:#b00}
"""


def write_report(
    source: str | Path | EmbeddingTable,
    out: str | Path,
    *,
    config: ReportConfig | None = None,
    overwrite: bool = False,
    progress: bool = False,
    allow_unverified: bool = False,
) -> Path:
    """Write the HTML report about ``source`` to ``out``.

    Args:
        source: a checkpoint directory, an exported table, GPT-2 weights, or an ``EmbeddingTable``.
        out: the ``.html`` file to write (atomically).
        config: what to include (default ``ReportConfig()``).
        overwrite: replace an existing file.
        progress: progress bars (corpus counting, then one step per section).
        allow_unverified: report on a checkpoint that has no sha256.json (written before tokembed 0.2).

    Returns:
        ``out``.

    Raises:
        ModuleNotFoundError: matplotlib (extra ``plot``) is not installed.
    """
    import html

    from tqdm.auto import tqdm

    from tokembed._atomic import atomic_create, check_target
    from tokembed._paths import output_path
    from tokembed._plot import new_figure
    from tokembed.inspection.report_sections import SECTIONS

    out = output_path(out, what="the report")
    check_target(out, overwrite)  # fail before the slow part
    new_figure()  # fail before the slow part without matplotlib, naming the extra
    given = _report_input(source, config or ReportConfig(), allow_unverified=allow_unverified)
    title = f"tokembed report: {given.table.source or 'embedding table'}"
    page = (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>"
        f"<h1>{html.escape(title)}</h1>"
        + "".join(
            section(given)
            for section in tqdm(SECTIONS, desc="report", unit="section", disable=not progress, leave=False)
        )
        + "</body></html>\n"
    )
    with atomic_create(out, "wb", overwrite=overwrite) as f:
        f.write(page.encode("utf-8", "backslashreplace"))  # a run folder's name that is not UTF-8: escaped
    return out


def _report_input(
    source: str | Path | EmbeddingTable, config: ReportConfig, *, allow_unverified: bool = False
) -> ReportInput:
    table = source if isinstance(source, EmbeddingTable) else load_table(source, allow_unverified=allow_unverified)
    table = table_with_counts(table, corpus=config.corpus, min_count=config.min_count)
    ckpt = None
    if not isinstance(source, EmbeddingTable) and Path(source).is_dir() and is_tokembed_checkpoint(Path(source)):
        ckpt = Path(source)
    ckpt_config = None
    if ckpt is not None:
        from tokembed.model.checkpoint import read_checkpoint_config

        ckpt_config = read_checkpoint_config(ckpt)
    return ReportInput(table, ckpt, ckpt_config, config)
