"""What asking every rank "was any of us signalled?" costs each training step, against the step itself.

    .venv/bin/python benchmarks/bench_stop_flag.py [--ranks 2] [--iters 3000]

Under torchrun, training learns whether any rank got SIGTERM or Ctrl-C from the all-reduce that averages
each step's loss (`tokembed.training.loop._Run._share`): it reduces 2 numbers (the loss and the ranks'
summed stop flags) where it reduced 1. This runs that all-reduce both ways on ``--ranks`` gloo processes
(the CPU backend), interleaved in alternating order, 7 repeats of ``--iters`` each (min and median), and
times a training step of the tests' tiny model on the same ranks for scale. The baseline is the 1-number
all-reduce, measured in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "stop_flag.json"
STORY = HERE.parents[1] / "shared" / "corpora" / "the-verdict.txt"


def worker(iters: int, out: Path) -> None:
    """One rank: time the two all-reduces, then train a few steps of a tiny model."""
    import torch
    import torch.distributed as dist

    import tokembed
    from tokembed.training.device import DeviceConfig

    dist.init_process_group("gloo")
    times: dict[int, list[float]] = {1: [], 2: []}
    for repeat in range(7):
        for n in (1, 2) if repeat % 2 else (2, 1):  # interleaved, in turn first: both see the same machine
            x = torch.zeros(n)
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(iters):
                dist.all_reduce(x)
            times[n].append((time.perf_counter() - t0) / iters)
    config = tokembed.TrainConfig(
        data=str(STORY), out=str(out / "run"), max_length=64, global_batch_size=16, max_steps=40,
        eval_interval=1000, checkpoint_interval=1000,
    )  # fmt: skip
    result = tokembed.train(config, {"dim": 64}, progress=False, device=DeviceConfig(device="cpu"))
    steps = result.log["train"][10:]  # after warming up
    step_s = sorted(64 * 16 / r["tokens_per_s"] for r in steps)[len(steps) // 2]  # the median step
    if dist.get_rank() == 0:
        (out / "times.json").write_text(json.dumps({"allreduce": times, "step": step_s}))
    dist.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--iters", type=int, default=3000)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args.iters, Path(args.worker))
    torchrun = Path(sys.executable).with_name("torchrun")
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [str(torchrun), "--standalone", "--nproc_per_node", str(args.ranks), __file__]
        subprocess.run([*cmd, "--iters", str(args.iters), "--worker", tmp], env=env, check=True)
        t = json.loads((Path(tmp) / "times.json").read_text())
    one, two = (sorted(t["allreduce"][k]) for k in ("1", "2"))
    extra = two[len(two) // 2] - one[len(one) // 2]  # medians
    doc = {
        "ranks": args.ranks,
        "load": os.getloadavg()[0],
        "allreduce_1_us": {"min": one[0] * 1e6, "median": one[len(one) // 2] * 1e6},
        "allreduce_2_us": {"min": two[0] * 1e6, "median": two[len(two) // 2] * 1e6},
        "tiny_step_ms": t["step"] * 1e3,
        "extra_share_of_step": extra / t["step"],
    }
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(doc, indent=1) + "\n")
    a, b = doc["allreduce_1_us"], doc["allreduce_2_us"]
    print(
        f"all-reduce on {args.ranks} gloo ranks (min / median): 1 number {a['min']:.1f} / {a['median']:.1f} us, "
        f"2 numbers {b['min']:.1f} / {b['median']:.1f} us; the tiny model's step {doc['tiny_step_ms']:.1f} ms: "
        f"the stop flag adds {100 * doc['extra_share_of_step']:+.3f}% of a step (load {doc['load']:.1f})"
    )


if __name__ == "__main__":
    main()
