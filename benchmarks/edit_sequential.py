"""A thousand edits in a row (issue 49, item 2): ``--n`` sequential gated edits (`attnlab edit`'s
default method) on one model, of dev and training subjects, each to a new answer drawn at random
(seeded) from the training answers of the edited relation (never the gold one, never the model's
current one). Every ``--curve-every`` edits, and after the last:

- holding: how many of the edits made so far the model still answers with their new answer
  (generated, as `attnlab ask` answers: never teacher forced), out of the edits requested (a
  refused edit counts as not holding) and out of those applied;
- other dev answers changed: the dev questions about subjects never edited (every relation),
  answered before the first edit and now (``changed_answers``: a teacher-forced pass only picks
  the rows to answer again; every answer compared is generated);
- other relations of the edited subjects (a fact set of several relations): their answers before
  and now, which an edit of one relation must not move;
- seconds per edit (the edit alone) over the last stretch, and the checkpoint of the edited model
  so far: its size and the seconds ``load_model`` takes to read it.

Refused edits are counted with the editor's reason (EditFailed: the edited model did not answer
the new answer, or the model already wrote it). The radii's statistics (the stream states of
other subjects' training texts) are gathered once: they are read before the codebook, so the
edits do not change them.

Output: benchmarks/records/edits-in-a-row/in-a-row-SET-RELATION.json (the curve, rewritten at every curve point so that an
interrupted run keeps what it measured), a section of docs/benchmarks.md, and with ``--plot``
docs/editing-thousand.png from every such file. Seconds are wall time on whatever machine ran
it (a shared one in this repository's figures): for orientation, not speed claims.

Run: OMP_NUM_THREADS=1 .venv/bin/python benchmarks/edit_sequential.py --run models/cpu --n 1000
     OMP_NUM_THREADS=1 .venv/bin/python benchmarks/edit_sequential.py --run RUN --facts examples/facts/islands --relation capital --n 200 --dev-subjects 26
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import DATA, REPO, count_with_interval, report, table  # noqa: E402

from attnlab.answering.evaluate import answer_questions  # noqa: E402
from attnlab.core.paths import save_figure, write_atomically  # noqa: E402
from attnlab.core.plotting import pyplot  # noqa: E402
from attnlab.data import factset as factsets  # noqa: E402
from attnlab.data.corpus import CorpusIndex  # noqa: E402
from attnlab.data.datasets import QAExample, read_qa, read_text  # noqa: E402
from attnlab.facts.edit import changed_answers, stat_texts  # noqa: E402
from attnlab.facts.errors import EditError  # noqa: E402
from attnlab.facts.gated_edit import Negatives, gated_edit, gated_layer  # noqa: E402
from attnlab.model.checkpoint import load_model, save_checkpoint  # noqa: E402

CURVES = REPO / "benchmarks" / "records" / "edits-in-a-row"  # committed: the figure outlives runs/
PNG = REPO / "docs" / "editing-thousand.png"
TARGETS = {"holding": 0.95, "others_changed": 0.005}  # issue 49


@dataclass
class Plan:
    """The edits (subject, relation, new answer, whether a dev subject), and the questions watched."""

    edits: list[tuple[str, str, str, bool]]
    questions: list[QAExample]  # the edited question of each edit, in order
    others: list[QAExample]  # dev questions about subjects never edited
    other_relations: list[QAExample] = field(default_factory=list)  # the edited subjects' other questions
    other_of: list[int] = field(default_factory=list)  # for each of them, the index of its subject's edit
    other_names: list[str] = field(default_factory=list)  # for each of them, its relation


def by_subject(examples, schema) -> dict[str, dict[str, QAExample]]:
    out: dict[str, dict[str, QAExample]] = {}
    for e in examples:
        asked = schema.require(e)
        out.setdefault(asked.subject, {})[asked.relation.name] = e
    return out


def plan(facts, relation: str, n: int, dev_subjects: int, seed: int, spellable,
         known: set[str] | None = None) -> tuple[Plan, list[str], random.Random]:
    """``dev_subjects`` dev subjects and ``n - dev_subjects`` training ones (seeded; only those
    in ``known`` when given), each with a new answer among the relation's training answers."""
    schema = facts.schema
    dev, train = by_subject(read_qa(facts.dev, labelled=True), schema), by_subject(read_qa(facts.train, labelled=True), schema)
    answers = sorted({q[relation].answer for q in train.values() if relation in q and spellable(q[relation].answer)})
    rng = random.Random(seed)
    dev_pool = sorted(s for s, q in dev.items() if relation in q and (known is None or s in known))
    train_pool = sorted(s for s, q in train.items() if relation in q and (known is None or s in known))
    k = min(dev_subjects, len(dev_pool), n)
    if n - k > len(train_pool):
        raise SystemExit(f"--n {n}: only {len(train_pool)} training subjects and {k} dev ones can be edited")
    chosen = [(s, True) for s in rng.sample(dev_pool, k)] + [(s, False) for s in rng.sample(train_pool, n - k)]
    rng.shuffle(chosen)
    edits, questions, other_relations, other_of, other_names = [], [], [], [], []
    for k, (subject, is_dev) in enumerate(chosen):
        asked = (dev if is_dev else train)[subject]
        gold = asked[relation].answer
        edits.append((subject, relation, gold, is_dev))  # the new answer is drawn below, against the model's
        questions.append(asked[relation])
        other = [(r, e) for r, e in sorted(asked.items()) if r != relation]
        other_relations += [e for _, e in other]
        other_names += [r for r, _ in other]
        other_of += [k] * len(other)
    edited = {s for s, _ in chosen}
    others = [e for s, q in sorted(dev.items()) if s not in edited for _, e in sorted(q.items())]
    return Plan(edits, questions, others, other_relations, other_of, other_names), answers, rng


