"""Speed of inspecting a GPT-2-sized table, against baselines measured in the same run.

    .venv/bin/python benchmarks/bench_inspect.py [--quick]

What is measured (best of several repeats, seconds):

* neighbours: ``EmbeddingTable.neighbours`` (torch matmul + topk over unit rows cached once) vs
  gensim's ``KeyedVectors.most_similar`` on the same vectors vs a plain numpy argsort.
* analogy: ``EmbeddingTable.most_similar`` vs gensim's, three words.
* word2vec export: ``export_table(format="word2vec")`` vs gensim's ``save_word2vec_format`` vs
  ``numpy.savetxt`` (numbers only).
* GPT-2 import: ``load_gpt2_embeddings`` on a GPT-2-small-shaped ``model.safetensors`` (all 124M
  parameters) vs reading the whole file with ``safetensors.torch.load_file``.

Data: the table is (50257, 768) float32 with seeded random values (speed does not depend on them);
the query words are the most frequent words of the text under /usr/share/doc, tokenized with
GPT-2's BPE; the GPT-2-shaped file is written under benchmarks/data/ (git-ignored).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import re
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"
RESULTS = HERE / "results" / "inspect.json"


def best_of(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def doc_words(limit_bytes: int) -> list[str]:
    """The most frequent words of the text under /usr/share/doc (plain and .gz), with GPT-2's leading space."""
    text, total = [], 0
    for path in sorted(Path("/usr/share/doc").rglob("*")):
        if total > limit_bytes or not path.is_file():
            continue
        try:
            raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
            s = raw.decode("utf-8")
        except (OSError, UnicodeDecodeError, EOFError, gzip.BadGzipFile):
            continue
        text.append(s)
        total += len(s)
    words = Counter(re.findall(r"[a-z]{3,}", " ".join(text).lower()))
    return [" " + w for w, _ in words.most_common(200)]


