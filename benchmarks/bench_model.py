"""Training tokens/s of tokembed.GPT against a GPT written the book's way, measured in one run.

The baseline follows the book (Raschka, *Build a Large Language Model (From Scratch)*, ch. 3-4):
learned absolute positions, separate W_query/W_key/W_value projections, a registered triu mask
and masked_fill + softmax + dropout written by hand, hand-written LayerNorm and tanh-GELU, and an
untied output head. tokembed.GPT is run at the same width, depth, heads, context and dropout, with
the same batches, the same optimizer (AdamW, same hyperparameters) and the same training step
(forward, cross-entropy, backward, clip, step); the ratio of tokens/s is reported.

    .venv/bin/python benchmarks/bench_model.py           # three configurations, ~3-10 min
    .venv/bin/python benchmarks/bench_model.py --quick   # one small configuration, seconds
    .venv/bin/python benchmarks/bench_model.py --document-mask-only   # what document_mask costs, ~1 min
    .venv/bin/python benchmarks/bench_model.py --devices-only   # torch.compile on the CPU; DDP 2 gloo ranks vs 1, ~3 min

It also measures what ``GPTConfig(document_mask=True)`` costs (packed documents kept apart: an explicit
attention mask instead of the fused causal path) against the same model without it.

Writes a markdown table to stdout and JSON to benchmarks/results/model.json (model-quick.json with --quick).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from tokembed import GPT, GPTConfig  # noqa: E402

# ------------------------------------------------------------------ the book's GPT (chapters 3 and 4)


class BookMultiHeadAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        assert d_out % num_heads == 0, "d_out must be divisible by num_heads"
        self.d_out, self.num_heads, self.head_dim = d_out, num_heads, d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1))

    def forward(self, x):
        b, num_tokens, d_in = x.shape
        keys, queries, values = self.W_key(x), self.W_query(x), self.W_value(x)
        keys = keys.view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)
        queries = queries.view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)
        values = values.view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)
        attn_scores = queries @ keys.transpose(2, 3)
        mask_bool = self.mask.bool()[:num_tokens, :num_tokens]
        attn_scores.masked_fill_(mask_bool, -torch.inf)
        attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1)
        attn_weights = self.dropout(attn_weights)
        context_vec = (attn_weights @ values).transpose(1, 2)
        context_vec = context_vec.contiguous().view(b, num_tokens, self.d_out)
        return self.out_proj(context_vec)


class BookLayerNorm(nn.Module):
    def __init__(self, emb_dim):
        super().__init__()
        self.eps = 1e-5
        self.scale = nn.Parameter(torch.ones(emb_dim))
        self.shift = nn.Parameter(torch.zeros(emb_dim))

    def forward(self, x):
        mean = x.mean(dim=-1, keepdim=True)
        var = x.var(dim=-1, keepdim=True, unbiased=False)
        return self.scale * (x - mean) / torch.sqrt(var + self.eps) + self.shift


class BookGELU(nn.Module):
    def forward(self, x):
        return 0.5 * x * (1 + torch.tanh(torch.sqrt(torch.tensor(2.0 / torch.pi)) * (x + 0.044715 * torch.pow(x, 3))))


class BookFeedForward(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.layers = nn.Sequential(
            nn.Linear(cfg["emb_dim"], 4 * cfg["emb_dim"]), BookGELU(), nn.Linear(4 * cfg["emb_dim"], cfg["emb_dim"])
        )

    def forward(self, x):
        return self.layers(x)


class BookTransformerBlock(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.att = BookMultiHeadAttention(
            cfg["emb_dim"], cfg["emb_dim"], cfg["context_length"], cfg["drop_rate"], cfg["n_heads"], cfg["qkv_bias"]
        )
        self.ff = BookFeedForward(cfg)
        self.norm1, self.norm2 = BookLayerNorm(cfg["emb_dim"]), BookLayerNorm(cfg["emb_dim"])
        self.drop_shortcut = nn.Dropout(cfg["drop_rate"])

    def forward(self, x):
        shortcut = x
        x = self.drop_shortcut(self.att(self.norm1(x))) + shortcut
        shortcut = x
        return self.drop_shortcut(self.ff(self.norm2(x))) + shortcut


class BookGPTModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.tok_emb = nn.Embedding(cfg["vocab_size"], cfg["emb_dim"])
        self.pos_emb = nn.Embedding(cfg["context_length"], cfg["emb_dim"])
        self.drop_emb = nn.Dropout(cfg["drop_rate"])
        self.trf_blocks = nn.Sequential(*[BookTransformerBlock(cfg) for _ in range(cfg["n_layers"])])
        self.final_norm = BookLayerNorm(cfg["emb_dim"])
        self.out_head = nn.Linear(cfg["emb_dim"], cfg["vocab_size"], bias=False)

    def forward(self, in_idx):
        batch_size, seq_len = in_idx.shape
        tok_embeds = self.tok_emb(in_idx)
        pos_embeds = self.pos_emb(torch.arange(seq_len, device=in_idx.device))
        x = self.drop_emb(tok_embeds + pos_embeds)
        x = self.trf_blocks(x)
        return self.out_head(self.final_norm(x))


def book_loss(model, inputs, targets):
    logits = model(inputs)
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


# ------------------------------------------------------------------ measurement


def make_batches(
    n: int, batch_size: int, length: int, vocab: int, seed: int = 0
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Windows of real text when the story is beside the repo, else random ids (speed does not depend on them)."""
    g = torch.Generator().manual_seed(seed)
    story = ROOT.parent / "shared" / "corpora" / "the-verdict.txt"
    if story.exists():
        from tokembed import encode_text

        ids = torch.as_tensor(encode_text(story.read_text(encoding="utf-8")).astype("int64"))
    else:
        ids = torch.randint(0, vocab, (100_000,), generator=g)
    out = []
    for _ in range(n):
        starts = torch.randint(0, len(ids) - length - 1, (batch_size,), generator=g)
        w = ids[starts[:, None] + torch.arange(length + 1)]
        out.append((w[:, :-1].contiguous(), w[:, 1:].contiguous()))
    return out


