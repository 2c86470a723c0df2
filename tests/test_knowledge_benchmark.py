"""benchmarks/knowledge.py's error breakdown: each wrong recall answer is put in the one kind
that explains it (the figures in docs/guides/knowledge.md come from it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from attnlab.answering.knowledge import RecallAnswer
from tests.conftest import benchmark_fixture

knowledge = benchmark_fixture("knowledge")
read_out = benchmark_fixture("read_out")


LINE = "Ann Lee. Ann Lee was born in Paris, France, and later lived in a very long street name."


@pytest.mark.parametrize("answer, recalled, recall_chars, gold, kind", [
    ("Paris", LINE, 60, "Paris", 0),
    ("London", LINE, 60, "Rome", 1),  # Rome is not in the line
    ("Paris", LINE, 30, "France", 2),  # France ends after the 30 recalled characters
    ("France", LINE, 60, "Paris", 3),  # the line was recalled exactly; the wrong place was read
    ("Lyon", "Ann Lee. Ann Lee was born in Lyon.", 60, "Paris", 4),  # the recall itself went wrong
])
def test_each_answer_gets_the_kind_that_explains_it(knowledge, answer, recalled, recall_chars, gold, kind):
    got = RecallAnswer(answer, 0.5, True, recalled)
    assert knowledge._error_kind(gold, got, LINE, len("Ann Lee."), recall_chars) == knowledge.ERROR_KINDS[kind]


@pytest.mark.parametrize("gold, answer, kind", [
    ("Paris", "France", 0),  # the line says "Paris, France", labelled Paris, answered France
    ("France", "Paris", 1),  # labelled France, answered Paris
    ("Paris", "Ann", 2),  # a span that is not the label's neighbour
    ("Paris", "", 2),  # nothing read
])
def test_read_out_errors_are_split_by_the_comma_pair(knowledge, gold, answer, kind):
    assert knowledge.read_out_kind(gold, answer, LINE, LINE.find(gold)) == knowledge.READ_OUT_KINDS[kind]


def test_label_convention_counts_which_place_of_a_comma_pair_the_labels_name(knowledge, tmp_path):
    corpus = ("Ann Lee. Ann Lee was born in Paris, France.\n"
              "Bo Ray. Bo Ray was born in Lyon, France.\n"
              "Cy Dee. Cy Dee was born in Oslo, Norway.\n"
              "Di Eng. Di Eng was born in Rome.\n")
    train = tmp_path / "train.tsv"
    train.write_text("Where was Ann Lee born?\tParis\nWhere was Bo Ray born?\tFrance\n"
                     "Where was Cy Dee born?\tOslo\nWhere was Di Eng born?\tRome\n")
    index = knowledge.CorpusIndex(knowledge.documents(corpus))
    assert knowledge.label_convention(str(train), index) == (2, 1)  # Di Eng's "Rome." is no pair


def test_one_open_book_scorer_for_both_benchmarks(knowledge, read_out):
    """benchmarks/knowledge.py --open-book and benchmarks/read_out.py score the read-out alike."""
    import torch

    from attnlab.answering.knowledge import CorpusIndex, recall_string
    from attnlab.config.settings import ModelConfig
    from attnlab.data.datasets import QAExample
    from attnlab.data.vocab import Vocab
    from attnlab.model.gpt import GPT
    from tests.tiny_runs import memorise

    assert knowledge.open_book_right is read_out.open_book_right
    lines = ["Ada Brook. Ada Brook was born in Paris.", "Bela Kron. Bela Kron was born in Lima."]
    vocab = Vocab.from_text("\n".join(lines))
    torch.manual_seed(0)
    model = GPT(ModelConfig(vocab_size=len(vocab), block_size=80, n_layer=2, n_head=2, n_embd=48, dropout=0.0,
                            qa_format="recall", recall_chars=60))
    memorise(model, vocab, [recall_string(l, 60, p) for l, p in zip(lines, ["Paris", "Lima"])], steps=300)
    asked = [QAExample("Where was Ada Brook born?", "Paris", "dev.tsv", 1),
             QAExample("Where was Bela Kron born?", "Rome", "dev.tsv", 2)]  # the line says Lima
    assert knowledge.open_book_right(model, vocab, CorpusIndex(lines), asked) == [True, False]


def test_a_stages_time_leaves_out_each_evaluation_once(knowledge, tmp_path):
    # a scored row's elapsed_s is taken before its own evaluation: the last evaluation is not in
    # any row's elapsed_s, so it must not be subtracted (the bug: 100 s of training read as 90)
    rows = ['{"step": 10, "elapsed_s": 40.0}', '{"step": 20, "elapsed_s": 50.0, "eval_s": 10.0}',
            '{"step": 30, "elapsed_s": 85.0}', '{"step": 40, "elapsed_s": 110.0, "eval_s": 10.0}']
    (tmp_path / "metrics.jsonl").write_text("\n".join(rows) + "\n")
    assert knowledge.stage_seconds(tmp_path) == 100.0
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "elapsed_s": 12.5}\n')  # a stage scored never
    assert knowledge.stage_seconds(tmp_path) == 12.5
    resumed = rows + ['{"step": 35, "elapsed_s": 20.0}', '{"step": 40, "elapsed_s": 30.0, "eval_s": 10.0}',
                      '{"step": 50, "elapsed_s": 45.0}']  # a second process: 35 s of training
    (tmp_path / "metrics.jsonl").write_text("\n".join(resumed) + "\n")
    assert knowledge.stage_seconds(tmp_path) == 135.0


def test_the_commands_wall_time_adds_what_the_loops_leave_out_but_not_the_evaluations(knowledge, tmp_path,
                                                                                    monkeypatch):
    # each fake stage takes 10 s of the clock: 3 s preparing, 5 s training, 2 s evaluating
    clock = [0.0]

    def stage(argv):
        run = Path(argv[argv.index("--out-dir") + 1])
        run.mkdir(parents=True, exist_ok=True)
        rows = ['{"step": 1, "elapsed_s": 5.0, "train_wall_s": 5.0}', '{"step": 1, "elapsed_s": 5.0, "eval_s": 2.0}']
        (run / "metrics.jsonl").write_text("\n".join(rows) + "\n")
        (run / "checkpoint.safetensors").write_text("")
        clock[0] += 10.0
        return 0

    monkeypatch.setattr(knowledge.cli, "main", stage)
    monkeypatch.setattr(knowledge.time, "perf_counter", lambda: clock[0])
    loops, commands = knowledge.run_pipeline("cpu5", tmp_path / "k", resume=False)
    assert loops == 10.0 and commands == 16.0  # two stages of (10 - 2) s; the loops' own 5 s each
    # finished stages resumed by another process: their commands' time is not this process's to tell
    loops, commands = knowledge.run_pipeline("cpu5", tmp_path / "k", resume=True)
    assert loops == 10.0 and commands is None


def test_another_seed_of_a_recipe_seeds_both_stages_and_seed_0_leaves_the_commands_as_they_were(
        knowledge, tmp_path, monkeypatch):
    calls = []

    def stage(argv):
        calls.append(argv)
        run = Path(argv[argv.index("--out-dir") + 1])
        run.mkdir(parents=True, exist_ok=True)
        (run / "metrics.jsonl").write_text('{"step": 1, "elapsed_s": 1.0}\n')
        return 0

    monkeypatch.setattr(knowledge.cli, "main", stage)
    knowledge.run_pipeline("cpu60", tmp_path / "s1", resume=False, seed=1)
    assert [argv[argv.index("--seed") + 1] for argv in calls] == ["1", "1"]  # pretrain and finetune
    assert all("--seed" not in argv for argv in knowledge.stage_commands("cpu60", tmp_path / "s0"))


def test_a_shipped_model_has_no_training_curve_but_its_run_does(knowledge, tmp_path):
    """--ablation reads each probe's curve from metrics.jsonl; a shipped model directory keeps
    weights and provenance only, so its curve is empty instead of a crash."""
    assert knowledge._metrics(tmp_path) == []
    (tmp_path / "metrics.jsonl").write_text('{"step": 10, "dev_correct": 3}\n{"step": 20}\n')
    assert knowledge._metrics(tmp_path) == [{"step": 10, "dev_correct": 3}, {"step": 20}]


def test_the_commands_a_user_pastes_keep_the_empty_eval_file(knowledge, tmp_path):
    """A shipped model's provenance and the report print these lines: `--eval-file` with nothing
    after it would swallow the next flag or fail in a shell, so the empty value is quoted."""
    pretrain, finetune = knowledge.command_lines(knowledge.stage_commands("cpu60", tmp_path / "r", minutes=55))
    assert pretrain == f"attnlab pretrain --preset cpu60 --out-dir {tmp_path / 'r' / 'pretrain'} --minutes 55"
    assert finetune.endswith("--eval-file ''")


def test_a_run_that_logged_no_cpu_time_shows_a_dash_not_zero_minutes(knowledge):
    assert knowledge.training_cpu_minutes([{"step": 889, "elapsed_s": 261.8}]) == "-"
    assert knowledge.training_cpu_minutes([{"train_cpu_s": 60.0}, {"train_cpu_s": 150.0}]) == "2.5"


def test_the_ablation_table_tests_each_probe_against_the_first_and_holm_adjusts_them(knowledge, monkeypatch):
    right = {"a": [True] * 10 + [False] * 10, "b": [True] * 20, "c": [True] * 11 + [False] * 9}
    monkeypatch.setattr(knowledge, "answer_run", lambda run, eval_file: (
        {"dev_correct": sum(right[run.name]), "dev_total": 20, "stored": 5, "stored_total": 5}, right[run.name]))
    monkeypatch.setattr(knowledge, "_metrics", lambda run: [])
    written = {}
    monkeypatch.setattr(knowledge, "report", lambda name, text, write, title: written.update({name: text}))
    knowledge.ablation(["a:first", "b:all", "c:one more"], "held.tsv", out=None, write=False)
    text = written["knowledge_ablation"]
    p_b = 2 * 0.5 ** 10  # 10 one-sided disagreements
    assert f"10/0, p={p_b:.2g}, better" in text and "1/0, p=1, no detectable difference" in text
    assert text.splitlines()[-1] == (f"- Holm-adjusted p over the 2 tests against first (a verdict that stands with "
                                     f"the chance of any spurious one in the table kept under 0.05): all "
                                     f"{2 * p_b:.3g} (better), one more 1.")
