"""Questions about embedding tables: neighbours, analogies (against gensim), positions, loaders, errors."""

from __future__ import annotations

import json
import sys
from collections import Counter

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from inspect_helpers import ANALOGY, V, gpt2_state, planted_table, write_checkpoint
from tokembed import EmbeddingTable, get_tokenizer, load_gpt2_embeddings, load_table, token_counts
from tokembed.cli import main
from tokembed.inspection.project import project_2d
from tokembed.inspection.table import gpt2_byte_spelling
from tokembed.tokenizer import gpt2_files


@pytest.fixture(scope="module")
def enc():
    return get_tokenizer("gpt2")


@pytest.fixture(scope="module")
def table():
    return EmbeddingTable(
        planted_table(16), "gpt2", positions=torch.randn(32, 16, generator=torch.Generator().manual_seed(5))
    )


def cosine_reference(m: np.ndarray, v: np.ndarray) -> np.ndarray:
    # Written from the definition, in float64, row by row.
    m = m.astype(np.float64)
    v = v.astype(np.float64)
    return np.array([row @ v / (np.linalg.norm(row) * np.linalg.norm(v)) for row in m])


# ------------------------------------------------------------------------------- words and ids
def test_leading_space_gives_a_different_gpt2_token(table):
    # GPT-2's vocabulary (encoder.json): "king" = 3364, " king" = 5822.
    assert table.ids("king") == [3364]
    assert table.ids(" king") == [5822]
    assert table.ids("<|endoftext|>") == [50256]
    assert table.label(5822) == " king"


def test_key_spelling_is_encoder_json(table):
    encoder = json.loads(gpt2_files()[1].read_text(encoding="utf-8"))  # OpenAI's file: spelling -> id
    assert len(encoder) == V
    for spelling, i in encoder.items():
        assert table.key(i) == spelling
    assert gpt2_byte_spelling(b" king\n") == "ĠkingĊ"


def test_multi_token_word_is_the_mean_of_its_tokens(table, enc):
    ids = enc.encode_ordinary(" Gisburn")
    assert len(ids) > 1
    expected = table.tokens.numpy()[ids].astype(np.float64).mean(axis=0)
    np.testing.assert_allclose(table.vector(" Gisburn").numpy(), expected, rtol=1e-6, atol=1e-6)
    assert not {n.id for n in table.neighbours(" Gisburn", topn=50)} & set(ids)  # its own tokens are left out


# ----------------------------------------------------------------------- neighbours, similarity
def test_neighbours_match_a_brute_force_reference(table):
    m = table.tokens.numpy()
    for query in (5822, " woman", "the"):
        v = m[table.ids(query)].mean(axis=0) if isinstance(query, str) else m[query]
        ref = cosine_reference(m, v)
        own = set(table.ids(query)) if isinstance(query, str) else {query}
        ref[list(own)] = -np.inf
        expected = np.argsort(-ref, kind="stable")[:10]
        got = table.neighbours(query, topn=10)
        assert [n.id for n in got] == expected.tolist()
        np.testing.assert_allclose([n.score for n in got], ref[expected], rtol=1e-5, atol=1e-6)
        assert [n.token for n in got] == [table.label(i) for i in expected]


def test_batched_neighbours_agree_with_one_at_a_time(table):
    queries = [5822, " woman", "the", " Gisburn", table.tokens[7] * 3.0]
    many = table.neighbours_many(queries, topn=7, batch_size=2)
    for q, got in zip(queries, many):
        one = table.neighbours(q, topn=7)
        assert [n.id for n in got] == [n.id for n in one]
        np.testing.assert_allclose([n.score for n in got], [n.score for n in one], rtol=1e-5, atol=1e-6)


def test_similarity_is_cosine(table):
    m = table.tokens.numpy().astype(np.float64)
    a, b = m[5822], m[582]
    assert table.similarity(" king", " man") == pytest.approx(a @ b / np.linalg.norm(a) / np.linalg.norm(b), rel=1e-5)
    assert table.similarity(5822, " king") == pytest.approx(1.0, abs=1e-6)


