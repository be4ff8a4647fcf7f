"""`tokembed report`: a self-contained HTML page, checked by parsing it and by rendering it in Chromium."""

from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors.torch import save_file

from inspect_helpers import V, gpt2_state, planted_table, write_checkpoint
from tokembed.cli import main
from tokembed.inspection.report import ReportConfig, write_report

FAST = ReportConfig(n_points=300, tsne=False)


class Page(HTMLParser):
    """Collects the tags, image sources and every URL-bearing attribute of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.images: list[str] = []
        self.urls: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        for name, value in attrs:
            if name in ("src", "href", "srcset", "action", "poster", "data"):
                self.urls.append(value or "")
        if tag == "img":
            self.images.append(dict(attrs)["src"])

    def handle_data(self, data):
        self.text.append(data)


def parse(path: Path) -> Page:
    page = Page()
    page.feed(path.read_text(encoding="utf-8"))
    return page


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory, story):
    root = tmp_path_factory.mktemp("report")
    (root / "story.txt").write_text(story, encoding="utf-8")
    return write_checkpoint(root / "ck", planted_table(16), data=str(root / "story.txt"))


@pytest.fixture(scope="module")
def report(ckpt, tmp_path_factory):
    return write_report(ckpt, tmp_path_factory.mktemp("out") / "report.html", config=FAST)


def test_report_is_self_contained(report):
    from PIL import Image

    page = parse(report)
    assert "script" not in page.tags and "link" not in page.tags and "iframe" not in page.tags
    assert all(u.startswith("data:image/png;base64,") for u in page.urls), [u[:40] for u in page.urls]
    assert len(page.images) == 5  # loss, PCA, norm against frequency, positional heatmap, position distances
    for src in page.images:
        img = Image.open(io.BytesIO(base64.b64decode(src.split(",", 1)[1])))
        img.verify()
        assert img.format == "PNG" and img.size[0] > 300
    html = report.read_text(encoding="utf-8")
    assert "http://" not in html and "https://" not in html and "url(" not in html


def test_report_holds_the_neighbour_tables_and_settings(report, ckpt):
    from tokembed import load_table

    text = " ".join(parse(report).text)
    assert "Nearest neighbours" in text and "Position embeddings" in text and "Training" in text
    table = load_table(ckpt)
    best = table.neighbours(" the", topn=1)[0]
    assert repr(best.token) in text and f"{best.score:.3f}" in text
    assert "' queen'" in text  # the planted analogy king - man + woman
    assert "61,440" in text and "model.positional" in text  # tokens seen, settings


@pytest.mark.slow
def test_report_on_gpt2_tables_and_on_a_rope_checkpoint(tmp_path):
    save_file({"transformer." + k: v for k, v in gpt2_state().items()}, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(
        json.dumps({"model_type": "gpt2", "n_embd": 8, "n_positions": 1024})
    )  # a Hugging Face snapshot
    out = write_report(
        tmp_path,
        tmp_path / "gpt2.html",
        config=ReportConfig(n_points=200, tsne=False, words=[" king", "Gisburn", " queen"]),
    )
    text = " ".join(parse(out).text)
    assert "GPT-2" in text and "1,024 positions" in text and "No corpus was given" in text
    rope = write_checkpoint(tmp_path / "rope", torch.randn(V, 8), positional="rope", log=False)
    out = write_report(rope, tmp_path / "rope.html", config=FAST)
    assert "rope positions act inside attention" in " ".join(parse(out).text)


def test_report_refuses_to_overwrite_and_names_a_missing_extra(ckpt, tmp_path, monkeypatch, capsys):
    out = tmp_path / "r.html"
    out.write_text("mine")
    with pytest.raises(FileExistsError, match="already exists"):
        write_report(ckpt, out, config=FAST)
    assert out.read_text() == "mine"
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    assert main(["report", str(ckpt), "-o", str(tmp_path / "x.html"), "--no-tsne"]) == 2
    assert "tokembed report: error: drawing needs matplotlib" in capsys.readouterr().err
    assert not (tmp_path / "x.html").exists()
    with pytest.raises(ValueError, match="n_points must be >= 3"):
        ReportConfig(n_points=2)


# ------------------------------------------------------------------------ rendering in Chromium
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--remote-debugging-pipe",
    "--window-size=1200,1600",
]


def chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed: scripts/system-deps.sh installs it (apt-get install chromium)")
        pytest.skip("chromium is not installed (scripts/system-deps.sh installs it)")
    return exe


class DevTools:
    """The Chrome DevTools protocol over --remote-debugging-pipe: JSON messages ended by NUL, on fds 3 (in) and 4 (out)."""

    def __init__(self, exe: str, profile: str) -> None:
        to_child_r, self._w = os.pipe()
        self._r, from_child_w = os.pipe()

        def wire():  # in the child: its fd 3 reads our messages, its fd 4 writes the answers
            a, b = os.dup(to_child_r), os.dup(from_child_w)  # a < b, both >= 3: the two dup2 cannot clobber each other
            os.dup2(a, 3)
            os.dup2(b, 4)
            os.set_inheritable(3, True)  # dup2(fd, fd) is a no-op that would leave close-on-exec set
            os.set_inheritable(4, True)

        self.proc = subprocess.Popen(
            [exe, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "about:blank"],
            preexec_fn=wire,
            close_fds=False,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        os.close(to_child_r)
        os.close(from_child_w)
        self._buf, self._next = b"", 0

    def _read(self, want, timeout: float = 60.0) -> dict:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            while b"\0" in self._buf:
                raw, self._buf = self._buf.split(b"\0", 1)
                msg = json.loads(raw)
                if want(msg):
                    return msg
            chunk = os.read(self._r, 1 << 20)
            if not chunk:
                raise RuntimeError(
                    "chromium closed the DevTools pipe: " + self.proc.stderr.read().decode(errors="replace")[-2000:]
                )
            self._buf += chunk
        raise TimeoutError("chromium did not answer in time")

    def call(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        self._next += 1
        msg = {"id": self._next, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._w, json.dumps(msg).encode() + b"\0")
        answer = self._read(lambda m: m.get("id") == msg["id"])
        if "error" in answer:
            raise RuntimeError(f"{method}: {answer['error']}")
        return answer["result"]

    def wait_event(self, method: str, session: str) -> dict:
        return self._read(lambda m: m.get("method") == method and m.get("sessionId") == session)

    def close(self) -> None:
        with contextlib.suppress(RuntimeError, TimeoutError, OSError):
            self.call("Browser.close")
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._r)
        os.close(self._w)


def render(html: Path) -> tuple[list[dict], bytes]:
    """Open ``html`` in headless Chromium; return every image's load state and a PNG screenshot."""
    profile = tempfile.mkdtemp(prefix="tokembed-chromium-")
    browser = DevTools(chromium(), profile)
    try:
        target = browser.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        s = browser.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        browser.call("Page.enable", session=s)
        browser.call("Network.enable", session=s)
        browser.call("Page.navigate", {"url": html.resolve().as_uri()}, session=s)
        browser.wait_event("Page.loadEventFired", s)
        js = "JSON.stringify(Array.from(document.images).map(i => ({complete: i.complete, w: i.naturalWidth, h: i.naturalHeight})))"
        images = json.loads(
            browser.call("Runtime.evaluate", {"expression": js, "returnByValue": True}, session=s)["result"]["value"]
        )
        shot = base64.b64decode(browser.call("Page.captureScreenshot", {"format": "png"}, session=s)["data"])
        return images, shot
    finally:
        browser.close()
        shutil.rmtree(profile, ignore_errors=True)


