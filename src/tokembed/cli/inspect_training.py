"""`tokembed inspect SOURCE positions | undertrained | isotropy`: what training did (and did not do) to a table.

Registered by ``tokembed.cli.inspect`` (one command group); the library does the work:
``tokembed.inspection.positions``, ``.undertrained`` and ``tokembed.embeddings.isotropy``.
"""

from __future__ import annotations

import json
from pathlib import Path

OFFSETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


def cmd_positions(args, table) -> int:
    """Absolute schemes: cosine between positions; the others: what their modules do against distance."""
    if table.positions is not None:
        return _absolute_positions(args, table)
    from tokembed.inspection.positions import checkpoint_position_pictures, describe_scheme, has_position_modules

    about = describe_scheme(table.positional)
    pictures = checkpoint_position_pictures(args.source) if has_position_modules(table.positional) else []
    if args.json:
        print(
            json.dumps(
                {"positional": table.positional, "about": about, "pictures": [_as_dict(p) for p in pictures]}, indent=1
            )
        )
        return 0
    print(about)
    for p in pictures:
        print(f"{p.title} ({p.ylabel} against {p.xlabel}):")
        for curve in p.curves:
            print(f"  {curve.label:<22} " + "  ".join(f"{x:g}: {y:+.4g}" for x, y in _some_points(curve, args.top)))
    return 0


def _as_dict(picture) -> dict:
    return {
        "title": picture.title,
        "xlabel": picture.xlabel,
        "ylabel": picture.ylabel,
        "curves": [{"label": c.label, "x": list(c.x), "y": list(c.y)} for c in picture.curves],
    }


def _some_points(curve, show: int) -> list[tuple[float, float]]:
    # Distances 0, 1, 2, 4, 8, ... (and the last): enough to see the shape on one line.
    keep = {0, len(curve.x) - 1} | {k for k in OFFSETS if k < len(curve.x)}
    if len(curve.x) <= show:
        keep = set(range(len(curve.x)))
    return [(curve.x[i], curve.y[i]) for i in sorted(keep)]


def _absolute_positions(args, table) -> int:
    sim = table.position_similarity()  # (P,P)
    dist = table.position_step_distance()  # (P,)
    P = sim.shape[0]
    mean_sim = {k: float(sim.diagonal(k).mean()) for k in OFFSETS if k < P}
    if args.json:
        report = {"positional": table.positional, "positions": P, "mean_cosine_by_offset": mean_sim}
        print(json.dumps({**report, "step_distance": dist.tolist()}, indent=1))
        return 0
    print(f"{table.positional} positions: {P} x {table.dim}")
    print("mean cosine similarity between positions k apart:")
    for k, v in mean_sim.items():
        print(f"  k={k:<4d} {v:+.4f}")
    show = list(range(min(P, args.top)))
    print("distance of each position's vector to its neighbours (mean of p-1, p+1):")
    for p in show:
        print(f"  {p:5d}  {float(dist[p]):.4f}")
    if len(show) < P:
        print(f"  ... ({P - len(show)} more; --top N or --json for all)")
    return 0


def cmd_undertrained(args, table) -> int:
    """The tokens read fewer than --min-count times, with Magikarp's indicators and how well they find them."""
    from tokembed.inspection.undertrained import undertrained_tokens

    found = undertrained_tokens(table, limit=None if args.json else args.top)
    if args.json:
        detections = {k: vars(v) for k, v in found.detection.items()}
        out = {"min_count": table.min_count, "counts": table.counts_source, "reference_ids": found.reference}
        tokens = [vars(r) for r in found.tokens]
        print(json.dumps({**out, "detection": detections, "tokens": tokens}, ensure_ascii=False, indent=1))
        return 0
    never = int((table.counts == 0).sum())
    print(
        f"{found.total:,} of {table.vocab_size:,} tokens were read fewer than {table.min_count} times "
        f"({never:,} never; counts: {table.counts_source or 'given'})"
    )
    _print_detection(found.detection, found.reference)
    print(f"{'id':>6}  {'read':>6}  {'norm':>8}  {'cosine':>8}  token   (lower norm / cosine: more like unused rows)")
    for r in found.tokens:
        cos = f"{r.cosine:8.4f}" if r.cosine is not None else f"{'-':>8}"
        print(f"{r.id:6d}  {r.count:6,}  {r.norm:8.4f}  {cos}  {r.token!r}")
    if found.total > len(found.tokens):
        print(f"  ... ({found.total - len(found.tokens):,} more; --top N or --json for all)")
    return 0


def _print_detection(found: dict, reference: list[int]) -> None:
    if not found:
        print("Magikarp's indicators are not scored: the tokenizer has no byte tokens that never occur in UTF-8")
        return
    print(
        f"how Magikarp's indicators find the {next(iter(found.values())).unseen:,} tokens never read "
        f"(flagged: at most the largest value among the {len(reference)} never-in-UTF-8 byte tokens):"
    )
    for d in found.values():
        print(
            f"  {d.indicator:<7} flags {d.flagged:>7,}: precision {d.precision:.3f}, recall {d.recall:.3f} "
            f"(random: precision {d.base_rate:.3f}); average precision of the ranking {d.average_precision:.3f}"
        )


def cmd_isotropy(args, table) -> int:
    """Mean cosine, top-component share and IsoScore now, for all rows and trained rows, and over the run."""
    from tokembed.embeddings.isotropy import isotropy_of_table

    now = isotropy_of_table(table.tokens, table.counts, min_count=table.min_count)
    history = _history(args.source)
    if args.json:
        current = {k: None if v is None else v.to_dict() for k, v in now.items()}
        print(json.dumps({"min_count": table.min_count, "now": current, "history": history}, indent=1))
        return 0
    print(f"{'rows':<34} {'n':>7}  {'mean cos':>8}  {'PC1':>6}  {'PC1-10':>6}  {'IsoScore':>8}")
    labels = {"all": "all rows", "trained": f"trained rows (read >= {table.min_count} times)"}
    for key, iso in now.items():
        if iso is None:
            print(
                f"{labels[key]:<34} (no counts: pass --corpus)"
                if table.counts is None
                else f"{labels[key]:<34} (fewer than 2)"
            )
            continue
        print(
            f"{labels[key]:<34} {iso.rows:7,}  {iso.mean_cosine:+8.4f}  {iso.top_pc_share:6.3f}  {iso.top10_pc_share:6.3f}  {iso.isoscore:8.4f}"
        )
    if history:
        print("over the run's checkpoints (log.json; trained rows: read >= 10 times by then):")
        for r in history:
            line = "  ".join(
                f"{k} {r[k]['mean_cosine']:+.4f} / {r[k]['top_pc_share']:.3f} / {r[k]['isoscore']:.4f}"
                for k in ("all", "trained")
                if r.get(k)
            )
            print(f"  step {r['step']:>7,}  {line}   (mean cos / PC1 / IsoScore)")
    return 0


def _history(source: str) -> list[dict]:
    log = Path(source) / "log.json"
    if not log.is_file():
        return []
    try:
        return json.loads(log.read_text(encoding="utf-8")).get("isotropy") or []
    except ValueError as e:
        raise ValueError(f"{log} is not valid JSON ({e}); the checkpoint is damaged") from None
