"""Training jobs of `attnlab serve` (attnlab/serve/jobs.py, worker.py): a fact set learned from
the page in its own process, its progress on disk, the run added to the lab when done; one job
at a time, a queue, cancel, a restarted server reporting the job it interrupted, and a job never
writing over a run."""

from __future__ import annotations

import json
import os
import time

import pytest

pytest.importorskip("fastapi", reason="the serve extra (pip install -e '.[serve]') is not installed")
from fastapi.testclient import TestClient  # noqa: E402

from attnlab.data import factset  # noqa: E402
from attnlab.serve.app import create_app  # noqa: E402
from attnlab.serve.jobs import MAX_WAITING, FactChoice, Jobs  # noqa: E402
from attnlab.serve.worker import Progress, Watcher  # noqa: E402
from tests.serve_lab import make_lab, tiny  # noqa: E402
from tests.test_factsets import write_set  # noqa: E402

QUICK = (0.05, 15.0)  # budgets a test may give: a tenth of a minute learns the tiny set in seconds


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    return tiny(tmp_path_factory.mktemp("jobs-tiny"))


@pytest.fixture
def towns(tmp_path):
    return FactChoice.of(factset.load(write_set(tmp_path / "towns")))


@pytest.fixture
def lab(tmp_path, tiny_run):
    return make_lab(tmp_path, tiny_run)


def _jobs(lab, towns, **kw) -> Jobs:
    return Jobs(lab.out_dir, [towns], lambda run, choice: lab.add_learned(run, choice.root), watch=False,
                budget=QUICK, **kw)


def _until(jobs: Jobs, job_id: int, states: tuple[str, ...], seconds: float = 240) -> dict:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        jobs.poll()
        job = next(j for j in jobs.describe()["jobs"] if j["id"] == job_id)
        if job["state"] in states:
            return job
        time.sleep(0.5)
    raise AssertionError(f"job {job_id} still {job['state']} after {seconds} s")


def test_a_job_learns_a_fact_set_and_its_run_joins_the_lab(lab, towns):
    jobs = _jobs(lab, towns)
    client = TestClient(create_app(lab, rate=0, jobs=jobs))
    listed = client.get("/api/jobs").json()
    assert listed["enabled"] and listed["fact_sets"][0]["relations"] == ["country", "river"]
    started = client.post("/api/jobs", json={"fact_set": 0, "minutes": 0.1})
    assert started.status_code == 200, started.json()
    job = _until(jobs, started.json()["id"], ("done", "failed"))
    assert job["state"] == "done", job
    run = lab.out_dir / "learn-towns"  # where `attnlab learn` names it, inside the serve folder
    assert job["run_dir"] == str(run)
    results = json.loads((run / "results.json").read_text())
    progress = job["progress"]
    final = progress["points"][-1]
    assert final["stage"] == "final" and final["relations"] == {n: r["percent"] for n, r in results["relations"].items()}
    assert progress["baseline"] == {n: r["baseline"]["percent"] for n, r in results["relations"].items()}
    assert progress["overall"] == results["overall"]
    runs = client.get("/api/runs").json()["runs"]
    assert runs[-1]["name"] == str(run) and runs[-1]["relations"] == ["country", "river"]
    a = client.post("/api/ask", json={"question": "which river flows through dunmoor", "runs": [runs[-1]["id"]]}).json()
    assert a["answers"][0]["relation"] == "river" and a["question"] == "Which river flows through Dunmoor?"
    other = client.post("/api/compare", json={"runs": [1, runs[-1]["id"]]}).json()["runs"][1]
    assert other["paired"]["verdict"].startswith("not compared: the two runs have different dev questions")
    assert set(other["relations"]) == {"country", "river"}
    # a point of the curve: each checkpoint asked the dev sample, at the minute it was written
    watched = Progress(lab.out_dir / "watch", run, 0.1)
    Watcher(watched, factset.load(towns.root), run).look()
    points = {p["stage"]: p for p in watched.state["points"]}
    assert set(points) == {"pretrained", "finetuned"}
    assert points["finetuned"]["relations"] == final["relations"]  # the towns dev set is smaller than a sample
    written = (run / "checkpoint.safetensors").stat().st_mtime
    assert points["finetuned"]["minutes"] == round(max(0.0, written - watched.began) / 60, 3)
    # the state is on disk: a new server over the same folder lists the job and finds its run
    again = _jobs(lab, towns)
    assert [j["state"] for j in again.jobs] == ["done"] and again.learned_runs() == [(run, towns.root)]


def test_a_job_never_writes_over_a_run(lab, towns):
    taken = lab.out_dir / "learn-towns"
    taken.mkdir(parents=True)
    (taken / "checkpoint.safetensors").write_bytes(b"someone's run")
    jobs = _jobs(lab, towns)
    jobs._launch = lambda job: job.update(state="running", run_dir=str(jobs._new_run_dir("towns")))
    job = jobs.start(0, 1)
    assert job["run_dir"] == str(lab.out_dir / "learn-towns-2")
    assert (taken / "checkpoint.safetensors").read_bytes() == b"someone's run"