def test_token_table_of_a_text(table, enc):
    text = "I had always thought Jack Gisburn<|endoftext|>"
    rows = table.token_table(text)
    assert [r.id for r in rows] == enc.encode(text, allowed_special={"<|endoftext|>"})
    assert rows[-1].id == 50256 and rows[-1].token == "<|endoftext|>"
    assert [r.position for r in rows] == list(range(len(rows)))
    np.testing.assert_allclose(
        [r.norm for r in rows], np.linalg.norm(table.tokens.numpy()[[r.id for r in rows]], axis=1), rtol=1e-6
    )


# --------------------------------------------------------------------- analogies against gensim
@pytest.fixture(scope="module")
def gensim_kv(table):
    from gensim.models import KeyedVectors

    kv = KeyedVectors(vector_size=table.dim)
    kv.add_vectors([str(i) for i in range(V)], table.tokens.numpy())
    return kv


@pytest.mark.parametrize(
    ("positive", "negative"),
    [([5822, 2415], [582]), ([5822], []), ([], [582]), ([262, 290, 286], [257, 11])],
)
def test_most_similar_agrees_with_gensim(table, gensim_kv, positive, negative):
    ours = table.most_similar(positive=positive, negative=negative, topn=15)
    theirs = gensim_kv.most_similar(positive=[str(i) for i in positive], negative=[str(i) for i in negative], topn=15)
    assert [n.id for n in ours] == [int(k) for k, _ in theirs]
    np.testing.assert_allclose([n.score for n in ours], [s for _, s in theirs], rtol=1e-5, atol=1e-6)


def test_weighted_pairs_and_raw_vectors_agree_with_gensim(table, gensim_kv):
    vec = table.tokens[100].numpy() * 2.5
    ours = table.most_similar(positive=[(5822, 0.5), (2415, 2.0), vec], negative=[(582, -1.5)], topn=12)
    theirs = gensim_kv.most_similar(positive=[("5822", 0.5), ("2415", 2.0), vec], negative=[("582", -1.5)], topn=12)
    assert [n.id for n in ours] == [int(k) for k, _ in theirs]
    np.testing.assert_allclose([n.score for n in ours], [s for _, s in theirs], rtol=1e-5, atol=1e-6)


def test_planted_analogy_is_found(table):
    king, man, woman, queen = ANALOGY
    best = table.most_similar(positive=[king, woman], negative=[man], topn=3)
    assert best[0].token == queen and best[0].score == pytest.approx(1.0, abs=1e-5)
    assert not {n.token for n in best} & {king, man, woman}  # inputs are excluded, as in gensim


# ------------------------------------------------------------------------------------ positions
def test_position_similarity_and_step_distance_match_references(table):
    pos = table.positions.numpy().astype(np.float64)
    sim = table.position_similarity().numpy()
    for p in (0, 7, 31):
        np.testing.assert_allclose(sim[p], cosine_reference(pos, pos[p]), rtol=1e-5, atol=1e-6)
    dist = table.position_step_distance().numpy()
    P = pos.shape[0]
    for p in range(P):
        near = [q for q in (p - 1, p + 1) if 0 <= q < P]
        assert dist[p] == pytest.approx(np.mean([np.linalg.norm(pos[p] - pos[q]) for q in near]), rel=1e-5)


def test_sinusoidal_checkpoint_positions_depend_only_on_the_offset(tmp_path):
    # sin/cos of one frequency per pair: <PE[p], PE[q]> = sum_i cos(w_i (p - q)), and every |PE[p]| = sqrt(D/2).
    ck = write_checkpoint(tmp_path / "ck", torch.randn(V, 16), positional="sinusoidal", context_length=40)
    table = load_table(ck)
    assert table.positional == "sinusoidal" and table.positions.shape == (40, 16)
    sim = table.position_similarity().numpy()
    for k in (1, 3, 10):
        diag = np.diagonal(sim, k)
        np.testing.assert_allclose(diag, np.full_like(diag, diag[0]), atol=1e-5)
    w = 1.0 / 10000 ** (np.arange(0, 16, 2) / 16)
    assert sim[0, 5] == pytest.approx(np.cos(w * 5).sum() / 8, abs=1e-5)


