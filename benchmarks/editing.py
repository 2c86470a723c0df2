"""Editing birth places (issue 26): efficacy, generalisation, locality and sequential editing of
`attnlab edit --method grace` (gated codebook entries, the default), `--method rome` (rank-one)
and `--method finetune` (plain finetuning of rome's MLP output matrix on the one question, FT-L),
on the shipped model.

``--n`` random dev people (seeded) each get a random new place drawn from the training file's
places (never their gold place nor the model's current answer).

Single edits (default): each edit starts from the original model and is measured as
`attnlab edit` measures it:

- efficacy: the edited model's answer to "Where was NAME born?" is the new place (an edit that
  fails, e.g. a gated edit refused with EditFailed, counts as a miss);
- generalisation: (a) recalled line: where the original recalled line spells the old answer,
  the edited model's recalled line spells the new place; (b) corpus line: greedy completion of
  the person's corpus line up to where their place is written (the gold place, else the old
  answer) starts with the new place (only people whose line has such a slot count);
- locality: how many of the other dev answers changed (out of the other dev questions; computed
  exactly, editing.changed_answers), the worst edit, and how many of the changed ones the model
  had right.

``--sequential``: the ``--n`` edits are applied one after another to one model; every
``--curve-every`` edits, and after the last, the benchmark measures how many of the edits made
so far still hold (earlier-edit retention) and how many answers of the dev people never edited
changed against the original model. The curve goes to runs/editing/sequential-METHOD.json;
``--plot`` draws every such file into docs/editing-sequential.png.

An edit that does not answer the new place is refused, as `attnlab edit` refuses it: the model
stays as it was (a miss; 0 other answers changed). Long runs keep their results as they go in
runs/editing/single-METHOD.partial.json (after every edit) and sequential-METHOD.partial.json
with the edited model so far (.pt, at every curve point): run the same command again after an
interruption and it goes on from there.

Intervals: Wilson 95% for counts; for the mean share of other answers changed, a seeded
bootstrap 95% interval over the edits. Seconds are wall time on a shared 2-core machine (other
work running), for orientation only.

Run: .venv/bin/python benchmarks/editing.py --run models/cpu --method grace [--n 50] [--sequential --n 100]
"""

from __future__ import annotations

import argparse
import io
import json
import random
import sys
import time
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import DATA, REPO, count_with_interval, report, table  # noqa: E402

from attnlab.core.paths import save_figure, write_atomically  # noqa: E402
from attnlab.core.plotting import pyplot  # noqa: E402
from attnlab.model.checkpoint import load_model  # noqa: E402
from attnlab.data.datasets import read_qa, read_text  # noqa: E402
from attnlab.facts.edit import (answer_layer, answer_of, changed_answers, completes_with, edit_model,  # noqa: E402
                                key_second_moment, place_slot, place_span, stat_texts)
from attnlab.answering.evaluate import answer_questions  # noqa: E402
from attnlab.facts.finetune_edit import finetune_edit  # noqa: E402
from attnlab.facts.gated_edit import EditFailed, Negatives, gated_edit, gated_layer  # noqa: E402
from attnlab.answering.knowledge import CorpusIndex, answer_by_recall, person_of  # noqa: E402

METHODS = ("grace", "rome", "finetune")
CURVES = REPO / "runs" / "editing"
PNG = REPO / "docs" / "editing-sequential.png"


def shown(path: str) -> str:
    p = Path(path).resolve()
    return str(p.relative_to(REPO)) if p.is_relative_to(REPO) else path


def mean_with_interval(values: list[float], seed: int = 0) -> str:
    """Mean (as a percentage) with a seeded bootstrap 95% interval over the items."""
    a = np.asarray(values, dtype=float)
    rng = np.random.default_rng(seed)
    means = a[rng.integers(0, len(a), size=(2000, len(a)))].mean(1)
    return f"{100 * a.mean():.2f}% (95% CI {100 * np.percentile(means, 2.5):.2f}-{100 * np.percentile(means, 97.5):.2f}%)"


