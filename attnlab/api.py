"""The Python API: ``attnlab.load(path)`` gives a trained model ready to answer, and every
thing the commands do to a model is one method of it.

    model = attnlab.load("models/cpu")                  # a run directory or a checkpoint file
    model.ask(["Where was Ada Lovelace born?"])         # [Answer(question, answer, confidence, ...)]
    model.evaluate("data/birth_dev.tsv")                # Evaluation: accuracy and its 95% interval
    model.generate("Ada Lovelace. ", max_new=40)        # a continuation
    model.trace("Where was Ada Lovelace born?")         # Trace: where the fact is carried
    fixed = model.edit("Ada Lovelace", "Paris")         # a NEW model; ``model`` is unchanged
    fixed.save("runs/fixed")                            # atomic; never replaces a file unasked
    logits, cache = model.run_with_cache("Ada Lovelace. ", ["blocks.0.mlp.out"])

Each method calls the library function the command calls (``ask``/``evaluate``:
attnlab/answering/evaluate.py; ``generate``: attnlab/model/generate.py; ``trace``:
attnlab/facts/trace.py; ``edit``: attnlab/facts/correction.py; activations by name:
attnlab/model/hooks.py), so Python and the command line give the same answers. Answers are in
the model's own answer format: ``direct``, or ``recall`` (attnlab/answering/knowledge.py), where
each answer also carries what the model recalled of the person.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable, Literal, Mapping

import torch
from torch import Tensor

from .answering.drafts import CorpusDraft
from .answering.evaluate import Answer, Score, answer_questions, evaluate
from .config.settings import DEFAULT_CORPUS, DEFAULT_DEV, DEFAULT_TRAIN, ModelConfig, TrainConfig
from .core import cpu_settings, logs
from .core.datafiles import resolve as found  # data/NAME and models/NAME from any directory
from .core.paths import PathError
from .data.datasets import DataError, QAExample, read_corpus, read_questions
from .data.subject_orders import recorded_holdout, recorded_order
from .data.vocab import Vocab
from .facts.correction import edit_fact, training_answers
from .data import factset
from .data.factset import FactSet
from .data.format_names import RECALLING_FORMATS
from .data.relations import Schema
from .facts.settings import EditSettings, TraceSettings
from .facts.trace import KINDS, Trace, trace
from .model.checkpoint import CHECKPOINT_NAME, Checkpoint, load_model, save_checkpoint
from .model.generate import continue_texts
from .model.gpt import GPT
from .model.hooks import capturing, hook_names, needs_weights
from .trust.abstention import Rule, decide, fit_rules, people_of
from .trust.policy import DEFAULT_HOLDOUT, DEFAULT_KEEP_RIGHT, AbstainPolicy
from .trust.calibration import Correction
from .trust.stored import read_stored, stored_correction, weights_digest


@dataclass(frozen=True)
class Evaluation:
    """The answers to a labelled question file and their exact-match score."""

    file: str
    answers: list[Answer]
    score: Score

    @property
    def accuracy(self) -> float:
        """The share of questions answered exactly right (0..1)."""
        return self.score.correct / self.score.total if self.score.total else 0.0

    @property
    def interval(self) -> tuple[float, float]:
        """The 95% Wilson score interval of the accuracy (0..1)."""
        return self.score.interval

    def __str__(self) -> str:
        return f"{self.file}: {self.score.with_interval()}"


@dataclass
class LoadedModel:
    """A trained GPT with what answering needs: its vocabulary and its configs."""

    gpt: GPT
    vocab: Vocab
    checkpoint: Checkpoint  # weights, configs and training metadata as stored
    fact_set: FactSet | None = None  # what it learned (``attnlab learn`` records it), or as given to load
    stored: dict[str, Any] | None = None  # the abstention fit stored with the run (trust/stored.py), read at load
    _rules: dict[AbstainPolicy, Rule | None] = field(default_factory=dict, repr=False, compare=False)
    _draft: CorpusDraft | bool | None = field(default=None, repr=False, compare=False)  # recall_draft's, once read

    @property
    def config(self) -> ModelConfig:
        return self.gpt.config

    @property
    def train_config(self) -> TrainConfig | None:
        """The configuration of the run that wrote the checkpoint (None if it recorded none)."""
        stored = self.checkpoint.meta.get("train_config")
        return None if stored is None else TrainConfig.from_dict(stored)

    @property
    def device(self) -> torch.device:
        return next(self.gpt.parameters()).device

    def ask(self, questions: Iterable[str] | str, *, batch_size: int = 256, source: str = "<ask>",
            first_line: int = 1, abstain: Rule | AbstainPolicy | None = AbstainPolicy(), strict: bool = True
            ) -> list[Answer]:
        """Greedy answers, in order, each with its confidence (``Answer.confidence``: the
        probability of the answer and its closing mark) and, for a recall model, what it
        recalled, and the relation it was asked about. A bad question raises an error naming
        ``source`` and its line: VocabError for an unknown character, DataError when a recall
        model's relations match no question form; with ``strict=False`` such a question gets an
        empty answer whose ``problem`` says why ("I can't parse this: ...") and the others are
        answered.

        ``abstain``: when an answer is withheld. By default as ``attnlab ask`` does
        (``AbstainPolicy()``, the run's rule: stored with the run, else fitted once on its
        held-out people and kept); ``None`` or ``AbstainPolicy(mode="off")`` answers
        everything; a ``Rule`` (``Rule(confidence=0.8)``, ``model.abstention_rule()``) or another
        policy (``attnlab.trust.policy``). A withheld answer comes back with ``answer`` "" and
        ``withheld`` holding what the model would have said."""
        if isinstance(questions, str):
            questions = [questions]
        questions_in = questions
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
        questions = list(questions) if isinstance(questions, Iterable) and not isinstance(
            questions, (bytes, bytearray, Mapping)) else None  # a dict's keys are no questions
        if questions is None:
            raise TypeError(f"ask takes a question (str) or a list of them, got {type(questions_in).__name__}")
        if abstain is not None and not isinstance(abstain, (Rule, AbstainPolicy)):
            raise TypeError(f"abstain takes None (answer everything), a Rule or an AbstainPolicy, got {abstain!r}")
        for i, q in enumerate(questions):
            _check_question(q, source, first_line + i)
        examples = [QAExample(q.strip(), None, source, first_line + i) for i, q in enumerate(questions)]
        with torch.no_grad(), cpu_settings.inference_threads(len(examples)):
            answers = self._with_chance(answer_questions(self.gpt, self.vocab, examples, batch_size=batch_size,
                                                         strict=strict, draft=self.recall_draft()))
            if isinstance(abstain, AbstainPolicy):
                abstain = self.rule_for(abstain)
            return answers if abstain is None else self._withhold(answers, examples, abstain, batch_size)

    def recall_draft(self) -> CorpusDraft | None:
        """Guesses of a recall model's recall, looked up in the corpus it learned (its fact
        set's, else the course's), so that ``ask`` decodes several characters a step; None for
        a direct model or a corpus that cannot be read. What the model recalls is its own
        either way (answering/drafts.py)."""
        if self.config.qa_format not in RECALLING_FORMATS:
            return None
        if self._draft is None:
            corpus = self.fact_set.corpus if self.fact_set else DEFAULT_CORPUS
            try:
                self._draft = CorpusDraft(read_corpus(found(corpus)), self.vocab)
            except (OSError, ValueError):  # no corpus at hand: one character a step, as before
                self._draft = False
        return self._draft or None

    def correction(self) -> Correction | None:
        """The confidence correction stored with the run (``abstention.json``) when it was fitted
        for these weights: it maps a confidence to how often such answers were right on training
        subjects held out of finetuning. None when the run stores none or its weights changed
        since (an edited copy: the fit describes other weights)."""
        if not self.stored or self.stored.get("weights") != weights_digest(self.gpt):
            return None
        return stored_correction(self.stored)

    def _with_chance(self, answers: list[Answer]) -> list[Answer]:
        """``answers`` with ``chance_right`` set from the run's correction (unset without one; an
        unanswered question keeps None)."""
        correction = self.correction()
        if correction is None:
            return answers
        return [a if a.problem else replace(a, chance_right=correction.chance(a.confidence, a.parts)) for a in answers]

    def rule_for(self, policy: AbstainPolicy = AbstainPolicy()) -> Rule | None:
        """The rule ``policy`` gives for this model (None: answer everything), read from the
        run's stored fit or fitted once and kept; the course's training file stands for the fact
        set's own when the model learned one."""
        policy = self.own_policy(policy)
        if policy not in self._rules:
            self._rules[policy] = self._fitted_rule(policy)
        return self._rules[policy]

    def _fitted_rule(self, policy: AbstainPolicy) -> Rule | None:
        """A rule the caller chose fails loudly; the default, an extra nobody asked for, answers
        everything when it cannot be fitted for this model (its held-out file holds characters or
        questions the model cannot read), and says so once."""
        try:
            return policy.rule(self.gpt, self.vocab, self.checkpoint.meta, self.stored)
        except (ValueError, OSError) as e:  # DataError, VocabError, PathError are ValueErrors
            if policy.mode != "run":
                raise
            logs.warn(f"every answer given: the default abstention rule cannot be fitted for this model "
                      f"({' '.join(str(e).split())}); choose one with abstain= (--abstain) or store one with "
                      "attnlab calibrate RUN --holdout-file FILE")
            return None

    def own_policy(self, policy: AbstainPolicy) -> AbstainPolicy:
        """``policy`` with the course's training file replaced by the fact set's own when the
        model learned one (the people a rule is fitted on are the model's own held-out ones)."""
        if self.fact_set is not None and policy.holdout_file == DEFAULT_TRAIN.as_written:
            return policy.replace(holdout_file=str(self.fact_set.train))
        return policy

    def _withhold(self, answers: list[Answer], examples: list[QAExample], rule: Rule, batch_size: int) -> list[Answer]:
        """The answers with those the rule withholds emptied (``withheld`` keeps them)."""
        names = people_of(examples, self.gpt) if rule.needs_familiarity else [""] * len(examples)
        given = decide(self.gpt, self.vocab, rule, names, answers, batch_size)
        return [a if ok else replace(a, answer="", withheld=a.answer) for a, ok in zip(answers, given)]

    def abstention_rule(self, train_file: str | os.PathLike | None = None, *, holdout_fraction: float | None = None,
                        keep_right: float = DEFAULT_KEEP_RIGHT, kind: str = "both") -> Rule:
        """The rule ``ask --abstain auto`` fits, for ``ask(..., abstain=rule)``: one threshold on
        the name's familiarity and the answer's confidence together ("both"; "name" or
        "confidence" alone), fitted on the last ``holdout_fraction`` of ``train_file`` (default: the
        course's training file, and the share the run recorded holding out, else 0.1) so that
        a new person's right answer is still given with probability ``keep_right``.
        ``Rule(confidence=0.8)`` is ``--abstain-below 0.8``."""
        recorded = recorded_holdout(self.checkpoint.meta)
        fraction = holdout_fraction or recorded or DEFAULT_HOLDOUT
        own = self.fact_set.train if self.fact_set else DEFAULT_TRAIN
        return fit_rules(self.gpt, self.vocab, train_file or own, fraction, keep_right,
                         order=recorded_order(self.checkpoint.meta), correct=recorded > 0)[kind]

    def evaluate(self, file: str | os.PathLike | None = None, *, limit: int = 0, batch_size: int = 256
                 ) -> Evaluation:
        """Answer every question of a labelled ``question<TAB>answer`` file (default: the fact
        set's dev file; its first ``limit`` questions; 0 = all) as ``attnlab evaluate`` does, and
        score the answers: exact-match accuracy with its 95% Wilson interval. A file without
        labels is a DataError."""
        if file is None:
            file = self.fact_set.dev if self.fact_set else DEFAULT_DEV
        path = found(file)
        examples = read_questions(path, labelled=True)[: limit or None]
        with torch.no_grad():
            answers, score = evaluate(self.gpt, self.vocab, examples, batch_size=batch_size)
        return Evaluation(str(file), answers, score)  # type: ignore[arg-type]  # labelled: scored

    def generate(self, prompt: str, max_new: int = 100, *, temperature: float = 0.0, top_k: int = 0,
                 top_p: float = 1.0, seed: int = 0, stop: str | None = None) -> str:
        """The model's continuation of ``prompt`` (the new characters only), as ``attnlab
        generate`` writes it: greedy by default, else sampled at ``temperature`` from the
        ``top_k`` most likely characters and the ``top_p`` probability mass, seeded by ``seed``;
        it ends after ``max_new`` characters, at the block's end or after the ``stop`` character."""
        return continue_texts(self.gpt, self.vocab, [prompt], max_new=max_new, temperature=temperature,
                              top_k=top_k, top_p=top_p, seed=seed, stop=stop)[0]

    def trace(self, question: str, *, name: str | None = None, kinds: Iterable[str] = KINDS,
              settings: TraceSettings = TraceSettings(), **changes: Any) -> Trace:
        """The causal trace of ``question`` (``attnlab trace``): for each hidden state (kind,
        layer, position) the probability of the model's clean answer that copying it from the
        clean run into a run with the name's embeddings corrupted brings back (``recovered``:
        kind -> (layers, positions)). ``kinds``: which states are restored, of "residual",
        "mlp" and "attention"; ``changes`` set fields of ``settings`` (``noise``, ``samples``,
        ``seed``)."""
        settings = settings.replace(**changes)
        return trace(self.gpt, self.vocab, question, name=name, kinds=tuple(kinds), **settings.to_dict())

    def edit(self, person: str, place: str, *, corpus: str | os.PathLike | None = None,
             train_file: str | os.PathLike | None | Literal["own"] = "own", eval_file: str | os.PathLike | None = None,
             relation: str | None = None, settings: EditSettings = EditSettings(), **changes: Any) -> LoadedModel:
        """A NEW model in which ``person`` was born in ``place`` (``relation``: which answer of
        a model of several relations), as ``attnlab edit`` makes it
        (this model is unchanged): a gated edit by default, ``method="rome"`` for a rank-one one,
        ``method="finetune"`` for plain finetuning on the one question
        (``changes`` set fields of ``settings``). ``corpus`` gives the person's line and the key
        statistics, ``train_file`` their answer format (None: no training answers), both by
        default the fact set's (``attnlab edit`` too), else the course's; ``eval_file``
        (optional) the other answers whose changes are counted. The report (efficacy,
        generalisation, specificity, settings) is the new model's ``edit_report``; an edit that
        misses is an EditFailed."""
        if corpus is None:
            corpus = self.fact_set.corpus if self.fact_set else DEFAULT_CORPUS
        if train_file == "own":
            train_file = self.fact_set.train if self.fact_set else DEFAULT_TRAIN
        docs = read_corpus(found(corpus)).split("\n")
        trained = training_answers(train_file and found(train_file), Schema.from_list(self.config.relations))
        settings = settings.replace(**changes)
        edited, report = edit_fact(self.gpt, self.vocab, person, place, docs, settings=settings, trained=trained,
                                   relation=relation,
                                   eval_file=eval_file and found(eval_file), corpus_name=str(corpus))
        meta = {**self.checkpoint.meta, "edit": report}
        checkpoint = replace(self.checkpoint, meta=meta, path=None, model_state=edited.state_dict(),
                             edits=list(edited.edits))
        return LoadedModel(edited, self.vocab, checkpoint)

    @property
    def edit_report(self) -> dict[str, Any] | None:
        """The report of the edit that made this model (``edit``), else None."""
        return self.checkpoint.meta.get("edit")

    @property
    def edits(self) -> list[dict[str, Any]]:
        """The edits this model holds, oldest first (``attnlab edits``)."""
        return list(self.gpt.edits)

    def save(self, path: str | os.PathLike, *, overwrite: bool = False) -> Path:
        """Write the model as a checkpoint every command and ``attnlab.load`` read: ``path`` is a
        run directory (``path/checkpoint.safetensors``) or a ``.safetensors`` file. The write is
        atomic (a temporary file, then a rename), and an existing checkpoint is refused (a
        PathError) unless ``overwrite``. Returns the file written."""
        target = Path(path)
        if target.suffix != ".safetensors":
            target = target / CHECKPOINT_NAME
        if os.path.lexists(target) and not overwrite:
            raise PathError(target, "already exists; pass overwrite=True to replace it, or choose another path")
        return save_checkpoint(target, self.gpt, self.vocab, meta=self.checkpoint.meta)

    def to_transformer_lens(self):
        """This model as a TransformerLens ``TransformerBridge`` (TransformerLens 4's successor of
        ``HookedTransformer``; the ``interop`` extra) whose logits equal this model's:
        ``run_with_cache``, ``run_with_hooks`` and TransformerLens's hook names
        (``hook_embed``, ``blocks.0.hook_resid_post``) work on it, on character ids
        (``vocab.encode``). A model TransformerLens cannot express (attention other than vanilla
        or rotary, gated edits) is an ExportError (a ValueError) saying why."""
        from .interop.tlens import to_transformer_lens

        return to_transformer_lens(self.gpt)

    def export(self, out: str | os.PathLike, *, to: str = "transformer-lens", eval_file: str | os.PathLike | None = None,
               overwrite: bool = False, source: str = "<model>"):
        """Write this model as a TransformerLens model into the folder ``out``, as ``attnlab
        export`` does (``to``: only "transformer-lens"), once its logits are checked to equal
        this model's to 1e-5 at every position of ``eval_file``'s questions (default: the fact
        set's dev file) in the model's answer format. Returns the ``Exported`` record (the
        largest difference seen); existing files are refused unless ``overwrite``."""
        from .interop import tlens

        if to != "transformer-lens":
            raise ValueError(f"cannot export to {to!r}: the one target is 'transformer-lens'")
        if eval_file is None:
            eval_file = self.fact_set.dev if self.fact_set else DEFAULT_DEV
        corpus = self.fact_set.corpus if self.fact_set else DEFAULT_CORPUS
        questions = read_questions(found(eval_file), labelled=True)
        lines = read_corpus(found(corpus)).split("\n") if self.config.qa_format in RECALLING_FORMATS else None
        texts = tlens.check_texts(self.gpt, self.vocab, questions, lines)
        return tlens.export(self.gpt, self.vocab, out, texts, source=source, check_file=str(eval_file),
                            overwrite=overwrite)

    @property
    def hook_names(self) -> list[str]:
        """Every activation ``run_with_cache`` can read (attnlab/model/hooks.py)."""
        return hook_names(self.gpt)

    def run_with_cache(self, text: str, names: Iterable[str] | None = None) -> tuple[Tensor, dict[str, Tensor]]:
        """One forward pass over ``text``: the logits (1, T, vocab) and the activations named
        ``names`` (default: every hook point, ``hook_names``; one name may be a string), each with its batch dimension of 1,
        e.g. ``cache["blocks.0.mlp.out"]`` (1, T, C) or ``cache["blocks.0.attn.pattern"]``
        (1, heads, T, T)."""
        if not isinstance(text, str):
            raise TypeError(f"run_with_cache takes a text (a string), got {type(text).__name__}")
        if not text:
            raise ValueError("run_with_cache needs a text of at least one character, got ''")
        names = self.hook_names if names is None else [names] if isinstance(names, str) else list(names)
        ids = torch.tensor([self.vocab.encode(text, source="<text>")], device=self.device)
        with torch.no_grad(), capturing(self.gpt, names) as cache:
            logits, _ = self.gpt.run(ids, need_weights=needs_weights(names))
        return logits, dict(cache)


