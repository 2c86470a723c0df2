"""`attnlab serve` in a real browser: headless Chromium (Debian's ``chromium`` package, driven by
Playwright, never a browser download of its own) opens the page, asks a question and sees the
answer with its copied span marked and its verdict in words, the attention heatmap of the
answer's rows, switches heads and layers, runs a causal trace; starts a training job of a tiny
fact set and sees its curve and its run join the list; compares two runs; scores, filters and
sorts the dev set; applies an edit, asks the edited copy and saves it; and sees bad input on
every form answered next to that form. A screenshot of each view is written to the test's
output directory (and to $ATTNLAB_SCREENSHOTS when set: the serve guide's pictures are made so).

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

from attnlab.data import factset  # noqa: E402
from attnlab.serve.app import create_app  # noqa: E402
from attnlab.serve.jobs import FactChoice, Jobs  # noqa: E402
from tests.serve_lab import make_lab, tiny  # noqa: E402
from tests.test_factsets import write_set  # noqa: E402

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
    lab.runs[0].name, lab.runs[1].name = "models/cpu", "tiny (4 steps)"  # short names for the pictures
    towns = FactChoice.of(factset.load(write_set(directory / "towns")))
    jobs = Jobs(lab.out_dir, [towns], lambda run, choice: lab.add_learned(run, choice.root), budget=(0.05, 15))
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    server = uvicorn.Server(uvicorn.Config(create_app(lab, rate=0, jobs=jobs), log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{sock.getsockname()[1]}/", lab, directory
    server.should_exit = True
    jobs.close()
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
    name = "serve" if name == "ask" else f"serve-{name}"  # serve.png: the guide's and README's first picture
    path = page.screenshot(path=str(tmp_path / f"{name}.png"), full_page=True) and tmp_path / f"{name}.png"
    if os.environ.get("ATTNLAB_SCREENSHOTS"):
        Path(os.environ["ATTNLAB_SCREENSHOTS"]).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(os.environ["ATTNLAB_SCREENSHOTS"]) / path.name)
    assert path.stat().st_size > 1000
    return path


def _image(page, selector: str) -> str:
    return page.eval_on_selector(selector, "c => c.toDataURL()")


def test_ask_shows_the_answer_its_copied_span_attention_by_head_and_a_causal_trace(page, served, tmp_path):
    lab = served[1]
    page.fill("#question", "Ralf Wadephul")
    page.click("#ask")
    page.wait_for_selector(".card .answer")
    expected = [run.model.ask(["Where was Ralf Wadephul born?"])[0] for run in lab.runs[:2]]
    cards = page.locator(".card")
    assert cards.count() == 2  # the runs side by side
    first = cards.nth(0)
    assert first.locator(".answer").inner_text() == expected[0].answer  # "I don't know" only with a rule
    assert first.locator(".relation").inner_text() == "relation: birthplace"
    assert first.locator(".in-words").inner_text().startswith("no abstention rule")
    assert f"confidence {expected[0].confidence:.3f}" in first.locator("details.rule").text_content()
    assert first.locator(".recalled").inner_text() == expected[0].recalled
    assert first.locator(".recalled mark").inner_text() == expected[0].answer  # the copied span
    assert "supported by corpus line" in first.locator(".evidence").inner_text()
    assert first.locator(".line mark").inner_text() == expected[0].answer  # highlighted in the corpus line

    page.wait_for_function("document.getElementById('attention').width > 100")
    best = lab.attention("Ralf Wadephul", 0)["heads"][0]  # shown first: the head most on the copied span
    assert page.get_attribute("#attention", "data-layer") == str(best["layer"])
    assert page.get_attribute("#attention", "data-head") == str(best["head"])
    assert page.inner_text("#head-summary li").startswith(f"layer {best['layer']} head {best['head']} puts")
    screenshot(page, tmp_path, "ask")
    shown = _image(page, "#attention")
    other = (best["head"] + 1) % lab.runs[0].model.config.n_head
    page.click(f"#heads button:nth-child({other + 1})")
    assert page.get_attribute("#attention", "data-head") == str(other)
    assert _image(page, "#attention") != shown  # another head, another map
    page.select_option("#layer", "1")
    assert page.get_attribute("#attention", "data-layer") == "1"

    page.fill("#samples", "1")
    page.click("#trace-button")
    page.wait_for_selector(".trace-map[data-kind='attention']")
    assert page.locator(".trace-map").count() == 3
    assert "clean" in page.inner_text("#trace-status") and "0 (white)" in page.inner_text("#trace-status")
    assert page.inner_text("#trace-sentence").startswith(("Restoring the", "No single state"))
    screenshot(page, tmp_path, "trace")


def test_bad_input_is_shown_next_to_every_form(page, served):
    page.fill("#question", "Where was 日本 born?")
    page.click("#ask")
    page.wait_for_selector("#ask-error:not([hidden])")
    assert page.inner_text("#ask-error").startswith("character '日'")  # plain words: no 'question:1:'
    assert page.locator(".card").count() == 0  # no earlier answer left beside the error
    page.fill("#question", " ")
    page.click("#ask")
    page.wait_for_selector("#ask-error:has-text('empty question')")

    page.click("#tab-learn")
    page.wait_for_selector("#learn-facts option", state="attached")
    page.fill("#learn-minutes", "99")
    page.click("#learn-start")
    page.wait_for_selector("#learn-error:has-text('the budget must be')")

    page.click("#tab-compare")
    page.locator(".run-choice").nth(1).uncheck()
    page.click("#compare-dev")
    page.wait_for_selector("#compare-error:has-text('choose two or more runs')")
    page.locator(".run-choice").nth(1).check()
    page.click("#compare-ask")
    page.wait_for_selector("#compare-error:has-text('empty question')")

    page.click("#tab-edit")
    page.fill("#person", " ")
    page.fill("#place", "Paris")
    page.click("#edit-apply")
    page.wait_for_selector("#edit-error:has-text('empty person')")


def test_a_training_job_is_watched_and_its_run_joins_the_list(page, served, tmp_path):
    lab = served[1]
    page.click("#tab-learn")
    page.wait_for_selector("#learn-facts option", state="attached")
    page.fill("#learn-minutes", "0.1")
    page.click("#learn-start")
    page.wait_for_selector(".job[data-state='running'], .job[data-state='done']")
    page.reload()  # the job lives on the server: a reloaded page finds it and keeps watching
    page.wait_for_selector(".run-choice")
    page.click("#tab-learn")
    page.wait_for_selector(".job[data-state='done'] circle.point")  # the curve, updated by polling
    job = page.locator(".job[data-state='done']").first
    assert job.locator("line.baseline").count() == 2  # one per relation of the towns set
    assert "most frequent answer" in job.locator(".job-result").inner_text()
    page.wait_for_function("document.querySelectorAll('.run-choice').length === %d" % len(lab.runs))
    assert "learn-towns" in page.inner_text("#runs")
    screenshot(page, tmp_path, "learn")
    page.locator(".run-choice").last.check()
    for box in page.locator(".run-choice").all()[:-1]:
        box.uncheck()
    page.click("#tab-ask")
    page.fill("#question", "Which river flows through Dunmoor?")
    page.click("#ask")
    page.wait_for_selector(".card .relation")
    assert page.inner_text(".card .relation") == "relation: river"
    page.locator(".run-choice").first.check()  # models/cpu beside it: a question of another set
    page.click("#ask")
    not_asked = page.locator(".card", has_text="not asked")
    not_asked.wait_for()
    assert page.locator("#answers .card").count() == 2 and "matches no relation" in not_asked.inner_text()
    assert page.locator("#answers .card .relation").inner_text() == "relation: river"  # learn-towns answered


def test_two_runs_are_compared(page, served, tmp_path):
    lab = served[1]
    page.click("#tab-compare")
    for i, box in enumerate(page.locator(".run-choice").all()):
        box.set_checked(i < 2)
    page.fill("#compare-question", "Ralf Wadephul")
    page.click("#compare-ask")
    page.wait_for_selector("#compare-answers .card")
    assert page.locator("#compare-answers .card").count() == 2
    page.click("#compare-dev")
    page.wait_for_selector("#compare-table tr td")
    expected = lab.compare([0, 1])["runs"][1]["paired"]
    verdict = page.locator("#compare-table tr").nth(2).locator("td.verdict").inner_text()
    assert verdict.startswith(expected["verdict"]) and f"{expected['wins']} won" in verdict
    screenshot(page, tmp_path, "compare")


def test_dev_view_scores_filters_and_sorts(page, served, tmp_path):
    lab = served[1]
    page.click("#tab-dev")
    page.click("#dev-load")
    page.wait_for_selector("#dev-table tbody tr")
    dev = lab.dev(0)
    assert page.locator("#dev-table tbody tr").count() == len(lab.dev_examples)
    assert dev["text"] in page.inner_text("#dev-accuracy")
    low, high = dev["ece_by_chance"]  # the ECE's yardstick beside it
    assert f"a calibrated confidence scores {low:.3f}-{high:.3f} on these answers" in page.inner_text("#dev-accuracy")
    assert page.locator("#calibration rect.bin").count() == sum(b["count"] > 0 for b in dev["bins"])
    screenshot(page, tmp_path, "dev")

    page.select_option("#dev-show", "right")
    assert page.locator("#dev-table tbody tr").count() == dev["correct"]
    page.select_option("#dev-show", "all")
    page.fill("#dev-filter", "Berlin")
    berlin = [r for r in dev["rows"] if "berlin" in f"{r['question']} {r['gold']} {r['answer']}".lower()]
    assert page.locator("#dev-table tbody tr").count() == len(berlin) > 0
    page.fill("#dev-filter", "")
    page.select_option("#dev-relation", "birthplace")
    assert page.locator("#dev-table tbody tr").count() == len(lab.dev_examples)
    page.click("#dev-table th[data-key='confidence']")
    page.click("#dev-table th[data-key='confidence']")  # twice: most confident first
    shown = page.locator("#dev-table tbody tr td:nth-child(6)").all_inner_texts()
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
    page.fill("#save-name", "../escape")
    page.click("#edit-save")
    page.wait_for_selector("#save-error:has-text('must be 1-64 letters')")
    assert (directory / "out" / "browser-edit" / "checkpoint.safetensors").is_file()
    assert (directory / "out" / "browser-edit" / "edits.json").is_file()
    screenshot(page, tmp_path, "edit")
    page.click("#edit-ask")  # the edited copy, asked at once in the Ask tab
    page.wait_for_selector(".card .answer")
    assert page.locator(".card").count() == 1 and "edited" in page.inner_text(".card h3")
    assert page.inner_text(".card .answer") == edit["new_answer"]