class Editor:
    """One method, ready to edit any model derived from ``model`` (the statistics it needs are
    gathered once, from the original model)."""

    def __init__(self, method: str, model, vocab, texts: list[str], args, index: CorpusIndex):
        self.method, self.vocab, self.args, self.index = method, vocab, args, index
        if method == "grace":
            self.layer = args.layer if args.layer is not None else gated_layer(model)
            self.negatives = Negatives.of(model, vocab, texts[:args.radius_lines], self.layer)
        elif method == "rome":
            self.layer = args.layer if args.layer is not None else answer_layer(model)
            self.moment = key_second_moment(model, vocab, texts, self.layer)
        else:  # finetune: the MLP rome edits (FT-L)
            self.layer = args.layer if args.layer is not None else answer_layer(model)

    def __call__(self, model, name: str, place: str, owner: int):
        """The edited model (None when the editor refuses: a failed gated edit writes nothing),
        the parameters it added and, for grace, the corpus-line prompt it keyed (None: none; as
        `attnlab edit`, it is given the person's corpus line, never the gold place)."""
        if self.method == "grace":
            line = None if self.args.no_line else self.index.line_of(name)
            try:
                edited, g = gated_edit(model, self.vocab, name, place, self.negatives, owner=owner,
                                       line=line, radius_fraction=self.args.radius)
            except EditFailed:
                return None, 0, None
            return edited, g.parameters_added, g.line_prompt
        if self.method == "rome":
            edited = edit_model(model, self.vocab, name, place, self.layer, self.moment)[0]
        else:
            try:
                edited = finetune_edit(model, self.vocab, name, place, self.layer)[0]
            except EditFailed:
                return None, 0, None
        # As `attnlab edit`: an edit whose model does not answer the new place is refused, and the
        # model stays as it was (it counts as a miss; nothing of it is measured or kept).
        return (edited if answer_of(edited, self.vocab, name) == place else None), 0, None


def plan(args, dev, before, places) -> list[tuple[int, str]]:
    """The edits: (dev index, new place), seeded."""
    rng = random.Random(args.seed)
    chosen = rng.sample(range(len(dev)), args.n)
    return [(i, rng.choice([p for p in places if p not in (dev[i].answer, before[i].answer)])) for i in chosen]


class Partial:
    """A long run's results so far, in runs/editing/NAME.partial.json (written atomically after
    every step), so that an interrupted run goes on where it stopped: a later run with the same
    settings (``key``) starts from them; other settings start afresh."""

    def __init__(self, name: str, key: dict, enabled: bool = True):
        self.path, self.key, self.enabled = CURVES / f"{name}.partial.json", key, enabled

    def load(self) -> dict:
        if not (self.enabled and self.path.exists()):
            return {}
        data = json.loads(self.path.read_text())
        if data.get("key") != self.key:
            print(f"{shown(str(self.path))}: other settings; starting afresh")
            return {}
        print(f"{shown(str(self.path))}: going on from {data.get('done', 0)} edits done")
        return data

    def save(self, **state) -> None:
        if self.enabled:
            write_atomically(self.path, json.dumps({"key": self.key, **state}, indent=1) + "\n")

    def finish(self) -> None:
        if self.enabled:
            self.path.unlink(missing_ok=True)