def new_answers(p: Plan, answers: list[str], before: list, rng: random.Random) -> None:
    """Each edit's new answer: random among ``answers``, not the gold one nor the model's."""
    for k, ((subject, relation, gold, is_dev), now) in enumerate(zip(p.edits, before)):
        place = rng.choice([a for a in answers if a not in (gold, now.answer)])
        p.edits[k] = (subject, relation, place, is_dev)


def known_subjects(model, vocab, facts, relation: str) -> set[str]:
    """The subjects whose answer of ``relation`` the model gives right (the fact it holds)."""
    asked = [e for path in (facts.dev, facts.train) for e in read_qa(path, labelled=True)
             if facts.schema.require(e).relation.name == relation]
    return {facts.schema.require(e).subject for e, a in zip(asked, answer_questions(model, vocab, asked))
            if a.answer == e.answer}


def checkpoint_cost(model, vocab) -> tuple[int, float]:
    """The edited model's checkpoint: bytes, and seconds to load it."""
    with tempfile.TemporaryDirectory() as tmp:
        path = save_checkpoint(Path(tmp) / "checkpoint.safetensors", model, vocab, meta={})
        size = path.stat().st_size
        start = time.perf_counter()
        load_model(path)
        return size, time.perf_counter() - start


def reason(message: str) -> str:
    """A refused edit's reason, in a few words (the EditFailed's message names the case)."""
    if "already writes" in message:
        return "the model already wrote the edit input"
    if "did not take" in message:
        return "the edited model did not answer the new answer"
    return message.split(":")[0][:60]


def measure(current, vocab, p: Plan, done: int, before_others, before_rel, seconds: list[float], refused: int,
            applied: int, kept: dict[int, list[str]] | None = None) -> dict:
    """One curve point after ``done`` edits. ``kept``: for each applied edit (by index), the
    relations whose answers it could keep (gated_edit's kept_relations: an answer that spelt
    the edited relation's old answer, or that the longer new answer pushed out of the recall's
    budget, is no longer in the edited recall and cannot be read from it)."""
    now = answer_questions(current, vocab, p.questions[:done])
    # A refused edit leaves its question answered as before (never its new answer): it does not hold.
    holding = sum(a.answer == place for a, (_, _, place, _) in zip(now, p.edits[:done]))
    changed = changed_answers(current, vocab, p.others, before_others)
    made = [i for i, k in enumerate(p.other_of) if k < done]
    rel_changed = changed_answers(current, vocab, [p.other_relations[i] for i in made],
                                  [before_rel[i] for i in made]) if made else []
    right = {k for k, i in enumerate(made) if before_rel[i].answer == p.other_relations[i].answer}
    kept = kept or {}
    keepable = {k for k, i in enumerate(made) if p.other_of[i] not in kept or p.other_names[i] in kept[p.other_of[i]]}
    size, load_seconds = checkpoint_cost(current, vocab)
    return dict(edits=done, holding=holding, applied=applied, refused=refused,
                others=len(p.others), others_changed=len(changed), other_relation=len(made),
                other_relation_changed=len(rel_changed), other_relation_right=len(right),
                other_relation_right_changed=len(right & set(rel_changed)), other_relation_keepable=len(keepable),
                other_relation_keepable_changed=len(keepable & set(rel_changed)), seconds_per_edit=sum(seconds) / max(1, len(seconds)),
                checkpoint_bytes=size, load_seconds=load_seconds, entries=len(current.edit_codebook or []))