def test_rope_checkpoint_has_no_position_vectors(tmp_path):
    table = load_table(write_checkpoint(tmp_path / "ck", torch.randn(V, 8), positional="rope"))
    assert table.positions is None
    with pytest.raises(ValueError, match="no absolute position vectors.*rope"):
        table.position_similarity()


# -------------------------------------------------------------------------------------- loaders
def test_checkpoint_loader_reads_the_contract_layout(tmp_path):
    tokens, positions = torch.randn(V, 8), torch.randn(64, 8)
    table = load_table(write_checkpoint(tmp_path / "ck", tokens, positions=positions))
    assert torch.equal(table.tokens, tokens) and torch.equal(table.positions, positions)
    assert table.tokenizer.name == "gpt2" and table.positional == "learned"


def test_checkpoint_written_by_tokembed_train_code(tmp_path):
    # Two paths agree: the model that issue 5's save_checkpoint stores, and the table read here.
    from tokembed.model.checkpoint import save_checkpoint
    from tokembed.model.config import GPTConfig
    from tokembed.model.gpt import GPT

    model = GPT(GPTConfig(vocab_size=V, context_length=16, dim=8, n_layers=1, n_heads=2))
    save_checkpoint(tmp_path / "ck", model, plot=False)
    table = load_table(tmp_path / "ck")
    assert torch.equal(table.tokens, model.embed.token.weight.detach())
    assert torch.equal(table.positions, model.embed.position.weight.detach())
    in_memory = EmbeddingTable.from_model(model)
    assert torch.equal(in_memory.tokens, table.tokens) and torch.equal(in_memory.positions, table.positions)


def test_table_of_an_in_memory_model():
    from types import SimpleNamespace

    from torch import nn

    class Stand(nn.Module):  # the attribute layout of tokembed.GPT: model.embed.token / .position, model.config
        def __init__(self, positional):
            super().__init__()
            self.embed = nn.Module()
            self.embed.token = nn.Embedding(100, 6)
            if positional == "learned":
                self.embed.position = nn.Embedding(12, 6)
            self.config = SimpleNamespace(positional=positional, context_length=12)

    learned = Stand("learned")
    table = EmbeddingTable.from_model(learned, tokenizer="gpt2")  # 100 rows: GPT-2's only when asked for
    assert torch.equal(table.tokens, learned.embed.token.weight.detach()) and torch.equal(
        table.positions, learned.embed.position.weight.detach()
    )
    sinus = EmbeddingTable.from_model(Stand("sinusoidal"), tokenizer="gpt2")
    assert sinus.positions.shape == (12, 6) and torch.allclose(sinus.positions[0], torch.tensor([0.0, 1.0] * 3))
    assert EmbeddingTable.from_model(Stand("alibi"), tokenizer="none").positions is None
    with pytest.raises(TypeError, match="has no model.embed.token.weight"):
        EmbeddingTable.from_model(nn.Linear(2, 2))


@pytest.mark.parametrize("prefix", ["", "transformer.", "module._orig_mod.transformer."])
def test_gpt2_tables_from_hugging_face_safetensors(tmp_path, prefix):
    state = gpt2_state()
    save_file({prefix + k: v for k, v in state.items()}, str(tmp_path / "model.safetensors"))
    tables = load_gpt2_embeddings(tmp_path)  # the folder: model.safetensors is found inside
    assert torch.equal(tables["wte"], state["wte.weight"]) and torch.equal(tables["wpe"], state["wpe.weight"])


def test_gpt2_tables_from_pytorch_model_bin_in_half_precision(tmp_path):
    state = {"transformer." + k: v.half() for k, v in gpt2_state().items()}
    torch.save(state, tmp_path / "pytorch_model.bin")
    tables = load_gpt2_embeddings(tmp_path / "pytorch_model.bin")
    assert tables["wte"].dtype == torch.float32
    assert torch.equal(tables["wte"], state["transformer.wte.weight"].float())
    table = load_table(tmp_path / "pytorch_model.bin")
    assert table.positions.shape == (1024, 8) and table.label(5822) == " king"