def _check_question(question: Any, source: str, line: int) -> None:
    """A question is a non-empty line of text (DataError naming ``source`` and its line)."""
    if not isinstance(question, str):
        raise TypeError(f"{source}:{line}: a question must be a str, got {type(question).__name__}")
    if not question.strip():
        raise DataError(source, line, "empty question")
    if "\n" in question.strip() or "\r" in question.strip():
        raise DataError(source, line, "a question is one line; this one holds a line break")


def load(path: str | os.PathLike, device: str = "auto", *, facts: str | os.PathLike | None = None,
         other_facts: bool = False, **overrides: Any) -> LoadedModel:
    """Load a trained model: the model of a run directory or checkpoint file, in eval mode,
    ready to answer questions.

    Args:
        path: a run directory (holding ``checkpoint.safetensors``), a checkpoint file, or a
            shipped model such as ``"models/cpu"`` (found from any directory).
        device: ``"auto"`` (CUDA when there is one), ``"cpu"``, ``"cuda"`` or ``"cuda:N"``.
        facts: a fact-set folder (docs/guides/your-facts.md) the model is for; by default the
            one a run of ``attnlab learn`` records (``model.fact_set``). A copy of the run's own
            (moved elsewhere) is that set; another set is a DataError unless ``other_facts``.
        other_facts: take ``facts`` although the run learned another set (or its own changed).
        **overrides: config fields that add no parameters, e.g. ``attention="argmax"`` to read
            a vanilla model with hard attention.

    Returns:
        a ``LoadedModel``: ``ask`` answers a question or a list of them (a list of answers,
        each with its confidence), ``generate``
        continues text, ``trace`` and ``edit`` find and correct a fact, ``gpt`` and ``vocab``
        are the model and its vocabulary.

    Raises:
        CheckpointError (a ValueError) naming the file when it is missing or damaged.

    Example::

        >>> import attnlab
        >>> model = attnlab.load("models/cpu")
        >>> [answer] = model.ask("Where was Alfred Mele born?")
        >>> answer.answer, round(answer.confidence, 2)
        ('Detroit', 0.78)
    """
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"load takes the path of a run directory or a checkpoint file, got {type(path).__name__}")
    model = LoadedModel(*load_model(found(path), device, **overrides))
    model.fact_set = factset.load(facts) if facts is not None and other_facts else _fact_set_of(found(path), facts)
    model.stored = read_stored(found(path))
    return model


def _fact_set_of(run: Path, facts: str | os.PathLike | None) -> FactSet | None:
    """The run's own fact set, or ``facts`` when it is the same set (moved or copied: its content counts)."""
    learned = factset.learned_record(run)
    if facts is None:
        return learned.load() if learned is not None else None
    chosen = factset.load(facts)
    if learned is not None and not learned.same_as(chosen):
        raise DataError(str(facts), None, f"{run} learned another fact set ({learned.name} at {learned.path})")
    return chosen