def single_edits(editor, model, vocab, dev, before, edits, index, max_minutes: float = 0,
                 partial: Partial | None = None) -> tuple[list[dict], list[list]]:
    done = partial.load() if partial else {}
    results, rows = done.get("results", []), done.get("rows", [])
    t0 = time.perf_counter()
    for owner, (i, place) in enumerate(tqdm(edits, desc="edits"), 1):
        if owner <= len(results):  # done by an earlier, interrupted run
            continue
        if max_minutes and time.perf_counter() - t0 > 60 * max_minutes:
            break
        ex, old = dev[i], before[i]
        name = person_of(ex.question)
        start = time.perf_counter()
        edited, added, keyed = editor(model, name, place, owner)
        seconds = time.perf_counter() - start
        if edited is None:  # refused: the model stays as it was
            edited = model
        now = answer_by_recall(edited, vocab, [name], model.config.recall_chars)[0]
        spelt = place_span(old.recalled, old.answer, name, len(name) + 1) is not None
        slot = place_slot(index.line_of(name), name, [ex.answer, old.answer])
        others = [j for j in range(len(dev)) if j != i]
        changed = changed_answers(edited, vocab, [dev[j] for j in others], [before[j] for j in others])
        right = {k for k, j in enumerate(others) if before[j].answer == dev[j].answer}
        r = dict(efficacy=now.answer == place, line=(place in now.recalled) if spelt else None,
                 general=None if slot is None else completes_with(edited, vocab, slot, place),
                 changed=len(changed), others=len(others), right=len(right), lost=len(right & set(changed)),
                 added=added, seconds=seconds, knew=old.answer == ex.answer,
                 keyed=None if slot is None else keyed == slot)
        results.append(r)
        rows.append([name, old.answer, place, "yes" if r["efficacy"] else "no",
                     "-" if r["line"] is None else "yes" if r["line"] else "no",
                     "-" if r["general"] is None else ("yes" if r["general"] else "no")
                     + (" (keyed)" if r["keyed"] else ""),
                     f"{r['changed']}/{r['others']}", f"{r['lost']}/{r['right']}", added, f"{seconds:.1f}"])
        if partial:
            partial.save(done=len(results), results=results, rows=rows)
    return results, rows


def single_summary(results: list[dict]) -> str:
    n = len(results)
    yes = lambda key: [r[key] for r in results if r[key] is not None]  # noqa: E731
    frac = [r["changed"] / r["others"] for r in results]
    lost = [r["lost"] / max(1, r["right"]) for r in results]
    return table(["measure", "value", "target (issue 26)"], [
        ["efficacy (the edited question answers the new place)", count_with_interval(sum(yes("efficacy")), n), ">= 95%"],
        ["generalisation (a): the recalled line spells the new place where it spelt the old answer",
         count_with_interval(sum(yes("line")), len(yes("line"))), ">= 80% (a and b)"],
        ["generalisation (b): the corpus line's prefix completes with the new place",
         count_with_interval(sum(yes("general")), len(yes("general"))), ">= 80% (a and b)"],
        ["(b) where the editor keyed exactly this prompt (its corpus-line entries; found from the model's "
         "old answer or recall, not the gold place)", count_with_interval(sum(r["general"] for r in results if r["keyed"]),
                                                            sum(1 for r in results if r["keyed"])), ""],
        ["(b) where it did not (a prompt the edit never saw)",
         count_with_interval(sum(r["general"] for r in results if r["keyed"] is False),
               sum(1 for r in results if r["keyed"] is False)), ""],
        ["other dev answers changed, mean per edit", mean_with_interval(frac), "<= 1% (stretch 0.1%)"],
        ["other dev answers changed, worst edit", f"{100 * max(frac):.2f}% ({max(r['changed'] for r in results)} of "
         f"{results[0]['others']})", ""],
        ["of the other answers that were right, changed (mean per edit)",
         f"{100 * float(np.mean(lost)):.2f}% ({float(np.mean([r['lost'] for r in results])):.2f} of {results[0]['right']})", ""],
        ["edits that changed no other answer", count_with_interval(sum(r["changed"] == 0 for r in results), n), ""],
        ["parameters added per edit (mean)", f"{float(np.mean([r['added'] for r in results])):.0f}", ""],
        ["seconds per edit (the edit alone; shared machine)", f"{float(np.mean([r['seconds'] for r in results])):.1f} "
         f"(max {max(r['seconds'] for r in results):.1f})", "<= 5 s"],
    ])