def test_gpt2_tables_from_the_books_and_nanogpts_layouts(tmp_path):
    state = gpt2_state()
    book = {
        "tok_emb.weight": state["wte.weight"],
        "pos_emb.weight": state["wpe.weight"],
        "out_head.weight": state["wte.weight"].clone(),
    }
    torch.save(book, tmp_path / "model.pth")
    torch.save(
        {"model_state_dict": book, "optimizer_state_dict": {"state": {}, "param_groups": []}},
        tmp_path / "model_and_optimizer.pth",
    )
    nano = {
        "model": {
            "_orig_mod.transformer.wte.weight": state["wte.weight"],
            "_orig_mod.transformer.wpe.weight": state["wpe.weight"],
        },
        "iter_num": 5,
        "model_args": {"n_embd": 8},
    }
    torch.save(nano, tmp_path / "ckpt.pt")  # nanoGPT's checkpoint of a compiled model
    for name in ("model.pth", "model_and_optimizer.pth", "ckpt.pt"):
        tables = load_gpt2_embeddings(tmp_path / name)
        assert torch.equal(tables["wte"], state["wte.weight"]) and torch.equal(tables["wpe"], state["wpe.weight"])


def test_gpt2_wrong_shapes_and_keys_are_named(tmp_path):
    bad = gpt2_state()
    bad["wte.weight"] = bad["wte.weight"][:1000]
    save_file(bad, str(tmp_path / "small.safetensors"))
    with pytest.raises(ValueError, match=r"shape \(1000, 8\).*50257 rows"):
        load_gpt2_embeddings(tmp_path / "small.safetensors")
    bad = gpt2_state()
    bad["wpe.weight"] = torch.zeros(1024, 4)
    save_file(bad, str(tmp_path / "width.safetensors"))
    with pytest.raises(ValueError, match=r"\(1024, 4\).*widths"):
        load_gpt2_embeddings(tmp_path / "width.safetensors")
    save_file({"encoder.embed_tokens.weight": torch.zeros(3, 2)}, str(tmp_path / "other.safetensors"))
    with pytest.raises(
        ValueError, match=r"no GPT-2 embedding tables.*'wte.weight'.*found keys \[encoder.embed_tokens.weight\]"
    ):
        load_gpt2_embeddings(tmp_path / "other.safetensors")


def test_not_a_checkpoint_is_a_clear_error(tmp_path):
    (tmp_path / "notes.bin").write_text("hello, I am not a checkpoint")
    with pytest.raises(ValueError, match="notes.bin is not a PyTorch checkpoint"):
        load_gpt2_embeddings(tmp_path / "notes.bin")
    (tmp_path / "junk.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{garbage")
    with pytest.raises(ValueError, match="not a readable safetensors file"):
        load_table(tmp_path / "junk.safetensors")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_table(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="not a tokembed checkpoint: it has no config.json"):
        load_table(tmp_path / "empty")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "config.json").write_text('{"format": "something-else"}')
    with pytest.raises(ValueError, match="not a tokembed checkpoint"):
        load_table(tmp_path / "other")
    (tmp_path / "t.csv").write_text("1,2\n")
    with pytest.raises(ValueError, match="unknown suffix '.csv'"):
        load_table(tmp_path / "t.csv")


def test_npy_table_loads_with_the_gpt2_tokenizer(tmp_path):
    arr = np.random.default_rng(0).standard_normal((V, 4)).astype(np.float32)
    np.save(tmp_path / "t.npy", arr)
    table = load_table(tmp_path / "t.npy")
    assert np.array_equal(table.tokens.numpy(), arr) and table.label(5822) == " king"


