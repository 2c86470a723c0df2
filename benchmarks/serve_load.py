"""Load test of `attnlab serve`: CLIENTS concurrent clients asking dev questions for SECONDS
against the real program on 127.0.0.1, in three phases: asks alone, asks beside a client running
causal traces back to back, and asks while a training job started from the page runs.

The server is started as users start it (``python -m attnlab serve RUN --port 0``, default
abstention rule fitted at start-up), except ``--rate-limit 0``: every client here comes from
127.0.0.1, and the default limit (120 requests a minute per address) would otherwise refuse most
of them, which is what it is for. Each client keeps one connection open and posts
``/api/ask`` with the next dev question as soon as its previous answer arrives. Reported:
requests per second, p50/p99 latency of an ask, errors (any status but 200, or a failed
connection) and the share of answers the server gave from its answer cache (asked before, not
computed again). The server runs one model computation at a time (attnlab/serve/lab.py's lock)
and answers the questions that waited meanwhile in one batch. ``--no-cache`` starts it with
``--answer-cache 0``: every answer computed, the figure of compute alone.

Run: .venv/bin/python benchmarks/serve_load.py [--clients 30] [--seconds 60] [--run models/cpu] [--phases asks,trace,job] [--no-cache]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import DATA, REPO, cpu_name, report, table  # noqa: E402

from attnlab.data.datasets import read_qa  # noqa: E402


def start_server(run: str, threads: int, cache: bool = True) -> tuple[subprocess.Popen, str, int]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("OMP_NUM_THREADS", None)
    if threads:  # else as users start it: the server picks each batch's threads by the others' load
        env["OMP_NUM_THREADS"] = str(threads)
    proc = subprocess.Popen([sys.executable, "-m", "attnlab", "serve", run, "--port", "0", "--rate-limit", "0",
                             "--out-dir", str(REPO / "runs" / "serve-load"), *([] if cache else ["--answer-cache", "0"])],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    if "http://" not in line:
        proc.kill()
        raise SystemExit(f"the server printed no URL: {line!r}")
    host, port = line.split()[3].removeprefix("http://").rstrip("/").rsplit(":", 1)
    return proc, host, int(port)


def client(host: str, port: int, questions: list[str], start: int, until: float,
           latencies: list[float], errors: list[str], cached: list[bool]) -> None:
    conn = http.client.HTTPConnection(host, port, timeout=120)
    i = start
    while time.monotonic() < until:
        body = json.dumps({"question": questions[i % len(questions)]})
        began = time.perf_counter()
        try:
            conn.request("POST", "/api/ask", body, {"Content-Type": "application/json"})
            response = conn.getresponse()
            payload = response.read()
            if response.status != 200:
                errors.append(f"{response.status} {payload[:80]!r}")
            else:
                latencies.append(time.perf_counter() - began)
                cached.append(all(a["cached"] for a in json.loads(payload)["answers"]))
        except OSError as e:
            errors.append(f"{type(e).__name__}: {e}")
            conn.close()
            conn = http.client.HTTPConnection(host, port, timeout=120)
        i += 1
    conn.close()


def tracer(host: str, port: int, questions: list[str], samples: int, until: float, latencies: list[float],
           errors: list[str]) -> None:
    """A client that runs causal traces back to back (the page's default samples), as a
    student clicking Causal trace would."""
    conn = http.client.HTTPConnection(host, port, timeout=600)
    i = 0
    while time.monotonic() < until:
        began = time.perf_counter()
        conn.request("POST", "/api/trace", json.dumps({"question": questions[i % len(questions)], "samples": samples}),
                     {"Content-Type": "application/json"})
        response = conn.getresponse()
        payload = response.read()
        (latencies if response.status == 200 else errors).append(
            time.perf_counter() - began if response.status == 200 else f"{response.status} {payload[:80]!r}")
        i += 1
    conn.close()


def post(host: str, port: int, path: str, body: dict) -> dict:
    conn = http.client.HTTPConnection(host, port, timeout=120)
    conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    response = conn.getresponse()
    data = json.loads(response.read())
    conn.close()
    if response.status != 200:
        raise SystemExit(f"{path}: {response.status} {data}")
    return data


def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds a process has used so far (Linux /proc; 0 elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def phase(host: str, port: int, questions: list[str], args, with_trace: bool, server: int) -> dict:
    """CLIENTS askers for SECONDS (and a tracer beside them when ``with_trace``), and the cores'
    worth of CPU the server and the clients' process each used meanwhile: on a small machine
    the clients take a share of the cores the server would answer with."""
    latencies: list[float] = []
    errors: list[str] = []
    traces: list[float] = []
    cached: list[bool] = []
    began = time.monotonic()
    cpu_before = cpu_seconds(server), cpu_seconds(os.getpid())
    until = began + args.seconds
    workers = [threading.Thread(target=client, args=(host, port, questions, k * 25, until, latencies, errors, cached))
               for k in range(args.clients)]
    if with_trace:
        workers.append(threading.Thread(target=tracer, args=(host, port, questions, args.trace_samples, until,
                                                             traces, errors)))
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    elapsed = time.monotonic() - began
    server_cpu, client_cpu = (cpu_seconds(p) - b for p, b in zip((server, os.getpid()), cpu_before))
    return {"elapsed": elapsed, "latencies": latencies, "errors": errors, "traces": traces,
            "cached": cached, "server_cores": server_cpu / elapsed, "client_cores": client_cpu / elapsed}


def row(name: str, clients: int, result: dict) -> list:
    ms = sorted(x * 1000 for x in result["latencies"])
    p99 = ms[min(len(ms) - 1, int(0.99 * len(ms)))] if ms else float("nan")
    n, elapsed = len(ms), result["elapsed"]
    traced = f"{len(result['traces'])}" if result["traces"] else "-"
    hits = f"{100 * sum(result['cached']) / len(result['cached']):.0f}%" if result["cached"] else "-"
    return [name, clients, f"{elapsed:.1f}", n, f"{n / elapsed:.1f}", f"{statistics.median(ms):.0f}" if ms else "-",
            f"{p99:.0f}", len(result["errors"]), hits, traced, f"{result['server_cores']:.2f}",
            f"{result['client_cores']:.2f}"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--run", default="models/cpu")
    parser.add_argument("--clients", type=int, default=30)
    parser.add_argument("--seconds", type=float, default=60.0, help="each phase's length")
    parser.add_argument("--server-threads", type=int, default=0,
                        help="OMP_NUM_THREADS of the server (0, the default: unset, as users start it)")
    parser.add_argument("--trace-samples", type=int, default=10, help="noise samples of each trace (the page's default)")
    parser.add_argument("--job-facts", type=int, default=1,
                        help="the fact set (its number on the page) the training phase learns (1: examples/facts/islands)")
    parser.add_argument("--phases", default="asks,trace,job", help="which phases, comma-separated")
    parser.add_argument("--no-cache", action="store_true",
                        help="start the server with --answer-cache 0: every answer computed (compute speed alone)")
    parser.add_argument("--no-write", action="store_true", help="print only; leave BENCHMARKS.md alone")
    args = parser.parse_args()

    questions = [e.question for e in read_qa(DATA / "birth_dev.tsv")]
    proc, host, port = start_server(args.run, args.server_threads, cache=not args.no_cache)
    rows, notes = [], []
    load_before = os.getloadavg()[0]
    try:
        for name in args.phases.split(","):
            job = None
            if name == "job":  # a training job of the budget the phase lasts (at least a minute)
                job = post(host, port, "/api/jobs", {"fact_set": args.job_facts,
                                                     "minutes": max(1.0, min(15.0, args.seconds / 60 + 0.5))})
            result = phase(host, port, questions, args, with_trace=name == "trace", server=proc.pid)
            if job is not None:
                post(host, port, f"/api/jobs/{job['id']}/cancel", {})
                notes.append(f"- job phase: `{job['fact_set']}` learned in a {job['minutes']:g}-minute job "
                             f"started just before the askers and cancelled after them (its partial run in {job['run_dir']})")
            if result["errors"]:
                notes.append(f"- {name}: first error {result['errors'][0]}")
            rows.append(row({"asks": "asks alone", "trace": "asks + a trace client",
                              "job": "asks during a training job"}[name], args.clients, result))
        load_after = os.getloadavg()[0]
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)
    text = table(["phase", "clients", "seconds", "answers", "requests/s", "p50 ms", "p99 ms", "errors", "cached",
                  "traces", "server cores", "client cores"], rows)
    text += "\n\n" + "\n".join([
        f"- `attnlab serve {args.run}` on 127.0.0.1 (a separate process, "
        f"{f'OMP_NUM_THREADS={args.server_threads}' if args.server_threads else 'threads chosen by the load, as users start it'}, "
        f"--rate-limit 0, the default abstention rule, {'no answer cache' if args.no_cache else 'its answer cache on'}); "
        "each client posts /api/ask with the next of the "
        f"{len(questions)} dev questions as soon as its last answer arrives, over one kept-open connection",
        "- asks: one model computation at a time (the lab's lock), questions that arrive meanwhile answered "
        f"together in one batch; traces ({args.trace_samples} noise samples each, back to back) run in the "
        "server's trace worker, a process of lower priority, so they share the CPU with asks but never hold them back",
        f"- machine load (1-minute load average) {load_before:.1f} before, {load_after:.1f} at the end, on "
        f"{os.cpu_count()} CPU cores ({cpu_name()}): other processes share them, and the numbers move with that",
        "- cached: the share of answers given from the server's answer cache (a question its run was asked "
        "before, in any earlier phase too); the clients start 25 questions apart in the dev set, so after "
        "about 25 asks each one asks what another asked before. Only a --no-cache run is compute speed alone",
        "- server cores, client cores: the CPU time the server process and the clients' process used over the "
        "phase, in cores' worth (a training job's process and the trace worker are in neither). The clients run on the same machine "
        "(loopback): what they use is taken from the cores the server answers with, where a class's browsers "
        "run on machines of their own",
        f"- server stopped by SIGINT (Ctrl-C): exit code {proc.returncode}",
        *notes,
    ])
    if args.no_cache:  # its own section: a run with the cache does not overwrite compute speed alone
        report("serve_load_nocache", text, write=not args.no_write,
               title="Serving load, every answer computed (benchmarks/serve_load.py --no-cache)")
    else:
        report("serve_load", text, write=not args.no_write, title="Serving load (benchmarks/serve_load.py)")


if __name__ == "__main__":
    main()
