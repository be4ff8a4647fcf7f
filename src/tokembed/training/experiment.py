"""Train short, test long: the same small GPT trained once per positional scheme, evaluated past its length.

In the spirit of figure 1 of Press et al. 2022: each scheme is trained on windows of
``train_length`` tokens, then its validation perplexity is measured on windows of 1x, 2x, 4x and 8x
that length. Learned absolute positions cannot read past their table (reported as such). RoPE is
also evaluated with position interpolation and NTK-aware scaling (no retraining: factor =
length / train_length), the two usual ways to stretch it.

Outputs in ``out/``: ``positions.json``, ``positions.md`` (a table), ``positions.png`` (the plot),
and one checkpoint per scheme (``out/<scheme>/``); schemes already trained there are reused.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from tokembed._atomic import atomic_write
from tokembed._checks import check_int, check_positive_int
from tokembed.embeddings.names import POSITIONAL_NAMES, positional_scheme
from tokembed.training.plots import plot_positions

__all__ = ["PositionsExperiment", "QUICK", "format_table", "run_positions_experiment"]


@dataclass(frozen=True)
class PositionsExperiment:
    """The experiment's setup. The defaults finish in minutes on a 2-core CPU with the story.

    Attributes:
        data: a shard folder or text file (a text's last 10% of tokens is the validation set).
        out: where checkpoints, table and plot go.
        tokenizer: for a text file, its tokenizer (default gpt2); a shard folder's comes from its manifest.
        schemes: the positional schemes to train (default: all seven).
        train_length: training window length (and the models' context length).
        multiples: evaluation lengths, as multiples of ``train_length``.
        steps, batch_size, lr, warmup_steps: training (same for every scheme).
        dim, n_layers, n_heads: the model (same for every scheme).
        seed: the same seed for every scheme (same batches, same initial token table).
        rope_scaling: also evaluate the RoPE model with these long-context scalings.
        eval_tokens: score at most about this many validation tokens per length (windows =
            eval_tokens // length, at least 1); None scores the whole validation split.
    """

    data: str
    out: str
    tokenizer: str | None = None
    schemes: tuple[str, ...] = POSITIONAL_NAMES
    train_length: int = 32
    multiples: tuple[int, ...] = (1, 2, 4, 8)
    steps: int = 120
    batch_size: int = 8
    lr: float = 3e-3
    warmup_steps: int = 10
    dim: int = 64
    n_layers: int = 2
    n_heads: int = 4
    seed: int = 0
    rope_scaling: tuple[str, ...] = ("linear", "ntk")
    eval_tokens: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "data", str(self.data))
        object.__setattr__(self, "out", str(self.out))
        object.__setattr__(self, "schemes", tuple(self.schemes))
        object.__setattr__(self, "multiples", tuple(self.multiples))
        object.__setattr__(self, "rope_scaling", tuple(self.rope_scaling))
        if not self.schemes:
            raise ValueError(f"schemes is empty; choose some of {', '.join(POSITIONAL_NAMES)}")
        for s in self.schemes:
            positional_scheme(s)
        if len(set(self.schemes)) != len(self.schemes):
            raise ValueError(f"schemes has duplicates: {self.schemes}")
        for name in ("train_length", "steps", "batch_size", "dim", "n_layers", "n_heads"):
            check_positive_int(name, getattr(self, name))
        if not self.multiples or any(check_int("each of multiples", m) < 1 for m in self.multiples):
            raise ValueError(f"multiples must be integers >= 1, got {self.multiples}")
        for s in self.rope_scaling:
            if s not in ("linear", "ntk"):
                raise ValueError(f"rope_scaling entries must be 'linear' or 'ntk', got {s!r}")

    @property
    def lengths(self) -> list[int]:
        return [self.train_length * m for m in self.multiples]


# Small enough for tests: one layer, a few steps, lengths 1x and 2x.
QUICK = dict(
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

ROPE_LABELS = {"linear": "rope+pi", "ntk": "rope+ntk"}


def _atomic_write(path: Path, text: str) -> None:
    atomic_write(path, text.encode("utf-8"))


def _run_configs(config: PositionsExperiment, scheme: str, tok):
    """The model and training configs of one scheme's run (the vocabulary is the data's tokenizer's)."""
    from tokembed.model.config import GPTConfig
    from tokembed.training.config import TrainConfig

    model_config = GPTConfig(
        vocab_size=tok.n_vocab,
        eot_token=tok.eot_token,
        context_length=config.train_length,
        dim=config.dim,
        n_layers=config.n_layers,
        n_heads=config.n_heads,
        positional=scheme,
    )
    train_config = TrainConfig(
        data=config.data,
        tokenizer=config.tokenizer,
        out=str(Path(config.out) / scheme),
        max_length=config.train_length,
        batch_size=config.batch_size,
        max_steps=config.steps,
        lr=config.lr,
        warmup_steps=min(config.warmup_steps, config.steps),
        eval_interval=config.steps,
        checkpoint_interval=config.steps,
        seed=config.seed,
    )
    return model_config, train_config


def run_positions_experiment(config: PositionsExperiment, *, progress: bool = True, echo=print) -> dict:
    """Train every scheme, evaluate each at every length, write table, JSON and plot.

    Returns:
        The JSON document written to ``out/positions.json``.
    """
    from tokembed.model.checkpoint import load_checkpoint
    from tokembed.training.data import data_tokenizer
    from tokembed.training.evaluation import evaluate
    from tokembed.training.loop import train

    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, list[dict]] = {}
    runs: dict[str, dict] = {}
    tok = data_tokenizer(config.data, tokenizer=config.tokenizer)  # the vocabulary comes from the data
    for scheme in config.schemes:
        model_config, train_config = _run_configs(config, scheme, tok)
        result = train(train_config, model_config, resume=(out / scheme).exists(), progress=progress)
        tokens_per_step = config.batch_size * config.train_length
        seconds = sum(
            tokens_per_step / r["tokens_per_s"] for r in result.log["train"]
        )  # training time, also for a reused checkpoint
        model, ckpt = load_checkpoint(out / scheme)
        runs[scheme] = {
            "train_loss": result.train_loss,
            "val_loss": result.val_loss,
            "steps": result.step,
            "tokens_seen": result.tokens_seen,
            "seconds": seconds,
            "parameters": model.num_parameters(),
        }
        results[scheme] = evaluate((model, ckpt), lengths=config.lengths, max_tokens=config.eval_tokens)
        if positional_scheme(scheme).acts == "rotate":  # evaluated also with each RoPE scaling
            for kind in config.rope_scaling:
                results[ROPE_LABELS[kind]] = evaluate(
                    (model, ckpt), lengths=config.lengths, max_tokens=config.eval_tokens, rope_scaling=kind
                )
        row = ", ".join(
            f"{r['length']}: {r['loss']:.3f}" if r["loss"] is not None else f"{r['length']}: n/a"
            for r in results[scheme]
        )
        echo(f"{scheme:<10} trained {result.step} steps in {seconds:.0f}s; validation loss by length {row}")
    doc = {"config": asdict(config), "lengths": config.lengths, "runs": runs, "results": results}
    _atomic_write(out / "positions.json", json.dumps(doc, indent=1) + "\n")
    _atomic_write(out / "positions.md", format_table(doc) + "\n")
    plot_positions(doc, out / "positions.png", dashed=ROPE_LABELS.values())
    return doc


def format_table(doc: dict) -> str:
    """Markdown: one row per scheme, validation perplexity (loss) per evaluation length."""
    cfg, lengths = doc["config"], doc["lengths"]
    head = "| scheme | " + " | ".join(f"L={n} ({n // cfg['train_length']}x)" for n in lengths) + " |"
    lines = [
        f"Validation perplexity (loss in nats) by evaluation length; trained on windows of {cfg['train_length']} tokens, "
        f"{cfg['steps']} steps of {cfg['batch_size']} windows, dim {cfg['dim']}, {cfg['n_layers']} layers, {cfg['n_heads']} heads, seed {cfg['seed']}; data: {cfg['data']}.",
        "",
        head,
        "|---|" + "---:|" * len(lengths),
    ]
    for name, rows in doc["results"].items():
        cells = [f"{r['perplexity']:.1f} ({r['loss']:.3f})" if r["loss"] is not None else "n/a" for r in rows]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    notes = sorted(
        {r["note"] for rows in doc["results"].values() for r in rows if r.get("loss") is None and r.get("note")}
    )
    if notes:
        lines += [""] + [f"n/a: {n}." for n in notes]
    if any(k in doc["results"] for k in ROPE_LABELS.values()):
        lines += [
            "",
            "rope+pi / rope+ntk: the rope model evaluated with position interpolation / NTK-aware scaling by factor length / train length (no retraining).",
        ]
    return "\n".join(lines)


def quick(config: PositionsExperiment) -> PositionsExperiment:
    """The same experiment at the tests' size."""
    return replace(config, **QUICK)