def run(args) -> dict:
    model, vocab, _ = load_model(args.run)
    facts = factsets.load(args.facts)
    relation = args.relation or facts.schema.relations[0].name
    docs = read_text(facts.corpus).split("\n")
    index = CorpusIndex(docs)
    spellable = lambda a: all(c in vocab.stoi for c in a)  # noqa: E731
    known = known_subjects(model, vocab, facts, relation) if args.known_only else None
    p, answers, rng = plan(facts, relation, args.n, args.dev_subjects, args.seed, spellable, known)
    before = answer_questions(model, vocab, p.questions)
    new_answers(p, answers, before, rng)
    before_others = answer_questions(model, vocab, p.others)
    before_rel = answer_questions(model, vocab, p.other_relations)
    layer = gated_layer(model)
    negatives = Negatives.of(model, vocab, stat_texts(model, docs, args.radius_lines, args.seed, read_qa(facts.train, labelled=True)), layer)
    out = {"run": str(args.run), "facts": str(args.facts), "set": facts.name, "relation": relation,
           "known_only": args.known_only, "command": sys.argv[:],
           "relations": list(facts.schema.names), "n": args.n, "seed": args.seed, "layer": layer,
           "dev_edits": sum(e[3] for e in p.edits), "curve": [], "refused": [], "reasons": {}}
    current, seconds, refused, kept = model, [], [], {}
    started = time.perf_counter()
    for owner, (subject, rel, place, _) in enumerate(p.edits, 1):
        if args.max_minutes and time.perf_counter() - started > 60 * args.max_minutes:
            break
        start = time.perf_counter()
        try:
            current, kept[owner - 1] = one_edit(current, vocab, subject, rel, place, negatives, owner,
                                                index.line_of(subject), before[owner - 1])
        except EditError as e:
            refused.append({"edit": owner, "subject": subject, "place": place, "why": str(e)})
        seconds.append(time.perf_counter() - start)
        out_of_time = bool(args.max_minutes) and time.perf_counter() - started > 60 * args.max_minutes
        if owner % args.curve_every == 0 or owner == len(p.edits) or out_of_time:  # the last point measured
            out["curve"].append(measure(current, vocab, p, owner, before_others, before_rel, seconds, len(refused),
                                        owner - len(refused), kept))
            seconds = []
            out["refused"], out["reasons"] = refused, dict(Counter(reason(r["why"]) for r in refused))
            if not args.no_write:
                write_atomically(curve_path(facts.name, relation), json.dumps(out, indent=1) + "\n")
            print(json.dumps(out["curve"][-1]), flush=True)
    return out


def one_edit(model, vocab, subject: str, relation: str, place: str, negatives, owner: int, line, old):
    """The model with one more gated edit (recorded as `attnlab edit` records it), and the
    subject's other relations whose answers the edit keeps."""
    edited, g = gated_edit(model, vocab, subject, place, negatives, owner=owner, line=line,
                           relation=relation if len(model.config.relations) > 1 else None)
    edited.edits = list(model.edits) + [{"id": owner, "person": subject, "relation": relation,
                                         "old_answer": old.answer, "place": place, "method": "grace",
                                         "layer": g.layer, "parameters_added": g.parameters_added}]
    return edited, g.kept_relations


def curve_path(name: str, relation: str) -> Path:
    return CURVES / f"in-a-row-{name}-{relation}.json"


def summary(out: dict) -> str:
    last = out["curve"][-1]
    n = last["edits"]
    rows = [[f"edits still holding after the last ({n}), of those requested", count_with_interval(last["holding"], n),
             f">= {TARGETS['holding']:.0%}"],
            ["... of those applied (not refused)", count_with_interval(last["holding"], last["applied"]), ""],
            ["dev answers about subjects never edited, changed", count_with_interval(last["others_changed"], last["others"]),
             f"<= {TARGETS['others_changed']:.1%}"],
            ["edits refused", f"{last['refused']} of {n}: " + (", ".join(f"{k} ({v})" for k, v in out["reasons"].items())
                                                             or "none"), ""]]
    if last["other_relation"]:
        rows.append(["the edited subjects' other relations, changed",
                     count_with_interval(last["other_relation_changed"], last["other_relation"]), "0"])
        rows.append(["... of those the model answered right before",
                     count_with_interval(last.get("other_relation_right_changed", 0), last.get("other_relation_right", 0)), "0"])
        if "other_relation_keepable" in last:
            rows.append(["... of those the edit could keep (the answer still in the edited recall)",
                         count_with_interval(last["other_relation_keepable_changed"], last["other_relation_keepable"]), "0"])
    head = table(["measure", "value", "target (issue 49)"], rows)
    curve = table(["edits", "holding", "others changed", "other relation changed", "s per edit", "codebook entries",
                   "checkpoint MB", "load s"],
                  [[c["edits"], f"{c['holding']}/{c['edits']}", f"{c['others_changed']}/{c['others']}",
                    f"{c['other_relation_changed']}/{c['other_relation']}" if c["other_relation"] else "-",
                    f"{c['seconds_per_edit']:.2f}", c["entries"], f"{c['checkpoint_bytes'] / 1e6:.2f}",
                    f"{c['load_seconds']:.2f}"] for c in out["curve"]])
    where = (f"- {out['run']}, fact set {out['set']} ({', '.join(out['relations'])}), relation `{out['relation']}` edited; "
             f"{out['dev_edits']} dev and {out['n'] - out['dev_edits']} training subjects (seed {out['seed']}), new answers "
             f"drawn from the relation's training answers{'; only subjects the model answered right (--known-only)' if out.get('known_only') else ''}; gated edits at layer {out['layer']}, one after another; "
             "every answer generated (never teacher forced); seconds: wall time on a shared machine, not a speed claim")
    refused = "\n".join(f"  - edit {r['edit']} ({r['subject']} -> {r['place']}): {r['why']}" for r in out["refused"][:10])
    return "\n\n".join([head, curve, where] + ([f"- the first refused edits:\n{refused}"] if refused else []))


