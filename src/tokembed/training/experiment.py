"""Train short, test long: the same small GPT trained once per positional scheme, evaluated past its length.

In the spirit of figure 1 of Press et al. 2022: each scheme is trained on windows of ``train_length``
tokens (same data, seed, model and budget), then its validation loss is measured at 1x, 2x, 4x, 8x
and 16x that length, two ways (``tokembed.training.evaluation``): on non-overlapping windows and
with a sliding window (every scored token sees at least half the window as context: no "early
token curse"). Learned absolute positions cannot read past their table (``null``, with the reason).
RoPE is also evaluated with each long-context scaling (no retraining: factor = length / train_length).

The defaults, with ``--tokenizer bytes`` (257 ids: the output layer costs nothing), train seven
models in about 6-10 minutes on a busy 2-core CPU and show the effect (README, docs/positions.md).

Outputs in ``out/``: ``results.json``, ``positions.md`` (a table), ``positions.png`` (the plot),
and one checkpoint per scheme (``out/<scheme>/``); schemes already trained there are reused.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from tokembed._atomic import atomic_write
from tokembed._checks import check_int, check_positive_int
from tokembed._paths import local_path
from tokembed.embeddings.names import ROPE_SCALINGS, positional_scheme, scheme_names
from tokembed.training.plots import plot_positions

__all__ = ["PositionsExperiment", "QUICK", "format_table", "run_positions_experiment"]

EVALUATIONS = ("nonoverlapping", "sliding")  # tokembed.training.evaluation's (that module imports torch)


@dataclass(frozen=True)
class PositionsExperiment:
    """The experiment's setup. The defaults show the effect in minutes on a 2-core CPU with ``tokenizer="bytes"``.

    Attributes:
        data: a shard folder or text file (a text's last 10% of tokens is the validation set).
        out: where checkpoints, table, plot and results.json go.
        schemes: the positional schemes to train (default: every registered one, the built-in seven first).
        positional_options: options of some of the schemes, by scheme (``{"rope": {"fraction": 0.5}}``);
            the others run with their defaults.
        tokenizer: for a text file, its tokenizer (default gpt2; ``bytes``: 257 ids, the fast choice); a shard
            folder's comes from its manifest.
        train_length: training window length (and the models' context length).
        multiples: evaluation lengths, as multiples of ``train_length``.
        steps, batch_size, lr, warmup_steps: training (same for every scheme).
        dim, n_layers, n_heads: the model (same for every scheme).
        seed: the same seed for every scheme (same batches, same initial token table).
        rope_scaling: also evaluate the RoPE model with these long-context scalings.
        eval_tokens: score about this many validation tokens per length and evaluation (None: all).
        sliding_stride: the sliding evaluation's stride (None: half of each length).
        threads: torch's intra-op threads while the experiment runs (0: leave torch's setting).
            One is faster for these tiny models on a busy machine (measured: 50 vs 230 ms a step).
        device: ``auto``, ``cpu``, ``cuda`` or ``mps`` (see ``DeviceConfig``).
    """

    data: str
    out: str
    schemes: tuple[str, ...] = field(default_factory=scheme_names)
    positional_options: dict[str, dict] = field(default_factory=dict)
    tokenizer: str | None = None
    train_length: int = 32
    multiples: tuple[int, ...] = (1, 2, 4, 8, 16)
    steps: int = 1000
    batch_size: int = 32
    lr: float = 3e-3
    warmup_steps: int = 20
    dim: int = 64
    n_layers: int = 2
    n_heads: int = 4
    seed: int = 0
    rope_scaling: tuple[str, ...] = ROPE_SCALINGS
    eval_tokens: int | None = 8192
    sliding_stride: int | None = None
    threads: int = 1
    device: str = "auto"

    def __post_init__(self) -> None:
        for name in ("data", "out", "device"):
            object.__setattr__(self, name, str(getattr(self, name)))
        for name in ("data", "out"):
            local_path(getattr(self, name), what=name)  # a URL is refused by name
        if self.tokenizer is not None:
            object.__setattr__(self, "tokenizer", str(self.tokenizer))
        for name in ("schemes", "multiples", "rope_scaling"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        if not self.schemes:
            raise ValueError(f"schemes is empty; choose some of {', '.join(scheme_names())}")
        for s in self.schemes:
            positional_scheme(s)
        if len(set(self.schemes)) != len(self.schemes):
            raise ValueError(f"schemes has duplicates: {self.schemes}")
        self._check_positional_options()
        for name in ("train_length", "steps", "batch_size", "dim", "n_layers", "n_heads"):
            check_positive_int(name, getattr(self, name))
        for name in ("eval_tokens", "sliding_stride"):
            if getattr(self, name) is not None:
                check_positive_int(name, getattr(self, name))
        check_int("threads", self.threads, min=0)
        if not self.multiples or any(check_int("each of multiples", m) < 1 for m in self.multiples):
            raise ValueError(f"multiples must be integers >= 1, got {self.multiples}")
        for s in self.rope_scaling:
            if s not in ROPE_SCALINGS:
                raise ValueError(f"rope_scaling entries must be among {', '.join(ROPE_SCALINGS)}, got {s!r}")

    def _check_positional_options(self) -> None:
        for name, options in dict(self.positional_options).items():
            if name not in self.schemes:
                raise ValueError(
                    f"positional_options are given for {name!r}, which schemes leaves out ({', '.join(self.schemes)})"
                )
            positional_scheme(name).make_options(options)  # validated now, not after the other schemes trained
        object.__setattr__(self, "positional_options", {k: dict(v) for k, v in dict(self.positional_options).items()})

    @property
    def lengths(self) -> list[int]:
        return [self.train_length * m for m in self.multiples]


# Small enough for tests: one layer, a few steps, lengths 1x and 2x.
QUICK: dict[str, Any] = dict(
    train_length=16,
    multiples=(1, 2),
    steps=6,
    batch_size=4,
    dim=32,
    n_layers=1,
    n_heads=2,
    warmup_steps=2,
    eval_tokens=64,
)


def rope_label(kind: str, scheme: str = "rope") -> str:
    """The results' name for the model of ``scheme`` evaluated with scaling ``kind`` (``rope+yarn``, ``rope+pi``)."""
    return f"{scheme}+{'pi' if kind == 'linear' else kind}"


def run_positions_experiment(config: PositionsExperiment, *, progress: bool = True, echo=print) -> dict:
    """Train every scheme, evaluate each at every length both ways, write results.json, table and plot.

    Returns:
        The JSON document written to ``out/results.json``: ``config``, ``lengths``, ``runs`` (per
        scheme: losses, steps, seconds, parameters) and ``results``: for each scheme (and
        ``rope+<scaling>``), for each evaluation, one row per length with ``loss`` in nats, or
        ``loss: null`` and the ``note`` saying why.
    """
    import torch

    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    saved_threads = torch.get_num_threads()
    if config.threads:
        torch.set_num_threads(config.threads)
    try:
        t0 = time.perf_counter()
        runs, results = {}, {}
        for scheme in config.schemes:
            runs[scheme], scheme_results = _run_scheme(config, scheme, progress=progress)
            results.update(scheme_results)
            echo(_summary_line(scheme, runs[scheme], scheme_results[scheme]))
    finally:
        torch.set_num_threads(saved_threads)
    doc = {
        "config": asdict(config),
        "lengths": config.lengths,
        "wall_seconds": time.perf_counter() - t0,
        "runs": runs,
        "results": results,
    }
    atomic_write(out / "results.json", (json.dumps(doc, indent=1) + "\n").encode("utf-8"))
    atomic_write(out / "positions.md", (format_table(doc) + "\n").encode("utf-8"))
    for evaluation in EVALUATIONS:
        plot_positions(doc, out / f"positions-{evaluation}.png", evaluation=evaluation, dashed=_rope_labels(doc))
    plot_positions(doc, out / "positions.png", evaluation=EVALUATIONS, dashed=_rope_labels(doc))
    return doc


def _rope_labels(doc: dict) -> list[str]:
    return [name for name in doc["results"] if "+" in name]  # the scaled variants: drawn dashed


def _run_scheme(config: PositionsExperiment, scheme: str, *, progress: bool) -> tuple[dict, dict]:
    """Train (or reuse) one scheme's model and evaluate it (and RoPE's scalings) at every length, both ways."""
    from tokembed.model.checkpoint import load_checkpoint
    from tokembed.training.device import DeviceConfig, resolve_device
    from tokembed.training.loop import train

    ckpt_dir = Path(config.out) / scheme
    train_config, model_config = _configs(config, scheme)
    device = DeviceConfig(device=config.device)
    result = train(train_config, model_config, resume=ckpt_dir.exists(), progress=progress, device=device)
    tokens_per_step = config.batch_size * config.train_length
    seconds = sum(tokens_per_step / r["tokens_per_s"] for r in result.log["train"])  # also for a reused checkpoint
    model, ckpt = load_checkpoint(ckpt_dir, map_location=resolve_device(config.device))
    run = {
        "train_loss": result.train_loss,
        "val_loss": result.val_loss,
        "steps": result.step,
        "tokens_seen": result.tokens_seen,
        "seconds": seconds,
        "parameters": model.num_parameters(),
    }
    results = {scheme: _evaluate_both(config, (model, ckpt), None, progress)}
    for kind in config.rope_scaling:
        if kind in positional_scheme(scheme).scalings:  # RoPE's: ask the scheme, not its name
            results[rope_label(kind, scheme)] = _evaluate_both(config, (model, ckpt), kind, progress)
    return run, results


def _configs(config: PositionsExperiment, scheme: str):
    """The training and model configs of one scheme's run (everything but the scheme is shared; the
    vocabulary is the data's tokenizer's)."""
    from tokembed.model.config import GPTConfig
    from tokembed.training.config import TrainConfig
    from tokembed.training.data import data_tokenizer

    tok = data_tokenizer(config.data, tokenizer=config.tokenizer)  # the vocabulary comes from the data
    model_config = GPTConfig(
        vocab_size=tok.n_vocab,
        eot_token=tok.eot_token,
        context_length=config.train_length,
        dim=config.dim,
        n_layers=config.n_layers,
        n_heads=config.n_heads,
        positional=scheme,
        positional_options=config.positional_options.get(scheme),
    )
    train_config = TrainConfig(
        data=config.data,
        out=str(Path(config.out) / scheme),
        tokenizer=config.tokenizer,
        max_length=config.train_length,
        batch_size=config.batch_size,
        max_steps=config.steps,
        lr=config.lr,
        warmup_steps=min(config.warmup_steps, config.steps),
        eval_interval=config.steps,
        checkpoint_interval=config.steps,
        seed=config.seed,
    )
    return train_config, model_config


def _evaluate_both(config: PositionsExperiment, loaded, rope_scaling: str | None, progress: bool) -> dict:
    from tokembed.training.evaluation import evaluate

    return {
        evaluation: evaluate(
            loaded,
            lengths=config.lengths,
            max_tokens=config.eval_tokens,
            rope_scaling=rope_scaling,
            evaluation=evaluation,
            stride=config.sliding_stride if evaluation == "sliding" else None,
            progress=progress,
        )
        for evaluation in EVALUATIONS
    }


def _summary_line(scheme: str, run: dict, results: dict) -> str:
    def cells(rows: list[dict]) -> str:
        return " ".join(f"{r['loss']:.2f}" if r["loss"] is not None else "n/a" for r in rows)

    return (
        f"{scheme:<10} trained {run['steps']} steps in {run['seconds']:.0f}s; loss by length "
        f"non-overlapping {cells(results['nonoverlapping'])} | sliding {cells(results['sliding'])}"
    )


def format_table(doc: dict) -> str:
    """Markdown: one row per scheme and evaluation, the validation loss (nats) at each length."""
    cfg, lengths = doc["config"], doc["lengths"]
    head = "| scheme | evaluation | " + " | ".join(f"L={n} ({n // cfg['train_length']}x)" for n in lengths) + " |"
    lines = [
        f"Validation loss (nats) by evaluation length; trained on windows of {cfg['train_length']} tokens "
        f"({cfg['tokenizer'] or 'gpt2'} tokenizer), {cfg['steps']} steps of {cfg['batch_size']} windows, dim {cfg['dim']}, "
        f"{cfg['n_layers']} layers, {cfg['n_heads']} heads, seed {cfg['seed']}; data: {cfg['data']}.",
        "",
        head,
        "|---|---|" + "---:|" * len(lengths),
    ]
    for name, by_eval in doc["results"].items():
        for evaluation, rows in by_eval.items():
            cells = [f"{r['loss']:.3f}" if r["loss"] is not None else "n/a" for r in rows]
            lines.append(f"| {name} | {evaluation} | " + " | ".join(cells) + " |")
    notes = sorted(
        {
            r["note"]
            for by_eval in doc["results"].values()
            for rows in by_eval.values()
            for r in rows
            if r["loss"] is None
        }
    )
    lines += [""] + [f"n/a: {n}." for n in notes] if notes else []
    lines += [
        "",
        "sliding: windows every L/2 tokens, each scoring its last half (every scored token sees >= L/2 tokens). "
        "rope+pi / +ntk / +yarn / +llama3: the rope model evaluated with that scaling by factor L / train length "
        "(no retraining).",
    ]
    return "\n".join(lines)


def quick(config: PositionsExperiment) -> PositionsExperiment:
    """The same experiment at the tests' size."""
    return replace(config, **QUICK)