def sequential_edits(editor, model, vocab, dev, before, edits, every: int,
                     max_minutes: float = 0, partial: Partial | None = None) -> tuple[list[dict], float, int]:
    """Apply the edits one after another; the curve of (edits made, earlier edits holding, other
    answers changed), the wall time of the edits alone, and how many were refused. With
    ``max_minutes``, no edit is started after that many minutes, and the curve ends there. With
    ``partial``, the curve and the edited model so far are saved at every curve point, and an
    interrupted run goes on from the last one."""
    edited_people = {i for i, _ in edits}
    others = [j for j in range(len(dev)) if j not in edited_people]
    right = {k for k, j in enumerate(others) if before[j].answer == dev[j].answer}
    current, curve, seconds, refused = model, [], 0.0, 0
    done = partial.load() if partial else {}
    saved = partial.path.with_suffix(".pt") if partial else None
    if done and saved.exists():
        current = torch.load(saved, weights_only=False)  # our own scratch file of this run
        curve, seconds, refused = done["curve"], done["seconds"], done["refused"]
    t0 = time.perf_counter()
    for owner, (i, place) in enumerate(tqdm(edits, desc="sequential edits"), 1):
        if curve and owner <= curve[-1]["edits"]:  # done by an earlier, interrupted run
            continue
        if max_minutes and time.perf_counter() - t0 > 60 * max_minutes:
            edits = edits[:owner - 1]
            break
        start = time.perf_counter()
        new, _, _ = editor(current, person_of(dev[i].question), place, owner)
        seconds += time.perf_counter() - start
        refused += new is None
        current = current if new is None else new
        last = owner == len(edits) or (max_minutes and time.perf_counter() - t0 > 60 * max_minutes)
        if owner % every == 0 or last:
            made = edits[:owner]
            now = answer_questions(current, vocab, [dev[j] for j, _ in made])
            holding = sum(a.answer == p for a, (_, p) in zip(now, made))
            changed = changed_answers(current, vocab, [dev[j] for j in others], [before[j] for j in others])
            curve.append(dict(edits=owner, holding=holding, changed=len(changed), others=len(others),
                              right_changed=len(right & set(changed)), right=len(right), refused=refused))
            if partial and partial.enabled:
                save_model(current, saved)
                partial.save(done=owner, curve=curve, seconds=seconds, refused=refused)
    return curve, seconds, refused


def save_model(model, path: Path) -> None:
    """The edited model so far (scratch under runs/, for resuming), written atomically."""
    buffer = io.BytesIO()
    torch.save(model, buffer)
    write_atomically(path, buffer.getvalue())


def sequential_summary(curve: list[dict], seconds: float, refused: int) -> str:
    last = curve[-1]
    rows = [[c["edits"], count_with_interval(c["holding"], c["edits"]), count_with_interval(c["changed"], c["others"]),
             f"{c['right_changed']}/{c['right']}"] for c in curve]
    head = table(["measure", "value", "target (issue 26)"], [
        [f"earlier edits still holding after the last ({last['edits']})", count_with_interval(last["holding"], last["edits"]), ">= 90%"],
        ["dev answers of people never edited, changed", count_with_interval(last["changed"], last["others"]), "<= 2%"],
        ["edits refused (failed, nothing applied)", str(refused), ""],
        [f"wall time of the {last['edits']} edits, the edits alone (shared machine)",
         f"{seconds / 60:.1f} min ({seconds / last['edits']:.1f} s per edit)", "< 10 min"],
    ])
    return head + "\n\n" + table(["edits made", "holding", "other answers changed", "of them right before"], rows)


# Published (EasyEdit / WISE paper, ZsRE on LLaMA-2-7B): reliability, generalisation, locality.
PUBLISHED = {"one edit": {"GRACE": (0.99, 0.36, 1.00), "WISE": (0.98, 0.92, 1.00), "ROME": (0.85, 0.80, 0.99)},
             "1,000 sequential edits": {"GRACE": (0.93, 0.08, 1.00), "WISE": (0.77, 0.72, 1.00),
                                        "ROME": (0.01, 0.01, 0.00)}}


