"""`attnlab serve` as a program: it prints the URL, serves, stops cleanly on Ctrl-C, binds
127.0.0.1 unless told otherwise (and warns when told), and refuses bad arguments on one line."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="the serve extra (pip install -e '.[serve]') is not installed")

from attnlab import cli  # noqa: E402
from tests.conftest import REPO  # noqa: E402
from tests.serve_lab import SHIPPED, small_dev  # noqa: E402


def _start(tmp_path, *flags: str, program: tuple[str, ...] = (sys.executable, "-m", "attnlab")
           ) -> tuple[subprocess.Popen, str]:
    """The program serving models/cpu on a free port; returns it and its printed URL."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([*program, "serve", str(SHIPPED), "--port", "0",
                             "--abstain", "off", "--eval-file", str(small_dev(tmp_path)),
                             "--out-dir", str(tmp_path / "out"), *flags],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    if "http://" not in line:
        proc.kill()
        pytest.fail(f"no URL printed: {line!r} {proc.stderr.read()}")
    return proc, line.split()[3]


def _ready(url: str) -> None:
    """Wait until the server answers (the URL is printed as the socket listens; a Ctrl-C that
    arrives while the app is still starting up is a different test's business)."""
    import time
    import urllib.request

    local = url.replace("0.0.0.0", "127.0.0.1")
    for _ in range(100):
        try:
            urllib.request.urlopen(local, timeout=5).read()
            return
        except OSError:
            time.sleep(0.2)


def _stop(proc: subprocess.Popen) -> tuple[int, str, str]:
    proc.send_signal(signal.SIGINT)  # what Ctrl-C sends
    out, err = proc.communicate(timeout=30)
    return proc.returncode, out, err


def _ask(url: str, question: str) -> dict:
    request = urllib.request.Request(url + "api/ask", data=json.dumps({"question": question}).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.load(response)["answers"][0]


def test_serve_prints_the_url_answers_and_stops_on_ctrl_c(tmp_path):
    proc, url = _start(tmp_path)
    try:
        assert url.startswith("http://127.0.0.1:")
        answer = _ask(url, "Ralf Wadephul")
        assert answer["name"] == str(SHIPPED) and answer["answer"] and answer["cached"] is False
        again = _ask(url, "Where was Ralf Wadephul born?")  # the answer cache is on by default
        assert again["cached"] is True and (again["answer"], again["confidence"]) == (answer["answer"], answer["confidence"])
    finally:
        code, out, err = _stop(proc)
    assert code == 0, err
    assert out.strip().endswith("stopped") and "Traceback" not in err
    assert "warning" not in err  # 127.0.0.1: nothing to warn about


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (Linux /proc)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="no /proc on this OS: a process's children are not listed")
def test_serve_traces_in_its_worker_process_and_stops_it_with_itself(tmp_path):
    """The program as users start it (its console script, else python -m): a causal trace is
    computed in a worker process of its own, and Ctrl-C stops the worker with the server."""
    import time

    script = Path(sys.executable).parent / "attnlab"
    proc, url = _start(tmp_path, program=(str(script),) if script.exists() else (sys.executable, "-m", "attnlab"))
    try:
        request = urllib.request.Request(url + "api/trace", data=json.dumps({"question": "Ralf Wadephul", "samples": 1}).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=300) as response:
            trace = json.load(response)
        assert trace["answer"] == _ask(url, "Ralf Wadephul")["answer"] and trace["recovered"]["residual"]
        workers = _children(proc.pid)
        assert workers  # the trace worker (started as the server starts)
    finally:
        code, out, err = _stop(proc)
    assert code == 0 and "Traceback" not in err, err
    for _ in range(100):
        if not any(Path(f"/proc/{w}").exists() for w in workers):
            break
        time.sleep(0.1)
    assert not any(Path(f"/proc/{w}").exists() for w in workers)


def test_serve_warns_when_it_listens_beyond_this_machine(tmp_path):
    proc, url = _start(tmp_path, "--host", "0.0.0.0")
    _ready(url)
    code, _, err = _stop(proc)
    assert url.startswith("http://0.0.0.0:")
    assert "warning: --host 0.0.0.0: anyone who can reach this machine can use the lab" in err
    assert code == 0


def test_serve_refuses_a_port_in_use_on_one_line(capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert cli.main(["serve", str(SHIPPED), "--port", str(port)]) == 2
    err = capsys.readouterr().err
    assert f"--port {port}: cannot listen there" in err and len(err.strip().splitlines()) == 1


def test_serve_refuses_a_missing_run_on_one_line(tmp_path, capsys):
    assert cli.main(["serve", str(tmp_path / "nope"), "--port", "0", "--abstain", "off",
                     "--eval-file", str(small_dev(tmp_path))]) == 2
    err = capsys.readouterr().err
    assert err.startswith("attnlab serve: error:") and "nope" in err and len(err.strip().splitlines()) == 1


def test_serve_without_its_extra_says_how_to_install_it(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "uvicorn", None)  # import uvicorn now fails
    assert cli.main(["serve", str(SHIPPED)]) == 2
    assert "pip install -e '.[serve]'" in capsys.readouterr().err


def test_serve_says_what_it_does_while_it_starts_and_no_train_and_no_cache_are_kept(tmp_path):
    proc, url = _start(tmp_path, "--no-train", "--answer-cache", "0")
    try:
        _ready(url)
        asked = [_ask(url, "Ralf Wadephul")["cached"] for _ in range(2)]  # no cache: both computed
        with urllib.request.urlopen(url + "api/jobs", timeout=60) as response:
            jobs = json.load(response)
        request = urllib.request.Request(url + "api/jobs", data=json.dumps({"fact_set": 0, "minutes": 1}).encode(),
                                         headers={"Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=60)
    finally:
        code, out, err = _stop(proc)
    assert asked == [False, False]
    assert jobs["enabled"] is False and "birthplace" in [f["name"] for f in jobs["fact_sets"]]
    assert refused.value.code == 403 and "--no-train" in json.load(refused.value)["error"]
    said = [line for line in err.splitlines() if line.startswith("attnlab serve: ")]
    assert said[0] == "attnlab serve: reading PyTorch and the lab" and f"attnlab serve: loading {SHIPPED}" in said
    assert not any((tmp_path / "out").glob("learn-*"))


def test_serve_refuses_a_fact_set_folder_it_cannot_read_before_loading_runs(tmp_path, capsys):
    assert cli.main(["serve", str(SHIPPED), "--port", "0", "--abstain", "off", "--eval-file",
                     str(small_dev(tmp_path)), "--learn-facts", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "nope" in err[-1] and "error" in err[-1]
    assert not any(line.startswith("attnlab serve: loading") for line in err)  # refused before the runs load


def test_the_answer_cache_default_is_the_labs():
    from attnlab.cli import serving
    from attnlab.serve import lab

    assert serving.ANSWER_CACHE == lab.ANSWER_CACHE
    assert cli.build_parser().parse_args(["serve", str(SHIPPED)]).answer_cache == lab.ANSWER_CACHE