# --------------------------------------------------------------------------------------- errors
def test_bad_queries_are_clear_errors(table):
    with pytest.raises(ValueError, match=r"token id 50257 is outside the table's vocabulary \(size 50257\)"):
        table.neighbours(50257)
    with pytest.raises(ValueError, match="token id -1 is outside"):
        table.label(-1)
    with pytest.raises(ValueError, match="empty string is not a word"):
        table.neighbours("")
    with pytest.raises(TypeError, match="a query must be a token id"):
        table.neighbours(1.5)
    with pytest.raises(ValueError, match="topn must be an integer >= 1"):
        table.neighbours(5, topn=0)
    small = EmbeddingTable(torch.randn(100, 4), "gpt2")
    with pytest.raises(
        ValueError, match=r"word ' king' encodes to token id 5822, outside the table's vocabulary \(size 100\)"
    ):
        small.neighbours(" king")
    labelled = EmbeddingTable(torch.randn(3, 4), labels=["cat", "dog", "cats"])
    with pytest.raises(ValueError, match=r"word 'catz' is not in the table's vocabulary.*did you mean 'cat'"):
        labelled.neighbours("catz")
    assert [n.token for n in labelled.neighbours("cat", topn=2)] != []
    bare = EmbeddingTable(torch.randn(10, 4))
    with pytest.raises(ValueError, match="has no tokenizer nor labels"):
        bare.neighbours("cat")
    with pytest.raises(ValueError, match=r"shape \(rows, dim\)"):
        EmbeddingTable(torch.randn(4))
    with pytest.raises(ValueError, match="row 2 holds NaN"):
        EmbeddingTable(torch.tensor([[0.0], [1.0], [float("nan")]]))


# ---------------------------------------------------------------------- counts and projections
def test_token_counts_match_a_counter(story, enc, tmp_path):
    (tmp_path / "story.txt").write_text(story, encoding="utf-8")
    counts = token_counts(tmp_path / "story.txt")
    expected = Counter(enc.encode(story, allowed_special={"<|endoftext|>"}))
    assert counts.shape == (V,) and int(counts.sum()) == sum(expected.values())
    for token_id, n in expected.most_common(20):
        assert counts[token_id] == n
    with pytest.raises(FileNotFoundError, match="corpus .* does not exist"):
        token_counts(tmp_path / "nope.txt")


def test_token_counts_of_a_shard_folder_equal_those_of_its_text(story, enc, tmp_path):
    (tmp_path / "story.txt").write_text(story, encoding="utf-8")
    assert (
        main(
            [
                "prepare",
                str(tmp_path / "story.txt"),
                "--out",
                str(tmp_path / "shards"),
                "--val-fraction",
                "0",
                "--quiet",
            ]
        )
        == 0
    )
    from_shards = token_counts(tmp_path / "shards")
    from_text = token_counts(tmp_path / "story.txt")
    assert from_shards[50256] == from_text[50256] + 1  # each document is stored followed by <|endoftext|>
    from_shards[50256] -= 1
    assert torch.equal(from_shards, from_text)


def test_pca_matches_scikit_learn(table):
    from sklearn.decomposition import PCA

    x = table.tokens[:500].numpy().astype(np.float64)
    ours = project_2d(x)
    theirs = PCA(n_components=2).fit_transform(x)
    for k in range(2):  # the sign of a principal axis is arbitrary
        sign = np.sign(ours[:, k] @ theirs[:, k])
        np.testing.assert_allclose(ours[:, k], sign * theirs[:, k], rtol=1e-6, atol=1e-8)


def test_tsne_gives_coordinates_and_a_missing_extra_names_it(table, monkeypatch):
    xy = project_2d(table.tokens[:40], method="tsne")
    assert xy.shape == (40, 2) and np.isfinite(xy).all()
    monkeypatch.setitem(sys.modules, "sklearn.manifold", None)  # as if scikit-learn were not installed
    with pytest.raises(ModuleNotFoundError, match=r"pip install 'tokembed\[tsne\]'"):
        project_2d(table.tokens[:40], method="tsne")
    with pytest.raises(ValueError, match="unknown projection 'umap'"):
        project_2d(table.tokens[:40], method="umap")