def comparison() -> str:
    """The methods side by side, from runs/editing/single-*.json (written by each single-edit
    run) and sequential-*.json, with the published numbers."""
    rows = []
    for method in METHODS:
        path = CURVES / f"single-{method}.json"
        if not path.exists():
            continue
        results = json.loads(path.read_text())["results"]
        line = [r["general"] for r in results if r["general"] is not None]
        frac = [r["changed"] / r["others"] for r in results]
        seq = CURVES / f"sequential-{method}.json"
        last = json.loads(seq.read_text())["curve"][-1] if seq.exists() else None
        rows.append([method, count_with_interval(sum(r["efficacy"] for r in results), len(results)),
                     count_with_interval(sum(line), len(line)), mean_with_interval(frac), f"{100 * max(frac):.2f}%",
                     "-" if last is None else f"{last['holding']}/{last['edits']}, {100 * last['changed'] / last['others']:.2f}%",
                     f"{float(np.mean([r['seconds'] for r in results])):.1f}"])
    for when, methods in PUBLISHED.items():
        for name, (rel, gen, loc) in methods.items():
            rows.append([f"published {name}, {when}", f"{rel:.2f}", f"{gen:.2f}", f"locality {loc:.2f}", "", "", ""])
    return table(["method", "efficacy", "generalisation: corpus line", "other dev answers changed per edit (mean)",
                  "worst edit", "sequential: holding after the last, others changed", "s per edit (shared machine)"],
                 rows)


def plot(png: Path = PNG) -> None:
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    for path in sorted(CURVES.glob("sequential-*.json")):
        if path.name.endswith(".partial.json"):  # an unfinished run's state, not a curve
            continue
        data = json.loads(path.read_text())
        x = [c["edits"] for c in data["curve"]]
        left.plot(x, [100 * c["holding"] / c["edits"] for c in data["curve"]], marker="o", label=data["method"])
        right.plot(x, [100 * c["changed"] / c["others"] for c in data["curve"]], marker="o", label=data["method"])
    left.set(xlabel="edits made", ylabel="% of the edits made that still hold", ylim=(-2, 102),
             title="earlier-edit retention")
    right.set(xlabel="edits made", ylabel="% of the other dev answers changed", title="other answers changed")
    right.axhline(2, color="grey", lw=0.8, ls="--")
    left.axhline(90, color="grey", lw=0.8, ls="--")
    for ax in (left, right):
        ax.legend()
    fig.suptitle("Sequential edits of models/cpu (benchmarks/editing.py --sequential)")
    fig.tight_layout()
    save_figure(fig, png, dpi=110)
    print(f"wrote {png}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--run", default="models/cpu", help="checkpoint or run directory to edit (never modified)")
    ap.add_argument("--method", choices=METHODS, default="grace")
    ap.add_argument("--dev", default=str(DATA / "birth_dev.tsv"), help="people edited, and the other answers watched")
    ap.add_argument("--train-file", default=str(DATA / "birth_places_train.tsv"),
                    help="where new places come from, and the lines of the key statistics")
    ap.add_argument("--corpus", default=str(DATA / "wiki.txt"), help="key statistics and corpus lines")
    ap.add_argument("--n", type=int, default=50, help="edits (people)")
    ap.add_argument("--seed", type=int, default=0, help="which people and places")
    ap.add_argument("--sequential", action="store_true", help="apply the edits one after another to one model")
    ap.add_argument("--curve-every", type=int, default=10, help="--sequential: measure after every this many edits")
    ap.add_argument("--layer", type=int, default=None, help="grace: codebook layer (default top); rome and finetune: MLP (default below the top)")
    ap.add_argument("--radius", type=float, default=0.5, help="grace: radius fraction (attnlab edit --radius)")
    ap.add_argument("--stat-lines", type=int, default=2000, help="rome: lines of the key statistics")
    ap.add_argument("--radius-lines", type=int, default=2000, help="grace: lines whose states set the radii")
    ap.add_argument("--no-line", action="store_true",
                    help="grace: do not give the editor the person's corpus line (the edit input alone, as before)")
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--max-minutes", type=float, default=0,
                    help="start no new edit after this many minutes and report those done (0 = no limit)")
    ap.add_argument("--plot", action="store_true", help="only draw runs/editing/sequential-*.json into the PNG")
    ap.add_argument("--compare", action="store_true",
                    help="only write the methods side by side (runs/editing/*.json) to docs/benchmarks.md")
    ap.add_argument("--no-write", action="store_true",
                    help="print only; leave docs/benchmarks.md and runs/editing/*.json alone")
    return ap.parse_args(argv)