@pytest.mark.parametrize("body, status, words", [
    ({"fact_set": 0, "minutes": 0.01}, 400, "the budget must be 0.05 to 15 minutes"),
    ({"fact_set": 0, "minutes": 16}, 400, "the budget must be"),
    ({"fact_set": 3, "minutes": 1}, 404, "no fact set 3"),
    ({"fact_set": "x", "minutes": 1}, 422, "malformed request"),
    ({"minutes": 1}, 422, "fact_set: Field required"),
])
def test_bad_job_requests_are_refused_on_one_line(lab, towns, body, status, words):
    client = TestClient(create_app(lab, rate=0, jobs=_jobs(lab, towns)))
    got = client.post("/api/jobs", json=body)
    assert got.status_code == status and words in got.json()["error"]
    assert not (lab.out_dir / "jobs").exists()


def test_jobs_wait_their_turn_and_the_queue_is_bounded(lab, towns):
    jobs = _jobs(lab, towns)
    jobs._launch = lambda job: job.update(state="running", run_dir="(not started in this test)")
    first = jobs.start(0, 1)
    waiting = [jobs.start(0, 1) for _ in range(MAX_WAITING)]
    assert first["state"] == "running" and all(j["state"] == "waiting" for j in waiting)
    client = TestClient(create_app(lab, rate=0, jobs=jobs))
    full = client.post("/api/jobs", json={"fact_set": 0, "minutes": 1})
    assert full.status_code == 429 and "already waiting" in full.json()["error"]
    assert client.post(f"/api/jobs/{waiting[0]['id']}/cancel").json()["state"] == "cancelled"
    assert client.post(f"/api/jobs/{waiting[0]['id']}/cancel").status_code == 409
    assert client.post("/api/jobs/99/cancel").status_code == 404


def test_a_restarted_server_reports_the_job_it_interrupted(lab, towns):
    jobs = _jobs(lab, towns)
    # its process still there (this test's own number stands for it): said, never signalled
    jobs._launch = lambda job: job.update(state="running", run_dir=str(lab.out_dir / "learn-towns"), pid=os.getpid())
    jobs.start(0, 1)
    jobs.start(0, 2)
    again = _jobs(lab, towns, enabled=False)  # a new server, with training off: nothing starts
    assert [j["state"] for j in again.jobs] == ["interrupted", "waiting"]
    assert "the server stopped while it ran" in again.jobs[0]["error"]
    assert f"its process {os.getpid()} may still be running" in again.jobs[0]["error"]
    assert json.loads((lab.out_dir / "jobs.json").read_text())["jobs"][0]["state"] == "interrupted"
    client = TestClient(create_app(lab, rate=0, jobs=again))
    refused = client.post("/api/jobs", json={"fact_set": 0, "minutes": 1})
    assert refused.status_code == 403 and "--no-train" in refused.json()["error"]


def test_a_jobs_file_the_lab_did_not_write_is_refused(lab, towns):
    lab.out_dir.mkdir(parents=True)
    (lab.out_dir / "jobs.json").write_text("{not json")
    with pytest.raises(ValueError, match="not a jobs file the lab wrote"):
        _jobs(lab, towns)


def test_a_running_job_is_cancelled(lab, towns):
    jobs = _jobs(lab, towns)
    job = jobs.start(0, 3)
    deadline = time.monotonic() + 120
    while jobs.progress(job) is None and time.monotonic() < deadline:
        time.sleep(0.2)
    process = jobs.process
    got = jobs.cancel(job["id"])
    assert got["state"] == "cancelled" and process.poll() is not None
    assert not (lab.out_dir / "learn-towns" / "results.json").exists()
    assert len(lab.runs) == 2  # nothing joined the lab


def test_without_jobs_the_page_says_training_is_off(lab):
    client = TestClient(create_app(lab, rate=0))
    assert client.get("/api/jobs").json()["enabled"] is False
    assert client.post("/api/jobs", json={"fact_set": 0, "minutes": 1}).status_code == 403


def test_a_cancelled_job_is_resumed_in_its_own_run_directory(lab, towns):
    jobs = _jobs(lab, towns)
    first = jobs.start(0, 0.1)
    deadline = time.monotonic() + 120
    while jobs.progress(first) is None and time.monotonic() < deadline:
        time.sleep(0.05)
    jobs.cancel(first["id"])
    assert first["state"] == "cancelled", first
    client = TestClient(create_app(lab, rate=0, jobs=jobs))
    resumed = client.post(f"/api/jobs/{first['id']}/resume").json()
    assert resumed["resumes"] == first["id"] and resumed["state"] == "running"
    again = client.post(f"/api/jobs/{first['id']}/resume")
    assert again.status_code == 409 and "resumed already" in again.json()["error"]
    done = _until(jobs, resumed["id"], ("done", "failed"))
    assert done["state"] == "done", done
    assert done["run_dir"] == first["run_dir"] == str(lab.out_dir / "learn-towns")  # its own, no new one
    assert sorted(p.name for p in lab.out_dir.glob("learn-*")) == ["learn-towns"]
    assert lab.runs[-1].name == first["run_dir"]
    finished = client.post(f"/api/jobs/{done['id']}/resume")
    assert finished.status_code == 409 and "only an interrupted or cancelled job" in finished.json()["error"]