def make_step(model, loss_fn, lr: float = 4e-4):
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.1, fused=True)

    def step(inputs, targets):
        loss = loss_fn(model, inputs, targets)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss

    return step


def best_seconds(runs: dict, models: dict, batches: list, *, warmup: int, rounds: int) -> dict:
    """Warm each training step up, then interleave ``rounds`` of them over ``batches`` so that machine noise
    hits all alike; each one's best round, in seconds."""
    for name, step in runs.items():  # warm-up: allocator, kernels
        models[name].train()
        for x, y in batches[:warmup]:
            step(x, y)
    best = {k: float("inf") for k in runs}
    for _ in range(rounds):
        for name, step in runs.items():
            t0 = time.perf_counter()
            for x, y in batches:
                step(x, y)
            best[name] = min(best[name], time.perf_counter() - t0)
    return best


def measure(cfg: dict, *, steps: int, warmup: int, rounds: int) -> dict:
    """tokembed.GPT against the book's GPTModel on the same batches (see `best_seconds`)."""
    torch.manual_seed(0)
    ours = GPT(
        GPTConfig(
            vocab_size=cfg["vocab_size"],
            context_length=cfg["context_length"],
            dim=cfg["emb_dim"],
            n_layers=cfg["n_layers"],
            n_heads=cfg["n_heads"],
            dropout=cfg["drop_rate"],
            positional="learned",
        )
    )
    torch.manual_seed(0)
    book = BookGPTModel(cfg)
    runs = {"tokembed.GPT": make_step(ours, lambda m, x, y: m.loss(x, y)), "book GPTModel": make_step(book, book_loss)}
    models = {"tokembed.GPT": ours, "book GPTModel": book}
    batches = make_batches(steps, cfg["batch_size"], cfg["context_length"], cfg["vocab_size"])
    tokens = steps * cfg["batch_size"] * cfg["context_length"]
    best = best_seconds(runs, models, batches, warmup=warmup, rounds=rounds)
    params = {k: sum(p.numel() for p in m.parameters()) for k, m in models.items()}
    return {
        name: {"seconds": best[name], "tokens_per_s": tokens / best[name], "parameters": params[name]} for name in runs
    }


def measure_document_mask(cfg: dict, positional: str, *, steps: int, warmup: int, rounds: int) -> dict:
    """tokembed.GPT with and without document_mask on the same batches (a document boundary every 100
    tokens), rounds interleaved, best round kept."""
    models, runs = {}, {}
    for mask in (False, True):
        torch.manual_seed(0)
        m = GPT(
            GPTConfig(
                vocab_size=cfg["vocab_size"],
                context_length=cfg["context_length"],
                dim=cfg["emb_dim"],
                n_layers=cfg["n_layers"],
                n_heads=cfg["n_heads"],
                dropout=cfg["drop_rate"],
                positional=positional,
                document_mask=mask,
            )
        )
        models[mask], runs[mask] = m, make_step(m, lambda m, x, y: m.loss(x, y))
    batches = make_batches(steps, cfg["batch_size"], cfg["context_length"], cfg["vocab_size"])
    for x, _ in batches:
        x[:, 99::100] = 50256  # <|endoftext|>
    tokens = steps * cfg["batch_size"] * cfg["context_length"]
    best = best_seconds(runs, models, batches, warmup=warmup, rounds=rounds)
    return {
        "positional": positional,
        "without_tokens_per_s": tokens / best[False],
        "with_tokens_per_s": tokens / best[True],
        "ratio": best[False] / best[True],
    }


