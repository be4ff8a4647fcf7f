"""What a run is, settled before it starts: new or resumed, its training setup, its data and its model.

    train(config, model_config, resume=True | False | "auto")
    -> saved_run():      the checkpoint in ``out`` to continue, or None for a new run ("auto": whichever exists)
    -> settle_config():  a `TrainConfig` given whole, or a mapping of the options the caller chose, the rest
                         from the checkpoint (resuming) or the defaults (a new run); then the global batch
                         fitted to the number of ranks
    -> settle_model():   the checkpoint's model (given options must agree), or the options given with the
                         vocabulary and end-of-text id of the data's tokenizer (`fit_vocabulary`)

Data is known by its content (`tokembed.training.data.data_identity`: a shard folder's manifest hash, a text
file's sha256), recorded in ``state.json``; the path is a hint. A copy at another path resumes (and the
checkpoint then names the new path), other data at the same path is refused naming both, and resuming
without naming the data reads it where the checkpoint says.

The global batch (windows per step over all ranks) is what a resumed run must keep: the per-rank batch
follows from the number of ranks, so a run saved by 2 ranks resumes in 1 process or on 3 ranks.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tokembed.data.phases import schedule_decides, spec_paths
from tokembed.data.schedule import quota_period
from tokembed.model.checkpoint import (
    interrupted_save_hint,
    read_checkpoint_config,
    read_checkpoint_file,
    resume_checkpoint,
    verify_checkpoint,
)
from tokembed.model.config import GPTConfig
from tokembed.tokenizer.base import TokenizerIdentity
from tokembed.training.config import RESUMABLE_CHANGES, TrainConfig
from tokembed.training.data import check_same_tokenizer, data_identity, data_tokenizer, describe_identity

__all__ = ["Saved", "fit_vocabulary", "saved_run", "settle_config", "settle_model"]

BATCH_FIELDS = ("batch_size", "global_batch_size")
RESUME_VALUES = (True, False, "auto")


@dataclasses.dataclass(frozen=True)
class Saved:
    """The checkpoint a run resumes: its ``config.json`` and what ``state.json`` says of the data and batch."""

    config: dict
    identity: dict | None  # the data's `data_identity` (None: written before tokembed recorded it)
    global_batch_size: int

    @property
    def train(self) -> dict:
        return self.config["train"]


def out_of(config: TrainConfig | Mapping[str, Any]) -> Path:
    """The checkpoint folder a config names (a mapping must name one)."""
    if isinstance(config, TrainConfig):
        return Path(config.out)
    if not isinstance(config, Mapping):
        raise TypeError(f"config must be a TrainConfig or a mapping of its options, got {type(config).__name__}")
    if not config.get("out"):
        raise ValueError("the options name no checkpoint folder: give out (--out), where the run is written")
    return Path(config["out"])


def saved_run(out: Path, *, resume: bool | str, allow_unverified: bool = False) -> Saved | None:
    """The checkpoint to resume from, or None for a new run; ``resume="auto"`` resumes when ``out`` exists.

    ``allow_unverified``: resume a checkpoint without sha256.json (written before tokembed 0.2).
    """
    if isinstance(resume, str) and resume != "auto" or resume not in RESUME_VALUES:
        raise ValueError(f"resume must be True, False or 'auto', got {resume!r}")
    if resume:
        resume_checkpoint(
            out, allow_unverified=allow_unverified
        )  # the newest complete checkpoint of the run (a killed or damaged save falls back)
    if resume == "auto":
        resume = out.exists() or bool(interrupted_save_hint(out))  # a lost rename is reported, not run over
    if out.exists():
        if not resume:
            raise FileExistsError(
                f"{out} already exists; pass resume=True (--resume) to continue it, or choose another out directory"
            )
        config = read_checkpoint_config(out)
        state = read_checkpoint_file(out, "state.json", lambda p: json.loads(p.read_text(encoding="utf-8")))
        return Saved(config, state.get("data"), _saved_global_batch(config["train"], state))
    hint = interrupted_save_hint(out)  # a save killed between its two renames left the checkpoint beside
    if resume:
        if hint:
            raise FileNotFoundError(f"checkpoint {out} does not exist{hint}")
        raise FileNotFoundError(f"nothing to resume: {out} does not exist; drop resume (--resume) to start a new run")
    if hint:  # a new run's saves would take that run's checkpoints for their own and prune them
        raise FileExistsError(
            f"cannot start a new run in {out}{hint}; pass resume=True (--resume) to continue it, or choose another "
            "out directory"
        )
    return None


def _saved_global_batch(train: dict, state: dict) -> int:
    """The checkpoint's global batch: recorded since 0.2; before, the loader state's (per-rank x ranks)."""
    if train.get("global_batch_size"):
        return int(train["global_batch_size"])
    loader = (state.get("loader") or {}).get("config") or {}
    if loader.get("global_batch_size"):
        return int(loader["global_batch_size"])
    return int(train["batch_size"]) * int(loader.get("world_size", 1))


def settle_config(
    config: TrainConfig | Mapping[str, Any],
    saved: Saved | None,
    *,
    world_size: int,
    model_options: GPTConfig | Mapping[str, Any] | None = None,
) -> TrainConfig:
    """The run's `TrainConfig`, its batch fitted to ``world_size`` ranks (``batch_size`` per rank and
    ``global_batch_size`` both set).

    Args:
        config: a whole `TrainConfig` (resuming: it must match the checkpoint but for `RESUMABLE_CHANGES`,
            the data's path and the per-rank batch), or a mapping of the options chosen: the rest come from
            the checkpoint when resuming (``data`` too), else from `TrainConfig`'s defaults.
        saved: the checkpoint resumed, or None.
        model_options: a new run's model options: without ``max_length``, windows are as long as its
            ``context_length`` (never longer than the default).
    """
    out = out_of(config)
    if saved is None:
        if isinstance(config, TrainConfig):
            return _fit_batch(config, world_size)
        return _fit_batch(_new_config(dict(config), model_options), world_size)
    given = config.to_dict() if isinstance(config, TrainConfig) else dict(config)
    data = resumed_data(saved, given.get("data"), out, tokenizer=given.get("tokenizer") or saved.train.get("tokenizer"))
    if isinstance(config, TrainConfig):
        settled = dataclasses.replace(config, data=data)
    else:
        kept = {k: v for k, v in saved.train.items() if k not in ("data", "out", *BATCH_FIELDS)}
        chosen = {k: v for k, v in given.items() if k not in ("data", "out")}
        settled = TrainConfig.from_dict({**kept, **chosen, "data": data, "out": str(out)})
    _check_resumable(saved.train, settled)
    if settled.batch_size is None and settled.global_batch_size is None:
        settled = dataclasses.replace(settled, global_batch_size=saved.global_batch_size)  # the checkpoint's
    settled = _fit_batch(settled, world_size)
    if settled.global_batch_size != saved.global_batch_size:
        verify_checkpoint(out)  # a damaged state.json is the better explanation
        raise ValueError(_other_global_batch(saved.global_batch_size, given.get("batch_size"), settled, world_size))
    return settled


def _new_config(options: dict[str, Any], model_options: GPTConfig | Mapping[str, Any] | None) -> TrainConfig:
    if not options.get("data"):
        raise ValueError("no training data: give data (DATA, --source or --mixture) to start a run")
    context = (
        model_options.context_length
        if isinstance(model_options, GPTConfig)
        else (model_options or {}).get("context_length")
    )
    if options.get("max_length") is None and context is not None:
        # Windows as long as the model's context unless asked otherwise (never longer).
        options["max_length"] = min(int(context), TrainConfig.max_length)  # the class holds the default
    return TrainConfig.from_dict(options)


def _fit_batch(config: TrainConfig, world_size: int) -> TrainConfig:
    per_rank = config.rank_batch(world_size)
    return dataclasses.replace(config, batch_size=per_rank, global_batch_size=per_rank * world_size)


def _other_global_batch(want: int, per_rank: int | None, settled: TrainConfig, world: int) -> str:
    """The error for a resumed run whose batch settings make another global batch than the checkpoint's."""
    ranks = f"{world} rank{'s' if world != 1 else ''}"
    how = (
        f"batch_size {per_rank} x {ranks}" if per_rank is not None else f"global_batch_size {settled.global_batch_size}"
    )
    fix = f"give global_batch_size={want} (--global-batch-size {want})"
    if want % world == 0:
        fix += f", or batch_size={want // world} (--batch-size {want // world}) at {ranks}"
    return (
        f"cannot resume with another global batch: the checkpoint's run read a global batch of {want} windows per "
        f"step, this one would read {settled.global_batch_size} windows ({how}); the global batch is what must "
        f"match (any number of ranks reads it): {fix}, or leave both out"
    )


def _check_resumable(saved: dict, given: TrainConfig) -> None:
    """Refuse a resumed setup that differs in what has been computed so far (the data and batch are checked
    by `resumed_data` and the global batch)."""
    # The data was compared by `resumed_data` (the saved one may have moved: it is not read again here).
    old, new = TrainConfig.from_dict({**saved, "data": given.data}).to_dict(), given.to_dict()
    skip = (*RESUMABLE_CHANGES, "data", *BATCH_FIELDS)
    diff = [f"{k}: {old[k]!r} -> {new[k]!r}" for k in old if k not in skip and old[k] != new[k]]
    if diff:
        raise ValueError(
            f"cannot resume with a different training setup ({'; '.join(diff)}); resume with the checkpoint's values or train into a new --out"
        )


# ----------------------------------------------------------------------------------------- the data


def resumed_data(saved: Saved, given: Any, out: Path, *, tokenizer: Any = None) -> str | dict:
    """The data a resumed run reads: ``given`` (or the checkpoint's own when None) when it is the same data.

    A phased mixture (`tokembed.PhasedMixture`) given anew may change the phases that had not started at the
    saved step: whether it does is decided where the step is known, when the loader loads its state
    (`tokembed.data.schedule.check_resume`: started phases unchanged, the sources they read the same data by
    content, wherever they lie now). Here: the same seed, and the tokenizer.

    Raises:
        FileNotFoundError: the checkpoint's data is gone and no other location was given.
        ValueError: ``given`` (or what now lies at the checkpoint's path) is other data; names both.
    """
    recorded = saved.train["data"]
    if given is None:
        _require_present(recorded, out)
    data = TrainConfig(data=recorded if given is None else given, out=str(out)).data  # absolute paths, or a spec
    check_same_tokenizer(saved.config, data_tokenizer(data, tokenizer=tokenizer), out)
    if saved.identity is None:  # a checkpoint from before identities: the path is all there is
        if data != TrainConfig(data=recorded, out="").data and not schedule_decides(recorded, data):
            raise ValueError(f"--resume: the checkpoint was trained on {recorded}, not {data}")
        return data
    _check_same_mixing(recorded, data)
    if given is not None and schedule_decides(recorded, data):
        return data  # the loader compares the phases and sources read so far, at the saved step
    identity = data_identity(data)
    if identity != saved.identity:
        verify_checkpoint(out)  # a damaged state.json is the better explanation
        now, then = describe_identity(identity), describe_identity(saved.identity)
        if data == recorded:
            raise ValueError(
                f"{_name(data)} holds other data than the checkpoint {out} was trained on ({now}, the checkpoint's "
                f"{then}); put the data it was trained on back, or train into a new --out"
            )
        raise ValueError(
            f"--resume: the checkpoint was trained on {_name(recorded)} ({then}), not {_name(data)} ({now}); resume "
            "on the same data (a copy at another path is recognised by its content), or train into a new --out"
        )
    return data


def _require_present(recorded: str | dict, out: Path) -> None:
    paths = spec_paths(recorded) if isinstance(recorded, dict) else [recorded]
    from tokembed.shards import megatron

    missing = [p for p in paths if not Path(p).exists() and not megatron.is_megatron_prefix(p)]
    if missing:
        if not isinstance(recorded, dict):
            what = "DATA"
        elif "phases" in recorded:
            what = "--mixture FILE, a schedule naming each source where it is now"
        else:
            what = "--source PATH:WEIGHT for each source"
        raise FileNotFoundError(
            f"the checkpoint's data {', '.join(missing)} does not exist (moved or deleted?); give its new location "
            f"as data ({what}): a copy is recognised by its content, not its path"
        )


def _check_same_mixing(recorded: str | dict, data: str | dict) -> None:
    """A mixture resumes with the same weights and seed (its sources may have moved); a phased mixture (or a
    mixture resumed as the first phase of one) with the same seed: its phases are the loader's to compare."""
    if schedule_decides(recorded, data):
        return

    def shares(pairs: list) -> tuple[list[int], int]:  # weights are relative: 7, 3 is 0.7, 0.3 (the same schedule)
        return quota_period([float(w) for _, w in pairs])

    def mixing(d: str | dict) -> object:
        if not isinstance(d, dict):
            return None
        if "phases" in d:
            return [(ph["start"], shares(ph["sources"])) for ph in d["phases"]], d["seed"]
        return shares(d["sources"]), d["seed"]

    if isinstance(recorded, dict) != isinstance(data, dict) or mixing(recorded) != mixing(data):
        raise ValueError(f"--resume: the checkpoint was trained on {_name(recorded)}, not {_name(data)}")


def _name(data: str | dict) -> str:
    if isinstance(data, dict):
        if "phases" in data:  # named without reading its sources (they may be gone)
            return f"a phased mixture of {len(data['phases'])} phases over {', '.join(spec_paths(data))} (seed {data['seed']})"
        from tokembed.data.mixture import Mixture

        return repr(Mixture.from_spec(data))
    return str(data)


# ----------------------------------------------------------------------------------------- the model


def settle_model(
    given: GPTConfig | Mapping[str, Any] | None, saved: Saved | None, config: TrainConfig, tok: TokenizerIdentity
) -> GPTConfig:
    """The run's model: the checkpoint's (any options given must agree with it), else the options given
    (a `GPTConfig`, or a mapping of its fields) with the data's vocabulary (`fit_vocabulary`); the model
    reads windows of ``config.max_length`` tokens. With ``config.packing`` a new model keeps documents apart
    (``document_mask``) where the tokenizer ends them with a separator: packing trains it so, and validation,
    ``tokembed eval`` and ``generate`` then read the checkpoint the way it was trained."""
    if saved is not None:
        model = GPTConfig.from_dict(saved.config["model"])
        chosen = given.to_dict() if isinstance(given, GPTConfig) else dict(given or {})
        if config.packing and model.document_mask and chosen.get("document_mask") is False:
            chosen["document_mask"] = True  # the options the packed run started from: packing set it (below)
        unknown = sorted(set(chosen) - set(model.to_dict()))
        if unknown:
            raise ValueError(f"unknown GPTConfig fields {unknown}; known fields: {sorted(model.to_dict())}")
        diff = _differences(model.to_dict(), chosen, partial=not isinstance(given, GPTConfig))
        if diff:
            raise ValueError(
                f"the checkpoint in {config.out} has another model ({'; '.join(diff)}); omit the model options when resuming"
            )
    elif isinstance(given, GPTConfig):
        model = fit_vocabulary(given, tok)
    else:
        options = dict(given or {})
        shape = {"context_length": config.max_length, "vocab_size": tok.n_vocab, "eot_token": tok.eot_token}
        model = fit_vocabulary(GPTConfig.from_dict({**shape, **options}), tok)
    if saved is None and config.packing and not model.document_mask and tok.eot_token is not None:
        model = dataclasses.replace(model, document_mask=True)  # the loader's documents are the separators' ones
    if model.context_length < config.max_length:
        raise ValueError(
            f"max_length={config.max_length} exceeds the model's context_length={model.context_length}; "
            "lower max_length or raise context_length"
        )
    return model


def _differences(saved: dict[str, Any], chosen: Mapping[str, Any], *, partial: bool, prefix: str = "") -> list[str]:
    """``key: saved -> chosen`` for each chosen value the saved config does not have. Options chosen one by one
    (``partial``) compare the scheme's options (a dict) option by option: naming one is no difference from the
    rest; a whole `GPTConfig` is compared whole."""
    diff = []
    for k, v in chosen.items():
        if partial and isinstance(v, Mapping) and isinstance(saved.get(k), dict):
            diff += _differences(saved[k], v, partial=True, prefix=f"{prefix}{k}.")
        elif k not in saved or saved[k] != v:
            diff.append(f"{prefix}{k}: {saved.get(k)!r} -> {v!r}")
    return diff


def fit_vocabulary(model_config: GPTConfig, tok: TokenizerIdentity) -> GPTConfig:
    """``model_config`` for data made by ``tok``: its vocabulary must be the data's (a table with other rows
    is a model of another tokenizer); its end-of-text id becomes the data's, and with ``document_mask``,
    where documents end, must be it."""
    if model_config.vocab_size != tok.n_vocab:
        raise ValueError(
            f"the model's vocabulary has {model_config.vocab_size:,} ids, but the data was made with {tok.describe()}; "
            f"use vocab_size={tok.n_vocab}, or leave the vocabulary out (model options without vocab_size): "
            "train() takes it from the data, as the CLI does"
        )
    if tok.eot_token is not None and model_config.eot_token != tok.eot_token:
        if model_config.document_mask:
            raise ValueError(
                f"the model ends documents at id {model_config.eot_token}, but the data was made with {tok.describe()}; "
                f"use eot_token={tok.eot_token}"
            )
        model_config = dataclasses.replace(model_config, eot_token=tok.eot_token)
    return model_config