def gpt2_small_file(path: Path, n_layers: int) -> Path:
    """A file with GPT-2 small's tensor names and shapes (random values)."""
    if path.exists():
        return path
    from safetensors.torch import save_file

    g = torch.Generator().manual_seed(0)
    D = 768
    state = {"wte.weight": torch.randn(50257, D, generator=g), "wpe.weight": torch.randn(1024, D, generator=g)}
    for i in range(n_layers):
        state |= {
            f"h.{i}.attn.c_attn.weight": torch.randn(D, 3 * D, generator=g),
            f"h.{i}.attn.c_proj.weight": torch.randn(D, D, generator=g),
            f"h.{i}.mlp.c_fc.weight": torch.randn(D, 4 * D, generator=g),
            f"h.{i}.mlp.c_proj.weight": torch.randn(4 * D, D, generator=g),
        }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    save_file(state, str(tmp))
    os.replace(tmp, path)
    return path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer repeats, fewer rows exported, 2 GPT-2 layers")
    args = ap.parse_args()
    repeats = 3 if args.quick else 5
    n_queries = 20 if args.quick else 100
    export_rows = 2000 if args.quick else 10000
    n_layers = 2 if args.quick else 12

    from gensim.models import KeyedVectors

    from tokembed import EmbeddingTable, export_table, load_gpt2_embeddings

    g = torch.Generator().manual_seed(0)
    tokens = torch.randn(50257, 768, generator=g)
    table = EmbeddingTable(tokens, "gpt2")
    words = [w for w in doc_words(20_000_000) if len(table.ids(w)) == 1][:n_queries]
    ids = [table.ids(w)[0] for w in words]
    kv = KeyedVectors(vector_size=768)
    kv.add_vectors([str(i) for i in range(50257)], tokens.numpy())
    kv.fill_norms()
    _ = table.unit  # both sides normalise once, outside the timings
    unit_np = table.unit.numpy()

    def numpy_nn():
        for i in ids:
            s = unit_np @ unit_np[i]
            s[i] = -np.inf
            np.argsort(-s)[:10]

    rows = []

    def add(task, name, seconds, per, baseline=None):
        rows.append({"task": task, "impl": name, "seconds": seconds, "per": per, "baseline": baseline})

    t_ours = best_of(lambda: [table.neighbours(i, topn=10) for i in ids], repeats)
    t_many = best_of(lambda: table.neighbours_many(ids, topn=10), repeats)
    t_gensim = best_of(lambda: [kv.most_similar(str(i), topn=10) for i in ids], repeats)
    t_numpy = best_of(numpy_nn, repeats)
    for name, t in (
        ("tokembed neighbours", t_ours),
        (f"tokembed neighbours_many ({len(ids)} at once)", t_many),
        ("gensim most_similar", t_gensim),
        ("numpy argsort", t_numpy),
    ):
        add("neighbours, 10 of 50257 x 768", name, t / len(ids), "query")

    triples = [(ids[k], ids[k + 1], ids[k + 2]) for k in range(0, len(ids) - 2, 3)]
    t_ours = best_of(lambda: [table.most_similar(positive=[a, b], negative=[c]) for a, b, c in triples], repeats)
    t_gensim = best_of(
        lambda: [kv.most_similar(positive=[str(a), str(b)], negative=[str(c)]) for a, b, c in triples], repeats
    )
    add("analogy a + b - c", "tokembed most_similar", t_ours / len(triples), "query")
    add("analogy a + b - c", "gensim most_similar", t_gensim / len(triples), "query")

    sub = list(range(export_rows))
    small = EmbeddingTable(tokens[:export_rows], "gpt2")
    kv_small = KeyedVectors(vector_size=768)
    kv_small.add_vectors([small.key(i) for i in sub], tokens[:export_rows].numpy())
    with tempfile.TemporaryDirectory(dir=HERE) as d:
        t_ours = best_of(lambda: export_table(small, Path(d) / "a.txt", format="word2vec", overwrite=True), repeats)
        t_gensim = best_of(lambda: kv_small.save_word2vec_format(str(Path(d) / "b.txt"), binary=False), repeats)
        t_savetxt = best_of(lambda: np.savetxt(Path(d) / "c.txt", tokens[:export_rows].numpy(), fmt="%.9g"), repeats)
    for name, t in (
        ("tokembed export word2vec", t_ours),
        ("gensim save_word2vec_format", t_gensim),
        ("numpy.savetxt %.9g", t_savetxt),
    ):
        add(f"word2vec text, {export_rows} x 768", name, t, "file")

    f = gpt2_small_file(DATA / f"gpt2-shaped-{n_layers}layers.safetensors", n_layers)
    from safetensors.torch import load_file

    binf = DATA / f"gpt2-shaped-{n_layers}layers.bin"
    if not binf.exists():
        torch.save({"transformer." + k: v for k, v in load_file(str(f)).items()}, binf)

    def touch(t: torch.Tensor) -> float:
        return float(t.sum())  # reading every value: a lazily mapped file is really read

    def ours(path):
        tables = load_gpt2_embeddings(path)
        touch(tables["wte"]), touch(tables["wpe"])

    def whole_safetensors():
        state = load_file(str(f))
        touch(state["wte.weight"]), touch(state["wpe.weight"])

    def whole_torch():
        state = torch.load(binf, map_location="cpu", weights_only=True)  # how the book and most scripts read it
        touch(state["transformer.wte.weight"]), touch(state["transformer.wpe.weight"])

    size = f.stat().st_size / 2**20
    task = f"GPT-2 wte+wpe from a {size:.0f} MiB checkpoint (read + sum)"
    add(task, "tokembed load_gpt2_embeddings(.safetensors)", best_of(lambda: ours(f), repeats), "file")
    add(task, "tokembed load_gpt2_embeddings(.bin, mmap)", best_of(lambda: ours(binf), repeats), "file")
    add(task, "safetensors load_file (whole)", best_of(whole_safetensors, repeats), "file")
    add(task, "torch.load(.bin) (whole)", best_of(whole_torch, repeats), "file")

    # ratios against the first row of each task (ours)
    print(
        f"\n{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__}, threads {torch.get_num_threads()}\n"
    )
    print("| task | implementation | time | vs tokembed |")
    print("|---|---|---|---|")
    firsts = {}
    for r in rows:
        firsts.setdefault(r["task"], r["seconds"])
        r["ratio_to_tokembed"] = r["seconds"] / firsts[r["task"]]
        print(
            f"| {r['task']} | {r['impl']} | {r['seconds'] * 1e3:.2f} ms / {r['per']} | {r['ratio_to_tokembed']:.2f}x |"
        )
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    tmp = RESULTS.with_suffix(".json.tmp")
    tmp.write_text(json.dumps({"quick": args.quick, "argv": sys.argv, "rows": rows}, indent=1))
    os.replace(tmp, RESULTS)
    print(f"\nwrote {RESULTS.relative_to(HERE.parent)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