class _LossStep(nn.Module):
    """The loss as a module's forward, as the training loop compiles it."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x, y):
        return self.model.loss(x, y)


def measure_compile(cfg: dict, *, steps: int, warmup: int, rounds: int) -> dict:
    """tokembed.GPT's training step eager against torch.compile (the loop's --compile), same batches."""
    models, runs = {}, {}
    for name in ("eager", "compiled"):
        torch.manual_seed(0)
        m = GPT(
            GPTConfig(
                vocab_size=cfg["vocab_size"],
                context_length=cfg["context_length"],
                dim=cfg["emb_dim"],
                n_layers=cfg["n_layers"],
                n_heads=cfg["n_heads"],
                positional="rope",
            )
        )
        fwd = _LossStep(m) if name == "eager" else torch.compile(_LossStep(m))
        models[name], runs[name] = m, make_step(m, lambda _m, x, y, f=fwd: f(x, y))
    batches = make_batches(steps, cfg["batch_size"], cfg["context_length"], cfg["vocab_size"])
    t0 = time.perf_counter()
    runs["compiled"](*batches[0])  # the first call compiles
    compile_s = time.perf_counter() - t0
    tokens = steps * cfg["batch_size"] * cfg["context_length"]
    best = best_seconds(runs, models, batches, warmup=warmup, rounds=rounds)
    return {
        "eager_tokens_per_s": tokens / best["eager"],
        "compiled_tokens_per_s": tokens / best["compiled"],
        "ratio": best["eager"] / best["compiled"],
        "compile_seconds": compile_s,
    }


def measure_ddp(*, steps: int, batch_size: int = 8) -> dict:
    """`tokembed train` on the CPU, one process against `torchrun --nproc_per_node 2` (gloo), each rank one thread
    and ``batch_size`` windows: tokens/s of the global batch, the median step of each run's log."""
    import statistics
    import subprocess
    import tempfile

    story = ROOT.parent / "shared" / "corpora" / "the-verdict.txt"
    env = dict(os.environ, OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo", CUDA_VISIBLE_DEVICES="")
    common = ["train", str(story), "--device", "cpu", "--steps", str(steps), "--batch-size", str(batch_size)]
    common += [
        "--max-length",
        "64",
        "--eval-interval",
        str(steps),
        "--checkpoint-interval",
        str(steps),
        "--no-progress",
    ]
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for ranks in (1, 2):
            launcher = (
                [sys.executable, "-m"]
                if ranks == 1
                else [str(Path(sys.executable).with_name("torchrun")), "--standalone", "--nproc_per_node", "2", "-m"]
            )
            ckpt = Path(tmp) / f"r{ranks}"
            subprocess.run(
                [*launcher, "tokembed", *common, "--out", str(ckpt)], env=env, check=True, capture_output=True
            )
            log = json.loads((ckpt / "log.json").read_text())["train"][2:]  # past the first steps' warm-up
            out[ranks] = statistics.median(r["tokens_per_s"] for r in log)
    return {"one_process_tokens_per_s": out[1], "two_ranks_tokens_per_s": out[2], "ratio": out[2] / out[1]}


CONFIGS = {
    "tiny (tokembed train default)": dict(
        vocab_size=50257,
        context_length=64,
        emb_dim=64,
        n_layers=2,
        n_heads=4,
        drop_rate=0.0,
        qkv_bias=False,
        batch_size=8,
    ),
    "small, context 256, the book's dropout": dict(
        vocab_size=50257,
        context_length=256,
        emb_dim=256,
        n_layers=4,
        n_heads=4,
        drop_rate=0.1,
        qkv_bias=False,
        batch_size=8,
    ),
    "small, context 256, no dropout": dict(
        vocab_size=50257,
        context_length=256,
        emb_dim=256,
        n_layers=4,
        n_heads=4,
        drop_rate=0.0,
        qkv_bias=False,
        batch_size=8,
    ),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="one small configuration, few steps")
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument(
        "--document-mask-only", action="store_true", help="only the cost of document_mask (small config, three schemes)"
    )
    ap.add_argument(
        "--devices-only", action="store_true", help="only torch.compile vs eager and DDP 2 ranks vs 1 (CPU)"
    )
    args = ap.parse_args()
    if args.devices_only:
        return devices_main(steps=args.steps or 8, rounds=args.rounds or 3)
    configs = {"tiny (tokembed train default)": CONFIGS["tiny (tokembed train default)"]} if args.quick else CONFIGS
    steps = args.steps or (3 if args.quick else 8)
    rounds = args.rounds or (1 if args.quick else 3)
    results = []
    for label, cfg in ({} if args.document_mask_only else configs).items():
        r = measure(cfg, steps=steps, warmup=1 if args.quick else 2, rounds=rounds)
        ratio = r["tokembed.GPT"]["tokens_per_s"] / r["book GPTModel"]["tokens_per_s"]
        results.append({"config": label, **{k: v for k, v in cfg.items()}, "results": r, "ratio": ratio})
    lines = [
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, {platform.processor() or platform.machine()}; best of {rounds} rounds of {steps} training steps"
    ]
    if results:
        lines += [
            "",
            "| configuration | B x T | dim / layers / heads / dropout | book GPTModel tok/s | tokembed.GPT tok/s | ratio |",
            "|---|---|---|---:|---:|---:|",
        ]
    for r in results:
        lines.append(
            f"| {r['config']} | {r['batch_size']} x {r['context_length']} | {r['emb_dim']} / {r['n_layers']} / {r['n_heads']} / {r['drop_rate']} | "
            f"{r['results']['book GPTModel']['tokens_per_s']:,.0f} | {r['results']['tokembed.GPT']['tokens_per_s']:,.0f} | {r['ratio']:.2f}x |"
        )
    mask_cfg = CONFIGS["small, context 256, no dropout"]
    masks = (
        []
        if args.quick
        else [
            measure_document_mask(mask_cfg, pos, steps=steps, warmup=2, rounds=rounds)
            for pos in ("learned", "rope", "alibi")
        ]
    )
    if masks:
        lines += [
            "",
            f"document_mask at {mask_cfg['batch_size']} x {mask_cfg['context_length']}, dim {mask_cfg['emb_dim']}, {mask_cfg['n_layers']} layers (a document boundary every 100 tokens):",
            "",
            "| positional | without tok/s | with tok/s | with / without |",
            "|---|---:|---:|---:|",
            *[
                f"| {m['positional']} | {m['without_tokens_per_s']:,.0f} | {m['with_tokens_per_s']:,.0f} | {m['ratio']:.2f}x |"
                for m in masks
            ],
        ]
    print("\n".join(lines))
    name = (
        "model-quick.json" if args.quick else ("model-document-mask.json" if args.document_mask_only else "model.json")
    )
    out = ROOT / "benchmarks" / "results" / name  # a quick or partial run never replaces the full one
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".json.tmp")
    tmp.write_text(
        json.dumps(
            {
                "command": " ".join(["benchmarks/bench_model.py", *sys.argv[1:]]),
                "torch": torch.__version__,
                "threads": torch.get_num_threads(),
                "steps": steps,
                "rounds": rounds,
                "results": results,
                "document_mask": masks,
            },
            indent=1,
        )
        + "\n"
    )
    os.replace(tmp, out)


