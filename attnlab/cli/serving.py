"""`attnlab serve RUN [RUN ...]`: the lab as a local web page (attnlab/serve/), on FastAPI and
uvicorn (the optional extra ``serve``). This module loads the runs, fits their abstention rules
(trust.py, as `ask` does), binds the socket, prints the URL and serves until Ctrl-C."""

from __future__ import annotations

import argparse
import ipaddress
import socket
import sys
from pathlib import Path

from ..core import bounds, logs, paths
from . import flags, trust

LOOPBACK = "127.0.0.1"
PORT = bounds.Bound(int, 0, 65535, name="port")
ANSWER_CACHE = 4096  # serve/lab.py's ANSWER_CACHE (not imported: it would load torch for --help)


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def _bound_socket(host: str, port: int) -> socket.socket:
    """The listening socket, bound before anything is served, so a port in use is a one-line
    error and port 0 (any free port) has a real number to print."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(2048)  # connections wait from now on, so the URL works as soon as it is printed
    except OSError as e:
        sock.close()
        raise ValueError(f"--host {host} --port {port}: cannot listen there ({e.strerror or e})") from None
    return sock


def build_lab(args: argparse.Namespace):
    """The runs (read before anything is served), the data files and the abstention rules."""
    from ..api import load
    from ..data.datasets import read_corpus, read_questions
    from ..data.relations import COURSE
    from ..facts.correction import training_answers
    from ..serve.lab import Lab, Run

    trust.check_abstain_flags(args)
    docs = read_corpus(paths.input_file(args.corpus, "--corpus")).split("\n")
    dev = read_questions(paths.input_file(args.eval_file, "--eval-file"), labelled=True)
    facts = getattr(args, "fact_set", None)
    trained = training_answers(args.train_file and paths.input_file(args.train_file, "--train-file"),
                               facts.schema if facts else COURSE)  # the edit panel's key statistics
    trust.check_abstain_files(args)
    out = paths.output_dir(args.out_dir, "--out-dir")
    log = lambda message: logs.note(message, stderr=True)  # noqa: E731
    runs = []
    for n, path in enumerate(args.runs):
        _say(f"loading {path}")
        # --facts names the first run's set (flags.apply_fact_set reads the first run's record)
        model = load(path, device=args.device, **(flags.load_facts(args) if n == 0 else {}))
        own = None if n == 0 or _same_set(model.fact_set, facts) else _served_facts(model.fact_set)
        run_args = args if own is None else flags.with_fact_set(args, model.fact_set)
        runs.append(Run(path, model, trust.rule_from_args(run_args, model, path, log), facts=own))
    return Lab(runs, docs, dev, out, trained, stat_lines=args.stat_lines, answer_cache=args.answer_cache)


def _same_set(a, b) -> bool:
    """Whether two fact sets (None: the course's files) are the same set."""
    return a is None and b is None or a is not None and b is not None and a.digest() == b.digest()


def _served_facts(facts):
    """The page's facts of a run whose set is not the lab's: its own, or the course's."""
    from ..serve.lab import Facts

    return Facts.load(facts.root if facts is not None else flags._fact_set_dir("data"))


def _say(message: str) -> None:
    """What the server is doing while it starts (stderr: stdout's first line is the URL)."""
    print(f"attnlab serve: {message}", file=sys.stderr, flush=True)


def fact_set_dirs(args: argparse.Namespace) -> list[str]:
    """The fact sets a job may learn: the birthplace set, the shipped example, and each
    --learn-facts folder (the page chooses among these by number, never by path)."""
    example = Path(__file__).resolve().parents[2] / "examples" / "facts" / "islands"
    found = [flags._fact_set_dir("data"), *([example] if example.is_dir() else []), *(args.learn_facts or [])]
    return list(dict.fromkeys(str(Path(d).resolve()) for d in found))


def fact_choices(args: argparse.Namespace) -> list:
    """The offered fact sets, each checked as `attnlab learn` checks it (before any run loads)."""
    from ..data import factset
    from ..serve.jobs import FactChoice

    return [FactChoice.of(factset.load(d)) for d in fact_set_dirs(args)]


def build_jobs(args: argparse.Namespace, lab, choices: list):
    from ..serve.jobs import Jobs

    jobs = Jobs(args.out_dir, choices, lambda run, choice: lab.add_learned(run, choice.root),
                enabled=not args.no_train)
    for run, facts_dir in jobs.learned_runs():  # the runs earlier jobs of this folder learned
        _say(f"loading {run} (learned by an earlier job)")
        lab.add_learned(run, facts_dir)
    return jobs


def cmd_serve(args: argparse.Namespace) -> int:
    for run in args.runs:  # a typo is refused at once, not after the slow imports
        if not Path(run).exists():
            raise ValueError(f"{run}: no such run directory or checkpoint")
    try:
        import uvicorn
        import fastapi  # noqa: F401  (the extra's other half: refused here, not on first request)
    except ImportError as e:
        raise ValueError(f"attnlab serve needs the serve extra ({e.name} is missing): "
                         "pip install -e '.[serve]'") from None
    if not _is_loopback(args.host):
        print(f"warning: --host {args.host}: anyone who can reach this machine can use the lab "
              "(no login); the default 127.0.0.1 keeps it to this machine", file=sys.stderr)
    sock = _bound_socket(args.host, args.port)  # a port in use is refused before the slow part
    jobs = lab = None
    try:
        _say("reading PyTorch and the lab")
        from ..core import cpu_settings
        from ..serve.app import create_app

        choices = fact_choices(args)
        lab = build_lab(args)
        lab.warm_traces()  # the trace worker imports PyTorch while the server starts, not at the first trace
        jobs = build_jobs(args, lab, choices)
        app = create_app(lab, rate=args.rate_limit, jobs=jobs)
        cpu_settings.watch_load()  # each batch's threads follow what other processes leave free
        port = sock.getsockname()[1]
        shown = f"[{args.host}]" if ":" in args.host else args.host
        print(f"attnlab lab at http://{shown}:{port}/ (Ctrl-C stops it)", flush=True)
        uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])
    except KeyboardInterrupt:  # uvicorn shuts down, then hands the Ctrl-C back
        pass
    finally:
        sock.close()
        if jobs is not None:
            jobs.close()
        if lab is not None:
            lab.close()
    print("stopped", flush=True)
    return 0


