"""Where and how a run computes: the device, the precision, torch.compile, and data-parallel ranks.

    DeviceConfig(device="auto", precision="fp32", compile=False)
    -> resolve_device(): cuda (then mps, then cpu) for "auto"
    -> autocast(): bf16 autocast when asked (CUDA where the GPU supports it, and CPU), else nothing
    -> to_device(batch): non-blocking copies from the loader's pinned memory

Nothing here changes what is stored: checkpoints hold CPU tensors whatever the device (see
``tokembed.model.checkpoint``), so a run trained on a GPU resumes or is inspected on a CPU.

Data parallel (``torchrun --nproc_per_node N -m tokembed train ...``): torchrun sets ``RANK``,
``WORLD_SIZE`` and ``LOCAL_RANK``; `init_distributed` joins the process group (NCCL on CUDA, gloo
otherwise) and each rank reads its own part of every global batch from the loader.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import asdict, dataclass

import torch

__all__ = ["DEVICES", "PRECISIONS", "DeviceConfig", "Distributed", "init_distributed", "resolve_device"]

DEVICES = ("auto", "cpu", "cuda", "mps")
PRECISIONS = ("fp32", "bf16")


@dataclass(frozen=True)
class DeviceConfig:
    """How a run computes (not what it computes: none of this is part of a checkpoint's training setup).

    Attributes:
        device: ``auto`` (CUDA, then MPS, then CPU), ``cpu``, ``cuda``, ``cuda:N`` or ``mps``.
        precision: ``fp32``, or ``bf16`` autocast (matrix products in bfloat16, weights, optimizer
            state and the loss's reductions in float32; no loss scaling is needed for bf16).
        compile: run the model's training step through ``torch.compile``.
    """

    device: str = "auto"
    precision: str = "fp32"
    compile: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.device, str) or self.device.split(":")[0] not in DEVICES:
            raise ValueError(f"device must be one of {', '.join(DEVICES)} (or cuda:N), got {self.device!r}")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {self.precision!r}")
        if not isinstance(self.compile, bool):
            raise TypeError(f"compile must be True or False, got {self.compile!r}")

    def to_dict(self) -> dict:
        return asdict(self)


def resolve_device(name: str = "auto", *, local_rank: int = 0) -> torch.device:
    """The torch device for ``name``; ``auto`` picks CUDA, then MPS, then CPU. Errors say what is missing."""
    kind = name.split(":")[0]
    if kind == "auto":
        kind = "cuda" if torch.cuda.is_available() else "mps" if _mps_available() else "cpu"
        name = kind
    if kind == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(
                f"device {name!r}: torch {torch.__version__} sees no CUDA GPU here; use --device cpu (or auto)"
            )
        return torch.device(name if ":" in name else f"cuda:{local_rank}")
    if kind == "mps" and not _mps_available():
        raise ValueError("device 'mps': this torch has no Apple-silicon (MPS) backend here; use --device cpu (or auto)")
    return torch.device(kind)


def _mps_available() -> bool:
    mps = getattr(torch.backends, "mps", None)
    return bool(mps is not None and mps.is_available())


def autocast(device: torch.device, precision: str) -> contextlib.AbstractContextManager:
    """The autocast context for ``precision`` on ``device`` (a no-op for fp32)."""
    if precision == "fp32":
        return contextlib.nullcontext()
    if device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise ValueError(
            f"precision 'bf16': the GPU {torch.cuda.get_device_name(device)} has no bfloat16 support; use --precision fp32"
        )
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16)


def to_device(batch: tuple[torch.Tensor, ...], device: torch.device) -> tuple[torch.Tensor, ...]:
    """Copy a batch to ``device``; from pinned memory the copy is asynchronous (``non_blocking``)."""
    if device.type == "cpu":
        return batch
    return tuple(t.to(device, non_blocking=True) for t in batch)


@dataclass(frozen=True)
class Distributed:
    """This process's place in a data-parallel run (rank 0 of 1 when not distributed).

    Attributes:
        rank, world_size, local_rank: from torchrun's environment.
        owns_group: this run started the process group (and ends it).
    """

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    owns_group: bool = False

    @property
    def active(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        """Rank 0: the one process that writes checkpoints and logs."""
        return self.rank == 0

    def mean(self, value: torch.Tensor) -> torch.Tensor:
        """The mean of ``value`` over the ranks (the value itself when not distributed)."""
        if not self.active:
            return value
        value = value.detach().clone()
        torch.distributed.all_reduce(value, op=torch.distributed.ReduceOp.SUM)
        return value / self.world_size

    def barrier(self) -> None:
        if self.active:
            torch.distributed.barrier()

    def close(self) -> None:
        if self.owns_group and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()


def init_distributed(device_name: str) -> Distributed:
    """Join the process group torchrun describes (``WORLD_SIZE`` > 1), or report a single process.

    NCCL when the run trains on CUDA, gloo otherwise (CPU ranks, and the tests).
    """
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return Distributed(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", 0)))
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size <= 1:
        return Distributed()
    if not dist.is_available():
        raise RuntimeError("WORLD_SIZE > 1 but this torch has no torch.distributed; run a single process")
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    on_cuda = resolve_device(device_name, local_rank=local_rank).type == "cuda"
    if on_cuda:
        torch.cuda.set_device(local_rank)
    dist.init_process_group(backend="nccl" if on_cuda else "gloo")
    return Distributed(dist.get_rank(), dist.get_world_size(), local_rank, owns_group=True)