def devices_main(*, steps: int, rounds: int) -> None:
    cfg = CONFIGS["tiny (tokembed train default)"]
    c = measure_compile(cfg, steps=steps, warmup=2, rounds=rounds)
    d = measure_ddp(steps=30)
    lines = [
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, {platform.processor() or platform.machine()}",
        "",
        "| what | baseline tok/s | tok/s | ratio |",
        "|---|---:|---:|---:|",
        f"| --compile (rope, {cfg['batch_size']} x {cfg['context_length']}, dim {cfg['emb_dim']}; compiling took "
        f"{c['compile_seconds']:.0f} s) vs eager | {c['eager_tokens_per_s']:,.0f} | {c['compiled_tokens_per_s']:,.0f} | {c['ratio']:.2f}x |",
        f"| DDP, 2 gloo ranks x batch 8 vs 1 process x batch 8 (1 thread each) | {d['one_process_tokens_per_s']:,.0f} | "
        f"{d['two_ranks_tokens_per_s']:,.0f} | {d['ratio']:.2f}x |",
    ]
    print("\n".join(lines))
    out = ROOT / "benchmarks" / "results" / "model-devices.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".json.tmp")
    record = {"command": "benchmarks/bench_model.py --devices-only", "torch": torch.__version__, "compile": c, "ddp": d}
    tmp.write_text(json.dumps(record, indent=1) + "\n")
    os.replace(tmp, out)


if __name__ == "__main__":
    main()