def register(command) -> None:
    p = command("serve", "the lab as a local web page: ask, see why (evidence, attention, causal "
                "trace), score the dev set, edit a copy of the model", cmd_serve)
    p.add_argument("runs", nargs="+", metavar="RUN",
                   help="run directories or checkpoints; several are compared side by side (only these are read)")
    p.add_argument("--host", default=LOOPBACK,
                   help="address to listen on; anything but a loopback address is reachable by others (warned)")
    p.add_argument("--port", type=PORT.argtype(), default=8000, help="port (0: any free port)")
    p.add_argument("--rate-limit", type=bounds.non_negative_int, default=120,
                   help="requests a minute allowed from one client address (0: no limit)")
    flags.out_dir(p, "runs/serve", "where edited models are saved, each as a new run directory "
                  "(nothing is written elsewhere)")
    flags.eval_file(p, "question<TAB>answer file of the dev-set view and of the answers an edit changes")
    flags.corpus(p, "corpus for the evidence and an edit's key statistics")
    flags.train_file(p, "question<TAB>answer file the runs were finetuned on (an edit's key statistics; '' for none)")
    p.add_argument("--stat-lines", type=bounds.non_negative_int, default=2000,
                   help="lines for an edit's key statistics, as in `attnlab edit` (0 = all)")
    p.add_argument("--answer-cache", type=bounds.non_negative_int, default=ANSWER_CACHE,
                   help="answers kept to give again at once when a run is asked the same thing "
                        "(0: every answer computed)")
    p.add_argument("--no-train", action="store_true",
                   help="no training jobs from the page (for a shared class server)")
    p.add_argument("--learn-facts", action="append", metavar="DIR", default=[],
                   help="a fact-set folder the page may train on, besides data/ and examples/facts/islands "
                        "(default: none; repeatable; the page chooses among these, never a path)")
    flags.device(p)
    trust.add_abstain_flags(p)