@pytest.mark.slow
def test_report_renders_in_headless_chromium(report, tmp_path):
    from PIL import Image, ImageStat

    offline = tmp_path / "offline.html"  # a copy alone in its folder: nothing beside it to load
    shutil.copy(report, offline)
    images, shot = render(offline)
    assert len(images) == len(parse(report).images) == 5
    assert all(i["complete"] and i["w"] > 0 and i["h"] > 0 for i in images), images
    img = Image.open(io.BytesIO(shot)).convert("L")
    assert img.size[0] >= 1000
    stat = ImageStat.Stat(img)
    colours = img.getcolors(maxcolors=1 << 16)
    assert stat.stddev[0] > 10 and (colours is None or len(colours) > 20)  # not one blank colour
    assert img.getextrema()[0] < 60  # dark text or lines were drawn on the white page


@pytest.mark.slow
def test_cli_report_with_tsne(ckpt, tmp_path, capsys):
    out = tmp_path / "r.html"
    assert main(["report", str(ckpt), "-o", str(out), "--points", "60", "--words", "king", "man", "--space"]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    page = parse(out)
    assert len(page.images) == 6  # the t-SNE map joins the five
    assert "' king'" in " ".join(page.text)


@settings(max_examples=50, deadline=None)
@given(st.integers(3, 300), st.integers(1, 50), st.integers(0, 2**31 - 1))
def test_projection_labels_never_overlap_and_the_most_frequent_comes_first(n, top, seed):
    from tokembed.inspection.plot import _spread_labels

    rng = np.random.default_rng(seed)
    xy = rng.standard_normal((n, 2)) * rng.uniform(0.01, 100)
    order = rng.permutation(n)
    placed = _spread_labels(xy, order, top)
    assert placed[0] == order[0] and len(placed) <= top and len(set(placed)) == len(placed)
    unit = (xy - xy.min(axis=0)) / np.maximum(xy.max(axis=0) - xy.min(axis=0), 1e-12)
    for a in range(len(placed)):
        for b in range(a):
            d = np.abs(unit[placed[a]] - unit[placed[b]])
            assert d[0] >= 0.06 or d[1] >= 0.025
    ranks = [int(np.where(order == k)[0][0]) for k in placed]
    assert ranks == sorted(ranks)  # labels are given in frequency order


# ------------------------------------------------------------------ every section, every positional scheme
HEADINGS = [
    "Summary",
    "Training",
    "Token embeddings",
    "Under-trained tokens",
    "Isotropy",
    "Nearest neighbours",
    "Tokens of a text",
    "Position embeddings",
    "Settings",
]


class Sections(HTMLParser):
    """Each h2 heading -> the text and the number of images between it and the next h2."""

    def __init__(self) -> None:
        super().__init__()
        self.sections: dict[str, dict] = {}
        self._current = None
        self._in_h2 = False

    def handle_starttag(self, tag, attrs):
        if tag == "h2":
            self._in_h2, self._current = True, ""
        elif tag == "img" and self._current is not None:
            self.sections[self._current]["images"] += 1

    def handle_endtag(self, tag):
        if tag == "h2":
            self._in_h2 = False
            self.sections[self._current] = {"text": "", "images": 0}

    def handle_data(self, data):
        if self._in_h2:
            self._current += data
        elif self._current in self.sections:
            self.sections[self._current]["text"] += data


def sections_of(path: Path) -> dict[str, dict]:
    parser = Sections()
    parser.feed(path.read_text(encoding="utf-8"))
    return parser.sections


@pytest.fixture(scope="module")
def scheme_reports(tmp_path_factory):
    from inspect_helpers import SCHEMES, tiny_run

    root = tmp_path_factory.mktemp("schemes")
    corpus = root / "manual.txt"  # not the story: the report's text must come from the run's own data
    corpus.write_text("The quick brown fox reads the manual page of ls. " * 200, encoding="utf-8")
    return {s: write_report(tiny_run(root / s, s, str(corpus)), root / f"{s}.html", config=FAST) for s in SCHEMES}


@pytest.mark.slow
def test_every_section_has_content_for_each_of_the_seven_schemes(scheme_reports):
    for scheme, path in scheme_reports.items():
        found = sections_of(path)
        assert list(found) == HEADINGS, scheme
        for heading, content in found.items():
            assert content["images"] or len(content["text"].strip()) > 20, (scheme, heading, content)
        positions = found["Position embeddings"]
        assert f"{scheme} positions" in positions["text"]
        assert (
            positions["images"]
            == {"learned": 2, "sinusoidal": 2, "rope": 2, "alibi": 1, "t5": 1, "shaw": 1, "none": 0}[scheme]
        )
        assert "The quick brown fox" in found["Tokens of a text"]["text"]  # the run's own data, not the story
        assert "under-trained" in found["Nearest neighbours"]["text"]  # a 2-step run barely read anything


@pytest.mark.slow
def test_settings_show_only_what_applied(scheme_reports):
    rope, t5 = (
        sections_of(scheme_reports["rope"])["Settings"]["text"],
        sections_of(scheme_reports["t5"])["Settings"]["text"],
    )
    assert "model.rope_base" not in rope and "RotaryEmbedding(head_dim=8, base=10000" in rope
    assert "T5RelativeBias(n_heads=2, num_buckets=32, max_distance=128" in t5 and "rope" not in t5
    assert "train.val_fraction" in rope  # a text file: its last tenth was held out
    assert "model.eot_token" not in rope  # read only by the document mask, which was off
    assert "train.init_embeddings" not in rope


@pytest.mark.slow
def test_a_shard_folder_run_shows_no_val_fraction_and_its_own_text(tmp_path):
    from inspect_helpers import tiny_run

    (tmp_path / "doc.txt").write_text("Manual pages describe commands. " * 300, encoding="utf-8")
    assert main(["prepare", str(tmp_path / "doc.txt"), "--out", str(tmp_path / "shards"), "--quiet"]) == 0
    out = write_report(tiny_run(tmp_path / "run", "alibi", str(tmp_path / "shards")), tmp_path / "r.html", config=FAST)
    found = sections_of(out)
    assert "train.val_fraction" not in found["Settings"]["text"]
    assert "Manual pages describe commands" in found["Tokens of a text"]["text"]


@pytest.mark.slow
def test_reports_of_every_scheme_render_in_headless_chromium(scheme_reports, tmp_path):
    for scheme, path in scheme_reports.items():
        offline = tmp_path / f"{scheme}.html"
        shutil.copy(path, offline)
        images, shot = render(offline)
        assert len(images) == len(parse(path).images), scheme
        assert all(i["complete"] and i["w"] > 0 and i["h"] > 0 for i in images), (scheme, images)


@pytest.mark.slow
def test_gpt2_wte_gets_candidates_without_counts_and_scores_with_a_corpus(tmp_path, story):
    state = gpt2_state()
    state["wte.weight"][[124, 125, *range(177, 188)]] = 0.5  # GPT-2's never-in-UTF-8 byte tokens: one point
    save_file({"transformer." + k: v for k, v in state.items()}, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    found = sections_of(write_report(tmp_path, tmp_path / "a.html", config=FAST))
    assert "candidates, unconfirmed" in found["Under-trained tokens"]["text"]
    (tmp_path / "story.txt").write_text(story, encoding="utf-8")
    scored = write_report(
        tmp_path, tmp_path / "b.html", config=ReportConfig(n_points=200, tsne=False, corpus=str(tmp_path / "story.txt"))
    )
    text = sections_of(scored)["Under-trained tokens"]["text"]
    assert "average precision" in text and "tokens were read fewer than 10 times" in text
