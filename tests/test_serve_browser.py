"""`attnlab serve` in a real browser: headless Chromium (Debian's ``chromium`` package, driven by
Playwright, never a browser download of its own) opens the page, asks a question and sees the
answer and the attention heatmap, switches heads and layers, runs a causal trace, scores and
filters and sorts the dev set, and applies and saves an edit. A screenshot of each view is
written to the test's output directory (and to $ATTNLAB_SCREENSHOTS when set).

Without a browser these tests are skipped with the reason, except in CI (the CI variable set),
where a missing browser is a failure: .ci/run installs it."""

from __future__ import annotations

import os
import shutil
import socket
import threading
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="the serve extra (pip install -e '.[serve]') is not installed")

from attnlab.serve.app import create_app  # noqa: E402
from tests.serve_lab import make_lab, tiny  # noqa: E402

BROWSERS = ("chromium", "chromium-browser", "google-chrome")
TIMEOUT_MS = 120_000  # a causal trace on a shared CPU


def _no_browser(reason: str):
    if os.environ.get("CI"):
        pytest.fail(f"{reason}; CI must run the browser tests (.ci/run installs Debian's chromium)")
    pytest.skip(f"{reason}: the browser tests of `attnlab serve` need it (apt-get install chromium)")


def chromium_path() -> str | None:
    for name in (os.environ.get("ATTNLAB_CHROMIUM"), *BROWSERS):
        if name and (path := shutil.which(name)):
            return path
    return None


@pytest.fixture(scope="module")
def browser():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _no_browser("Playwright is not installed (the test extra has it)")
    path = chromium_path()
    if path is None:
        _no_browser(f"no Chromium found ({', '.join(BROWSERS)} or $ATTNLAB_CHROMIUM)")
    with sync_playwright() as p:
        # --no-sandbox: CI runs as root, where Chromium's sandbox refuses to start
        b = p.chromium.launch(executable_path=path, args=["--no-sandbox"])
        yield b
        b.close()


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """The lab (models/cpu and a tiny run) served by uvicorn on a free port in a thread."""
    import uvicorn

    directory = tmp_path_factory.mktemp("serve-browser")
    lab = make_lab(directory, tiny(directory))
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    server = uvicorn.Server(uvicorn.Config(create_app(lab, rate=0), log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{sock.getsockname()[1]}/", lab, directory
    server.should_exit = True
    thread.join(30)
    sock.close()


@pytest.fixture
def page(browser, served):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.set_default_timeout(TIMEOUT_MS)
    page.goto(served[0])
    page.wait_for_selector(".run-choice")  # the runs are listed: the script ran
    yield page
    page.close()


def screenshot(page, tmp_path: Path, name: str) -> Path:
    path = page.screenshot(path=str(tmp_path / f"{name}.png"), full_page=True) and tmp_path / f"{name}.png"
    if os.environ.get("ATTNLAB_SCREENSHOTS"):
        Path(os.environ["ATTNLAB_SCREENSHOTS"]).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(os.environ["ATTNLAB_SCREENSHOTS"]) / path.name)
    assert path.stat().st_size > 1000
    return path


def _image(page, selector: str) -> str:
    return page.eval_on_selector(selector, "c => c.toDataURL()")


def test_ask_shows_the_answer_attention_by_head_and_a_causal_trace(page, served, tmp_path):
    lab = served[1]
    page.fill("#question", "Ralf Wadephul")
    page.click("#ask")
    page.wait_for_selector(".card .answer")
    expected = [run.model.ask(["Where was Ralf Wadephul born?"])[0] for run in lab.runs]
    cards = page.locator(".card")
    assert cards.count() == 2  # the runs side by side
    first = cards.nth(0)
    assert first.locator(".answer").inner_text() == expected[0].answer  # "I don't know" only with a rule
    assert f"confidence {expected[0].confidence:.3f}" in first.locator(".confidence").inner_text()
    assert first.locator(".recalled").inner_text() == expected[0].recalled
    assert "supported by corpus line" in first.locator(".evidence").inner_text()
    assert first.locator("mark").inner_text() == expected[0].answer  # highlighted in the corpus line

    page.wait_for_function("document.getElementById('attention').width > 100")
    head0 = _image(page, "#attention")
    screenshot(page, tmp_path, "ask")
    page.click("#heads button:nth-child(2)")
    assert page.get_attribute("#attention", "data-head") == "1"
    assert _image(page, "#attention") != head0  # another head, another map
    page.select_option("#layer", "2")
    assert page.get_attribute("#attention", "data-layer") == "2"

    page.fill("#samples", "1")
    page.click("#trace-button")
    page.wait_for_selector(".trace-map[data-kind='attention']")
    assert page.locator(".trace-map").count() == 3
    assert "clean" in page.inner_text("#trace-status")
    screenshot(page, tmp_path, "trace")


def test_bad_input_is_shown_on_the_page(page):
    page.fill("#question", "Where was 日本 born?")
    page.click("#ask")
    page.wait_for_selector("#error:not([hidden])")
    assert "is not in the vocabulary" in page.inner_text("#error")


def test_dev_view_scores_filters_and_sorts(page, served, tmp_path):
    lab = served[1]
    page.click("#tab-dev")
    page.click("#dev-load")
    page.wait_for_selector("#dev-table tbody tr")
    dev = lab.dev(0)
    assert page.locator("#dev-table tbody tr").count() == len(lab.dev_examples)
    assert dev["text"] in page.inner_text("#dev-accuracy")
    assert page.locator("#calibration rect.bin").count() == sum(b["count"] > 0 for b in dev["bins"])
    screenshot(page, tmp_path, "dev")

    page.select_option("#dev-show", "right")
    assert page.locator("#dev-table tbody tr").count() == dev["correct"]
    page.select_option("#dev-show", "all")
    page.fill("#dev-filter", "Berlin")
    berlin = [r for r in dev["rows"] if "berlin" in f"{r['question']} {r['gold']} {r['answer']}".lower()]
    assert page.locator("#dev-table tbody tr").count() == len(berlin) > 0
    page.fill("#dev-filter", "")
    page.click("#dev-table th[data-key='confidence']")
    page.click("#dev-table th[data-key='confidence']")  # twice: most confident first
    shown = page.locator("#dev-table tbody tr td:nth-child(5)").all_inner_texts()
    assert shown == [f"{c:.3f}" for c in sorted((r["confidence"] for r in dev["rows"]), reverse=True)]


def test_edit_is_applied_and_saved_as_a_new_run(page, served, tmp_path):
    lab, directory = served[1], served[2]
    page.click("#tab-edit")
    page.select_option("#edit-run", "0")  # the shipped model: the tiny run knows too little to take an edit
    page.fill("#person", "Ralf Wadephul")
    page.fill("#place", "Paris")
    assert page.input_value("#edit-method") == "grace"  # attnlab edit's default
    page.click("#edit-apply")
    page.wait_for_selector("#edit-answer")
    edit = lab.edits[max(lab.edits)].report
    assert f'after: "{edit["new_answer"]}"' in page.inner_text("#edit-answer")
    assert f"{edit['others_changed']} of {edit['others']} other dev answers changed (grace" in page.inner_text("#edit-changed")
    page.fill("#save-name", "browser-edit")
    page.click("#edit-save")
    page.wait_for_selector("#save-status:has-text('saved')")
    assert (directory / "out" / "browser-edit" / "checkpoint.safetensors").is_file()
    assert (directory / "out" / "browser-edit" / "edits.json").is_file()
    screenshot(page, tmp_path, "edit")