def run_key(args) -> dict:
    """The settings that decide a run's edits and their results: a partial run resumes only
    under the same ones."""
    return {k: getattr(args, k) for k in ("run", "method", "dev", "train_file", "corpus", "n", "seed", "sequential",
                                          "curve_every", "layer", "radius", "stat_lines", "radius_lines", "no_line",
                                          "device")}


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.plot:
        return plot()
    if args.compare:
        return report("editing-comparison", comparison(), write=not args.no_write, device=args.device,
                      title="Editing birth places: the methods side by side (benchmarks/editing.py --compare)")

    model, vocab, _ = load_model(args.run, device=args.device)
    dev = read_qa(args.dev, labelled=True)
    training = read_qa(args.train_file, labelled=True)
    places = sorted({e.answer for e in training if all(c in vocab.stoi for c in e.answer)})
    docs = read_text(args.corpus).split("\n")
    texts = stat_texts(model, docs, args.stat_lines, args.seed, training)
    t0 = time.perf_counter()
    index = CorpusIndex(docs)
    editor = Editor(args.method, model, vocab, texts, args, index)
    setup = time.perf_counter() - t0
    before = answer_questions(model, vocab, dev)
    edits = plan(args, dev, before, places)
    where = (f"{args.run}, {args.n} random people of {shown(args.dev)} (seed {args.seed}) to random places of "
             f"{shown(args.train_file)}; method {args.method}"
             + ("" if editor.layer is None else f", layer {editor.layer}")
             + (f", radius {args.radius:g} x the nearest other person's state over {len(editor.negatives.texts)} "
                f"training-format lines" if args.method == "grace" else "")
             + ("; the editor is given each person's corpus line (never the gold place)"
                if args.method == "grace" and not args.no_line else "")
             + f"; statistics gathered once in {setup:.1f} s (shared machine)")
    if args.sequential:
        partial = Partial(f"sequential-{args.method}", run_key(args), enabled=not args.no_write)
        curve, seconds, refused = sequential_edits(editor, model, vocab, dev, before, edits, args.curve_every,
                                                   args.max_minutes, partial)
        if not args.no_write:
            write_atomically(CURVES / f"sequential-{args.method}.json", json.dumps(
                {"method": args.method, "where": where, "curve": curve, "seconds": seconds}, indent=1) + "\n")
            if curve and curve[-1]["edits"] == args.n:
                partial.finish()
                partial.path.with_suffix(".pt").unlink(missing_ok=True)
        text = sequential_summary(curve, seconds, refused) + f"\n\n- {where}; edits applied one after another"
        name = f"editing-sequential-{args.method}"
        title = f"Sequential editing of birth places, {args.method} (benchmarks/editing.py --sequential)"
    else:
        partial = Partial(f"single-{args.method}", run_key(args), enabled=not args.no_write)
        results, rows = single_edits(editor, model, vocab, dev, before, edits, index, args.max_minutes, partial)
        if not args.no_write:
            write_atomically(CURVES / f"single-{args.method}.json", json.dumps(
                {"method": args.method, "where": where, "results": results}, indent=1) + "\n")
            if len(results) == args.n:
                partial.finish()
        done = "" if len(results) == args.n else (f" (the first {len(results)} of the {args.n} planned: "
                                                  f"--max-minutes {args.max_minutes:g} ran out)")
        text = "\n\n".join([single_summary(results), f"- {where}; each edit from the original model{done}",
                            "<details><summary>every edit</summary>\n\n" + table(
                                ["person", "answer before", "new place", "efficacy", "recalled line", "corpus line",
                                 "other answers changed", "right answers changed", "parameters added", "s"], rows)
                            + "\n\n</details>"])
        name = f"editing-{args.method}"
        title = f"Editing birth places, {args.method}, single edits (benchmarks/editing.py --method {args.method})"
    report(name, text, write=not args.no_write, device=args.device, title=title)


if __name__ == "__main__":
    main()