def plot(png: Path = PNG) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(1, 4, figsize=(16, 3.8))
    for path in sorted(CURVES.glob("in-a-row-*.json")):
        data = json.loads(path.read_text())
        if not data.get("curve"):
            continue
        c, label = data["curve"], f"{data['set']} ({data['relation']})"
        x = [p["edits"] for p in c]
        axes[0].plot(x, [100 * p["holding"] / p["edits"] for p in c], marker="o", label=label)
        axes[1].plot(x, [100 * p["others_changed"] / max(1, p["others"]) for p in c], marker="o", label=label)
        axes[2].plot(x, [p["seconds_per_edit"] for p in c], marker="o", label=label)
        axes[3].plot(x, [p["checkpoint_bytes"] / 1e6 for p in c], marker="o", label=f"{label}: MB")
        axes[3].plot(x, [p["load_seconds"] for p in c], marker="x", ls="--", label=f"{label}: load s")
    axes[0].set(xlabel="edits made", ylabel="% of the edits made still holding", ylim=(-2, 102))
    axes[0].axhline(100 * TARGETS["holding"], color="grey", lw=0.8, ls="--")
    axes[1].set(xlabel="edits made", ylabel="% of other dev answers changed")
    axes[1].axhline(100 * TARGETS["others_changed"], color="grey", lw=0.8, ls="--")
    axes[2].set(xlabel="edits made", ylabel="seconds per edit (shared machine)")
    axes[3].set(xlabel="edits made", ylabel="checkpoint MB / load seconds")
    for ax in axes:
        ax.legend(fontsize=7)
    fig.suptitle("Sequential gated edits (benchmarks/edit_sequential.py)")
    fig.tight_layout()
    save_figure(fig, png, dpi=100)
    print(f"wrote {png}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--run", default="models/cpu", help="checkpoint or run directory (never modified)")
    ap.add_argument("--facts", default=str(DATA), help="the model's fact-set folder (default: the birthplace set)")
    ap.add_argument("--relation", default=None, help="the relation edited (default: the set's first)")
    ap.add_argument("--n", type=int, default=1000, help="edits, one after another")
    ap.add_argument("--dev-subjects", type=int, default=250,
                    help="of them, edits of dev subjects (the rest: training subjects); the dev subjects never "
                         "edited are the ones watched")
    ap.add_argument("--seed", type=int, default=0, help="which subjects and answers")
    ap.add_argument("--known-only", action="store_true",
                    help="edit only subjects whose answer the model gives right (a weak model's wrong answers "
                         "are often read from another sentence, which the edit input then rewrites)")
    ap.add_argument("--curve-every", type=int, default=100, help="measure after every this many edits")
    ap.add_argument("--radius-lines", type=int, default=2000, help="texts whose states set the radii (0 = all)")
    ap.add_argument("--max-minutes", type=float, default=0, help="start no edit after this many minutes (0 = no limit)")
    ap.add_argument("--plot", action="store_true", help="only draw benchmarks/records/edits-in-a-row/in-a-row-*.json")
    ap.add_argument("--report", default=None, metavar="JSON",
                    help="only write the docs section from a curve file this script wrote (e.g. after a run elsewhere)")
    ap.add_argument("--no-write", action="store_true", help="print only")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> dict | None:
    args = parse_args(argv)
    if args.plot:
        return plot()
    out = json.loads(Path(args.report).read_text()) if args.report else run(args)
    if args.report and out.get("command"):  # the section names the run that measured it, not --report
        sys.argv = out["command"]
    if out["curve"]:
        several = len(out.get("relations", [])) > 1  # a section for each relation edited
        report(f"edit-sequential-{out['set']}" + (f"-{out['relation']}" if several else ""), summary(out),
               write=not args.no_write, title=f"Sequential gated edits of {out['set']}"
               + (f", {out['relation']} edited" if several else "") + " (benchmarks/edit_sequential.py)")
    return out


if __name__ == "__main__":
    main()