def test_most_frequent_follows_the_counts_with_ties_by_id():
    counts = torch.tensor([3, 9, 0, 9, 5, 1])
    table = EmbeddingTable(torch.randn(6, 2), labels=list("abcdef"), counts=counts)
    order = sorted(range(6), key=lambda i: (-int(counts[i]), i))  # the definition: most read first, then lower id
    assert [table.most_frequent(n) for n in (1, 3, 6, 60)] == [order[:1], order[:3], order, order]
    plain = EmbeddingTable(torch.randn(6, 2), labels=list("abcdef"))
    assert plain.most_frequent(4) == [0, 1, 2, 3] and plain.most_frequent(60) == list(range(6))  # no counts: first ids
    with pytest.raises(ValueError, match=r"n must be an integer >= 1, got 0; the number of tokens to keep"):
        table.most_frequent(0)


# ------------------------------------------------------------------------------------------ CLI
@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return write_checkpoint(tmp_path_factory.mktemp("cli") / "ck", planted_table(16))


def test_cli_neighbours_and_analogy_print_what_the_library_computes(ckpt, capsys):
    table = load_table(ckpt)
    assert main(["inspect", str(ckpt), "neighbours", "king", "--space", "--topn", "5", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert [n["id"] for n in got[" king"]] == [n.id for n in table.neighbours(" king", topn=5)]
    assert main(["inspect", str(ckpt), "analogy", "-p", "king", "woman", "-n", "man", "--space", "--topn", "3"]) == 0
    out = capsys.readouterr().out
    assert "' queen'" in out.splitlines()[1]
    assert main(["inspect", str(ckpt), "neighbours", "--ids", "5822", "--topn", "2"]) == 0
    assert "nearest to id 5822" in capsys.readouterr().out


def test_cli_similarity_tokens_positions_info(ckpt, capsys):
    table = load_table(ckpt)
    assert main(["inspect", str(ckpt), "similarity", " king", " man", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["cosine"] == pytest.approx(table.similarity(" king", " man"))
    assert main(["inspect", str(ckpt), "tokens", "Hello world", "--json"]) == 0
    assert [r["id"] for r in json.loads(capsys.readouterr().out)] == [15496, 995]
    assert main(["inspect", str(ckpt), "positions", "--json"]) == 0
    pos = json.loads(capsys.readouterr().out)
    assert pos["positions"] == 64 and len(pos["step_distance"]) == 64
    assert main(["inspect", str(ckpt), "info"]) == 0
    assert "50257" in capsys.readouterr().out


def test_cli_errors_exit_2_with_one_line(ckpt, tmp_path, capsys):
    assert main(["inspect", str(ckpt), "neighbours", "--ids", "99999"]) == 2
    assert "tokembed inspect: error: token id 99999 is outside the table's vocabulary" in capsys.readouterr().err
    assert main(["inspect", str(ckpt), "neighbours", "--ids", "king"]) == 2
    assert "'king' is not an integer token id" in capsys.readouterr().err
    assert main(["inspect", str(tmp_path), "info"]) == 2
    assert "is not a tokembed checkpoint" in capsys.readouterr().err
    rope = write_checkpoint(tmp_path / "rope", torch.randn(V, 8), positional="rope")
    assert main(["inspect", str(rope), "positions"]) == 2
    assert "rope" in capsys.readouterr().err


def test_cli_plot_writes_an_image_and_names_a_missing_extra(ckpt, tmp_path, capsys, monkeypatch, story):
    (tmp_path / "story.txt").write_text(story, encoding="utf-8")
    out = tmp_path / "pca.png"
    assert (
        main(
            [
                "inspect",
                str(ckpt),
                "plot",
                "pca",
                "-o",
                str(out),
                "--corpus",
                str(tmp_path / "story.txt"),
                "--points",
                "300",
            ]
        )
        == 0
    )
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["inspect", str(ckpt), "plot", "loss", "-o", str(tmp_path / "loss.svg")]) == 0
    assert (tmp_path / "loss.svg").read_text().lstrip().startswith("<?xml")
    capsys.readouterr()
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    assert main(["inspect", str(ckpt), "plot", "positions", "-o", str(tmp_path / "pos.png")]) == 2
    assert "pip install 'tokembed[plot]'" in capsys.readouterr().err
