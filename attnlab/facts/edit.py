"""Rank-one model editing (Meng et al. 2022, ROME, section 3): change where one person was born
by changing one MLP's output weights.

ROME reads an MLP's output matrix W (here ``blocks[l].mlp_proj``, out = W k + b) as a key-value
memory: the key k is the MLP's hidden activation (its input to W) at one position, the value
W k + b is what the MLP writes into the residual stream there. The edit:

1. key k* = the hidden activation at the locus (``at``, see LOCI) of the edit input: ROME's
   subject's last token (``name``: the name's last character, the mean over the name's
   occurrences when a recalled line repeats it), or where the place is read out (``answer``:
   the character before the new place is first written), which is where causal tracing finds
   the fact in our recall-format models (docs/guides/facts.md); or
   (``both``) two keys, each with its own value (W' = W + delta_1 u_1^T + delta_2 u_2^T, the
   deltas optimised jointly): there and at the ``⁇`` before the answer, the answer's own
   read-out, when the recalled line spells the place (``answer`` falls back to it, edit_model);
2. u = C^-1 k* / (k*^T C^-1 k*), where C = E[k k^T] is the second moment of keys over a sample
   of the corpus: u^T k* = 1, and u^T k is small for keys unlike k* in the directions keys
   usually take;
3. W' = W + delta u^T, so the MLP's output changes by delta (u^T k) for a key k (by delta at
   k*), with delta optimised by gradient descent, the rest of the model fixed and the edit
   applied exactly while optimising, until the edited model answers the new place, then shrunk
   while it still does (optimise_value).

Every other input sees delta (u^T k), and u^T k is rarely zero (its mean square is at least
1 / (k*^T C^-1 k*), about 1/width for a key as typical as the read-out's; along another
answer's hundred-odd characters its largest value is about 0.2 at the read-out key, and about
0.1 at the most distinctive position of any layer: benchmarks/editing.py "key overlap"), so the
smaller delta, the fewer other answers move: the optimiser takes small steps, and once the edit
works it looks for the smallest delta that still works.

The edit input follows the model's answer format (tracing.answer_point): ``question⁇PLACE⁇``
for ``direct``; for ``recall`` the model's own recalled text with its answer replaced by the new
place where the text spells it, then ``⁇PLACE⁇`` -- so the recalled line and the read-out agree.
"""

from __future__ import annotations

import contextlib
import copy
import random
from dataclasses import dataclass

import torch
from torch import Tensor

from ..model.gpt import GPT
from ..model.hooks import capturing, hook_point
from .errors import EditError
from ..data.vocab import MASK_CHAR, PAD_ID, Vocab
from ..data.datasets import QAExample
from ..data.corpus import alike_spans, quote_in


# Where the key of an edit is read: ROME's subject's last token (the name's last character), or
# where the place is read out (the position before the place's first character), which is where
# causal tracing of the recall-format models finds the fact (docs/guides/facts.md;
# the measurements: docs/notebook.md).
# ``both``: two keys, one at each read-out of the place (the recalled line's and the answer's after
# ``⁇``), each with its own value (a rank-two edit); the answer's alone when the line does not
# spell the place.
from .settings import LOCI  # noqa: E402 (defined with the settings, without torch: the flags' choices)


def check_layer(model: GPT, layer: int) -> int:
    if not 0 <= layer < model.config.n_layer:
        raise EditError(f"--layer {layer} is out of range: the model has layers 0..{model.config.n_layer - 1}")
    return layer


# ---- keys ------------------------------------------------------------------------------------
def _keys_hook(model: GPT, layer: int, store: list[Tensor]):
    """Record the input of the MLP's output matrix (the key vectors, hook point
    ``blocks.L.mlp.hidden``) on every forward pass."""
    return hook_point(model, f"blocks.{layer}.mlp.hidden").read(lambda keys: store.append(keys.detach()))


def _right_padded(rows: list[list[int]], device) -> Tensor:
    """The rows as one (len(rows), longest) batch, padded on the right with PAD_ID: in a causal
    model right padding changes nothing before it."""
    idx = torch.full((len(rows), max(map(len, rows))), PAD_ID, dtype=torch.long, device=device)
    for b, ids in enumerate(rows):
        idx[b, :len(ids)] = torch.tensor(ids, device=device)
    return idx


def _batch_keys(model: GPT, rows: list[list[int]], layer: int, batch_size: int):
    """For each batch of ``rows``: the batch's rows, their padded ids (B, T) and ``layer``'s keys
    there (B, T, 4C)."""
    device = model.tok_emb.weight.device
    for start in range(0, len(rows), batch_size):
        part = rows[start:start + batch_size]
        idx = _right_padded(part, device)
        yield part, idx, batch_keys_of(model, idx, layer)


@torch.no_grad()
def key_second_moment(model: GPT, vocab: Vocab, texts: list[str], layer: int, *,
                      batch_size: int = 64) -> Tensor:
    """C = E[k k^T] over every position of ``texts`` (each cut to the block), (4C, 4C)."""
    block = model.config.block_size
    rows = [vocab.encode(t[:block]) for t in texts if t]
    if not rows:
        raise EditError("no texts to estimate the key statistics from")
    device = model.tok_emb.weight.device
    width = model.blocks[layer].mlp_proj.in_features
    total = torch.zeros(width, width, dtype=torch.float64, device=device)
    count = 0
    model.eval()
    for _, idx, batch in _batch_keys(model, rows, layer, batch_size):
        keys = batch[idx != PAD_ID].double()
        total += keys.T @ keys
        count += keys.shape[0]
    return (total / count).float()


def stat_texts(model, docs: list[str], limit: int, seed: int, trained: list[QAExample] | None = None) -> list[str]:
    """Texts in the form the model was trained on, to gather key statistics from, a seeded
    sample of ``limit`` (0 = all): the corpus lines, in the recall format cut as recall training
    strings followed, for the subjects of ``trained`` (the training file's labelled questions),
    by their answers as the model was finetuned (with the relation's cue in a model of several
    relations); in the direct format the training questions with their answers are added. So
    the statistics also know the keys of the answer's read-out and spelling, which every other
    answer passes through, and an edit disturbs fewer other answers (measured in
    docs/notebook.md, editing probes)."""
    from ..data.formats import text_format
    from ..data.relations import Schema

    docs = [d for d in docs if d.strip()]
    texts = text_format(model.config.qa_format).training_texts(docs, trained or [], model.config.recall_chars,
                                                               Schema.from_list(model.config.relations),
                                                               model.config.quote)
    if limit and len(texts) > limit:
        texts = random.Random(seed).sample(texts, limit)
    return texts


# ---- the edit input --------------------------------------------------------------------------
@dataclass(frozen=True)
class EditInput:
    text: str  # the full sequence the model should produce (teacher forced)
    prompt_len: int  # characters given, not predicted
    name_last: int  # position of the name's last character in the question or recall opening
    old_answer: str
    name: str = ""
    given: tuple[int, ...] = ()  # later positions that are given, not predicted
    place_at: tuple[int, ...] = ()  # where the new place starts in text (its closing mark follows the last)
    place_len: int = 0

    @property
    def focus(self) -> list[int]:
        """Positions of text that spell the new place, and the closing mark of the answer."""
        spots = [p for start in self.place_at for p in range(start, start + self.place_len)]
        return spots + [len(self.text) - 1]


    @property
    def name_positions(self) -> list[int]:
        """The last character of every occurrence of the name (a recalled line may repeat it)."""
        from .trace import occurrences

        first = self.name_last + 1 - len(self.name)
        return [s + len(self.name) - 1 for s in occurrences(self.text, self.name, first)]

    @property
    def answer_position(self) -> int:
        """The position whose next character is the first of the new place where the model
        first produces it (in the recalled line when the line spells it, else after ``⁇``):
        where the place is read out of the weights, the end of the trace's input."""
        return self.place_at[0] - 1

    @property
    def mark_position(self) -> int:
        """The ``⁇`` before the answer: where the answer itself is read out."""
        return self.place_at[-1] - 1

    def key_groups(self, at: str) -> list[list[int]]:
        """For the locus ``at``, the groups of positions each of whose keys (their mean) gets its
        own value: one group, or for ``both`` the line's read-out and the answer's when they
        differ."""
        if at not in LOCI:
            raise EditError(f"--at must be one of {', '.join(LOCI)}, got {at!r}")
        if at == "name":
            return [self.name_positions]
        if at == "both" and self.mark_position != self.answer_position:
            return [[self.answer_position], [self.mark_position]]
        return [[self.answer_position]]

    def key_positions(self, at: str) -> list[int]:
        """Where the keys are read and the values written, for the locus ``at``."""
        return [p for group in self.key_groups(at) for p in group]


# A copied answer shorter than this is not looked for by its prefix (one or two letters match
# anywhere).
MIN_PREFIX = 3


def place_span(line: str, answer: str, name: str, start: int) -> tuple[int, int] | None:
    """Where ``line`` (a recalled line) spells the place the model answered, (start, end), or
    None: the first occurrence of ``answer`` from ``start`` on outside every occurrence of the
    name (a recalled line repeats the name, and a name may contain a place's letters: "John
    Henry" answered "Henry"); else, since the model's read-out sometimes miscopies the line
    ("Pennsylvania" read out as "Penniva", "Moulins" as "Moulinss"), the line's word that starts
    with the longest prefix of ``answer`` (at least MIN_PREFIX characters) outside the name; else
    the words that write it in other letters (data/corpus.py ``alike``)."""
    if not answer:
        return None
    from .trace import occurrences

    names = [(s, s + len(name)) for s in occurrences(line, name, 0)]

    def outside_name(a: int, b: int) -> bool:
        return all(b <= s or a >= e for s, e in names)

    for at in occurrences(line, answer, start):
        if outside_name(at, at + len(answer)):
            return at, at + len(answer)
    for n in range(len(answer) - 1, MIN_PREFIX - 1, -1):
        for at in occurrences(line, answer[:n], start):
            word_start = at == 0 or not line[at - 1].isalnum()
            end = at + n
            while end < len(line) and line[end].isalnum():
                end += 1
            if word_start and outside_name(at, end):
                return at, end
    # an answer the line writes in other letters ("among its provinces" answered "Province")
    return next((span for span in alike_spans(line, answer, start) if outside_name(*span)), None)


def question_about(model: GPT, name: str, relation: str | None = None) -> str:
    """The question an edit answers: ``relation`` (by name) asked of ``name``; the model's one
    relation when None (``Where was NAME born?`` for the course's set), which a model of several
    relations refuses (an EditError: the edit must say which answer it changes)."""
    return _relation(model, relation).ask(name)


def _relation(model: GPT, relation: str | None):
    from ..data.relations import Schema

    schema = Schema.from_list(model.config.relations)
    if relation is not None:
        try:
            return schema.relation(relation)
        except ValueError as e:
            raise EditError(str(e)) from None
    if schema.cued:
        raise EditError(f"this model answers several relations ({', '.join(schema.names)}): name the one "
                        "the edit changes")
    return schema.relations[0]


def edit_input(model: GPT, vocab: Vocab, name: str, place: str, relation: str | None = None) -> EditInput:
    """The sequence that says ``name`` was born in ``place`` (or, with ``relation``, that this
    relation of ``name`` is ``place``), in the model's answer format: what the model reads before
    its answer, with the old answer it wrote there (a recalled line) replaced, then the relation's
    cue ``cue⁇`` when the model reads several relations (given, as the answerer gives it), then
    the new answer."""
    from ..answering.formats import answer_format, cue_text
    from ..data.relations import Schema

    question = question_about(model, name, relation)
    fmt = answer_format(model.config.qa_format)
    got = fmt.answer_one(model, vocab, question, name)
    read = fmt.reading(question, name, got, model.config.recall_chars)
    text, spots = read.text, []
    span = place_span(text, got.answer, name, read.prompt_len)
    if span is not None:
        at, end = span
        text = (text[:at] + place + text[end:])[:model.config.recall_chars]
        spots.append(at)
    cued = cue_text(model.config, _relation(model, relation))
    # a quoting model writes the edited sentence before the new place, as it was trained to
    said = quote_in(text, read.prompt_len, place) + MASK_CHAR if model.config.quote else ""
    spots.append(len(text) + 1 + len(cued) + len(said))
    given = (len(text),) if read.given else ()  # a closing mark the answerer set closes the edited text
    given += tuple(range(len(text) + 1, len(text) + 1 + len(cued)))  # the cue and its mark: the answerer's
    return EditInput(text + MASK_CHAR + cued + said + place + MASK_CHAR, read.prompt_len,
                     read.name_start + len(name) - 1, got.answer, name, given, tuple(spots), len(place))


# ---- the edit --------------------------------------------------------------------------------
@dataclass
class Edit:
    layer: int
    key: Tensor  # the keys k*_i, (m, 4C): one per key group (m = 1 but for ``both``)
    delta: Tensor  # their values' changes delta_i, (m, C): W' = W + sum_i delta_i u_i^T
    loss_before: float  # weighted mean negative log-likelihood of the edit input's predicted characters
    loss_after: float  # ... under the edit, at the last optimisation step
    steps: int
    positions: list[int]  # where the key was read in the edit input (their mean)


def _target(ids: list[int], prompt_len: int, device, given: tuple[int, ...] = ()) -> tuple[Tensor, Tensor]:
    """Inputs and next-character targets; given characters (the prompt, a forced mark) are not
    scored."""
    x = torch.tensor([ids[:-1]], device=device)
    y = torch.tensor([ids[1:]], device=device)
    y[0, :prompt_len - 1] = PAD_ID
    for p in given:
        y[0, p - 1] = PAD_ID
    return x, y


def optimise_value(model: GPT, x: Tensor, y: Tensor, weights: Tensor, layer: int, positions: list[int],
                   directions: Tensor, succeeded=None, *, steps: int = 600, lr: float = 0.005,
                   weight_decay: float = 0.1, clamp: float = 4.0, check_every: int = 5,
                   tighten_steps: int = 200, margin: float = 0.5,
                   tighten_lr: float = 0.002) -> tuple[Tensor, float, float, int]:
    """The vectors delta_i (m, C) of the edit W' = W + sum_i delta_i u_i^T (u_i: the rows of
    ``directions``, (m, 4C); one for a rank-one edit) of ``layer``'s MLP output matrix that make
    the model produce y, optimised jointly. During the optimisation the edit is applied exactly,
    by a hook adding sum_i (u_i^T k) delta_i to the matrix's output for every key k, so the model
    optimised is the edited model, on this input and on any other (a generation too).

    Every other input sees delta (u^T k) too, so the smaller delta, the fewer other answers move
    (a random delta of the same norm moves about as many as the optimised one, docs/notebook.md,
    editing probes). Two phases:

    1. reach: the ``weights``-weighted mean NLL of y + weight_decay ||delta||^2 / s^2, with
       ||delta_i|| <= clamp x s (ROME's two regularisers; s: the norm of the residual stream at
       the key ``positions``; ROME scales by the MLP output's norm, but in a small model an early
       MLP's output can be far smaller than the stream it must steer), by Adam with small steps
       until the edit first works: every ``check_every`` steps, once the model's greedy choice
       is right at every fully weighted position of y (cheap, from the step's logits),
       ``succeeded(delta)`` (e.g. "the model with this edit merged into its weights answers the
       new place", a decode) is asked.
    2. tighten (``tighten_steps``, only when ``succeeded`` is given): the smallest delta that
       still works, by Adam on ||delta||^2 / |delta_reached|^2 + 10 x the mean hinge
       max(0, ``margin`` - (logit of y - best other logit)) over the fully weighted positions,
       keeping the smallest delta that ``succeeded`` accepts: a smaller change moves fewer other
       answers (docs/notebook.md, editing probes).

    Returns delta, loss before, loss after (of the delta returned), steps of phase 1."""
    focus = (weights[0] >= 1.0) & (y[0] != PAD_ID)

    def loss_of(logits: Tensor) -> Tensor:
        nll = torch.nn.functional.cross_entropy(logits[0].float(), y[0], ignore_index=PAD_ID, reduction="none")
        return (nll * weights[0]).sum() / weights[0].sum()

    def greedy_right(logits: Tensor) -> bool:
        return bool(torch.equal(logits[0][focus].argmax(-1), y[0][focus]))

    logits, scale, width = _clean_run(model, x, layer, positions)
    before = float(loss_of(logits))
    u = directions.to(x.device).reshape(-1, directions.shape[-1])
    delta = torch.zeros(u.shape[0], width, device=x.device, requires_grad=True)

    def edit(_m, inputs, out):
        return out + (inputs[0] @ u.T) @ delta

    with _frozen(model), model.blocks[layer].mlp_proj.register_forward_hook(edit):
        step, after, reached = _reach(model, x, delta, loss_of, greedy_right, succeeded, scale, steps=steps,
                                      lr=lr, weight_decay=weight_decay, clamp=clamp, check_every=check_every)
        if reached and tighten_steps:
            _tighten(model, x, y, focus, delta, succeeded, steps=tighten_steps, margin=margin, lr=tighten_lr,
                     check_every=2 * check_every)
            with torch.no_grad():
                after = float(loss_of(model.run(x)[0]))
    return delta.detach(), before, after, step


@torch.no_grad()
def _clean_run(model: GPT, x: Tensor, layer: int, positions: list[int]) -> tuple[Tensor, float, int]:
    """The unedited model's logits on x, the mean norm of the residual stream after ``layer`` at
    ``positions`` (1 where it is 0: the scale of delta) and the stream's width."""
    name = f"blocks.{layer}.resid_post"
    with capturing(model, [name]) as cache:
        logits, _ = model.run(x)
    stream = cache[name]
    return logits, float(stream[0, positions].norm(dim=-1).mean()) or 1.0, stream.shape[-1]


@contextlib.contextmanager
def _frozen(model: GPT):
    """No parameter of ``model`` takes a gradient inside the block (only delta is optimised)."""
    params = list(model.parameters())
    grads = [p.requires_grad for p in params]
    for p in params:
        p.requires_grad_(False)
    try:
        yield
    finally:
        for p, g in zip(params, grads):
            p.requires_grad_(g)


def _reach(model, x, delta, loss_of, greedy_right, succeeded, scale, *, steps, lr, weight_decay, clamp,
           check_every) -> tuple[int, float, bool]:
    """Phase 1 of optimise_value, in place on delta: (steps taken, last loss, whether
    ``succeeded`` said yes)."""
    opt = torch.optim.Adam([delta], lr=lr * scale)
    step, after = 0, float("nan")
    for step in range(steps + 1):
        logits, _ = model.run(x)
        loss = loss_of(logits)
        after = float(loss.detach())
        if (step and succeeded is not None and step % check_every == 0
                and greedy_right(logits.detach()) and succeeded(delta.detach())):
            return step, after, True
        if step == steps:
            break
        opt.zero_grad()
        (loss + weight_decay * delta.pow(2).sum() / scale ** 2).backward()
        opt.step()
        with torch.no_grad():
            norms = delta.norm(dim=-1, keepdim=True)
            delta.mul_((clamp * scale / norms.clamp_min(1e-12)).clamp(max=1.0))
    return step, after, False


def _tighten(model, x, y, focus, delta, succeeded, *, steps, margin, lr, check_every) -> None:
    """Phase 2 of optimise_value, in place on delta (which works): shrink it while the edit
    still works, ending on the smallest delta that ``succeeded`` accepted."""
    reached = float(delta.detach().norm()) or 1.0
    best, best_norm = delta.detach().clone(), reached
    opt = torch.optim.Adam([delta], lr=lr * reached)
    for step in range(1, steps + 1):
        logits = model.run(x)[0][0].float()[focus]
        target = y[0][focus]
        right = logits.gather(-1, target[:, None])[:, 0]
        other = logits.scatter(-1, target[:, None], float("-inf")).max(-1).values
        loss = delta.pow(2).sum() / reached ** 2 + 10 * torch.relu(margin - (right - other)).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % check_every == 0 and float(delta.detach().norm()) < best_norm and succeeded(delta.detach()):
            best, best_norm = delta.detach().clone(), float(delta.detach().norm())
    with torch.no_grad():
        delta.copy_(best)


@torch.no_grad()
def keys_of(model: GPT, x: Tensor, layer: int) -> Tensor:
    """The keys (inputs of the MLP's output matrix) at every position of x (1, T): (T, 4C)."""
    return batch_keys_of(model, x, layer)[0]


@torch.no_grad()
def batch_keys_of(model: GPT, idx: Tensor, layer: int) -> Tensor:
    """The keys at every position of a batch idx (B, T): (B, T, 4C)."""
    store: list[Tensor] = []
    handle = _keys_hook(model, layer, store)
    try:
        model.run(idx)
    finally:
        handle.remove()
    return store[0]


def update_direction(key: Tensor, second_moment: Tensor, ridge: float = 1e-3) -> Tensor:
    """u = C^-1 k / (k^T C^-1 k): u^T k = 1, and u is small along the directions keys usually
    take. ``ridge`` x mean diagonal is added to C so that a key direction the corpus never uses
    does not make the solve ill-conditioned."""
    c = second_moment.double()
    c = c + ridge * c.diagonal().mean() * torch.eye(c.shape[0], dtype=c.dtype, device=c.device)
    ck = torch.linalg.solve(c, key.double())
    return (ck / (key.double() @ ck)).to(key.dtype)


def rank_one_update(weight: Tensor, key: Tensor, delta: Tensor, second_moment: Tensor,
                    ridge: float = 1e-3) -> Tensor:
    """W + delta u^T (u: update_direction), so that the new W maps k to W k + delta."""
    u = update_direction(key, second_moment, ridge).double()
    return (weight.double() + delta.double()[:, None] * u[None, :]).to(weight.dtype)


def rank_update(weight: Tensor, keys: Tensor, deltas: Tensor, second_moment: Tensor,
                ridge: float = 1e-3) -> Tensor:
    """W + sum_i delta_i u_i^T for the keys (m, 4C) and deltas (m, C): one rank-one update per
    key, each with its own direction u_i (update_direction), as optimise_value applied them."""
    for key, delta in zip(keys, deltas):
        weight = rank_one_update(weight, key, delta, second_moment, ridge)
    return weight


@torch.no_grad()
def answer_of(model: GPT, vocab: Vocab, name: str, relation: str | None = None) -> str:
    """The model's greedy answer to "Where was NAME born?" (``relation``: that relation's
    question about NAME), generated in its answer format."""
    from ..answering.evaluate import answer_questions

    question = question_about(model, name, relation)
    return answer_questions(model, vocab, [QAExample(question, None, "<edit>", 1)])[0].answer


def edit_model(model: GPT, vocab: Vocab, name: str, place: str, layer: int, second_moment: Tensor, *,
               at: str = "answer", ridge: float = 1e-3, rest_weight: float = 0.1, relation: str | None = None,
               **optimiser) -> tuple[GPT, Edit, EditInput]:
    """A copy of ``model`` in which ``name`` was born in ``place`` (the original is untouched),
    with the key read at the locus ``at`` (LOCI). For ``answer``, when the one-key edit does not
    make the model answer the new place and the recalled line spells it, the two-key edit of
    ``both`` is made instead (from the original model): the failures of the one-key edit are
    mostly a line that already spells the new place followed by the old answer after ``⁇``,
    which the second key fixes, while ``both`` for every edit disturbs more other answers, so it
    is the fallback, not the rule (docs/notebook.md, editing probes). ``relation``: which answer
    of a model of several relations."""
    check_layer(model, layer)
    if at not in LOCI:
        raise EditError(f"--at must be one of {', '.join(LOCI)}, got {at!r}")
    vocab.encode(place, source="--place")
    vocab.encode(name, source="--person")
    if not place or MASK_CHAR in place:
        raise EditError(f"--place must be a non-empty place name without {MASK_CHAR}, got {place!r}")
    model.eval()
    target = edit_input(model, vocab, name, place, relation)
    ids = vocab.encode(target.text)
    if len(ids) > model.config.block_size + 1:
        raise EditError(f"the edit input ({len(ids)} characters) exceeds the model's block")
    x, y = _target(ids, target.prompt_len, model.tok_emb.weight.device, target.given)
    # The new place (and the answer's closing mark) is what must change; the rest of the
    # recalled line only has to stay as the model wrote it, so it weighs less.
    weights = torch.full(y.shape, rest_weight, device=y.device)
    weights[0, [p - 1 for p in target.focus]] = 1.0
    states = keys_of(model, x, layer)
    weight = model.blocks[layer].mlp_proj.weight.detach().clone()

    def edit_with(groups: list[list[int]]) -> tuple[GPT, Edit]:
        """The edit with one key (and value) per group of positions."""
        groups = [g for g in ([p for p in g if p < x.shape[1]] for g in groups) if g]
        positions = [p for g in groups for p in g]
        keys = torch.stack([states[g].mean(0) for g in groups])
        directions = torch.stack([update_direction(k, second_moment, ridge) for k in keys])
        # Success is judged on the edit merged into the weights, the model that is saved: the
        # optimiser's hook computes the same map in another order, and a shrunk delta sits close
        # enough to the edge that rounding can decide a greedy choice.
        edited = copy.deepcopy(model)

        def merge(delta: Tensor) -> GPT:
            with torch.no_grad():
                edited.blocks[layer].mlp_proj.weight.copy_(rank_update(weight, keys, delta, second_moment, ridge))
            return edited

        def answers_place(delta: Tensor) -> bool:
            return answer_of(merge(delta), vocab, name, relation) == place

        delta, before, after, steps = optimise_value(model, x, y, weights, layer, positions, directions,
                                                     answers_place, **optimiser)
        return merge(delta), Edit(layer, keys, delta, before, after, steps, positions)

    edited, edit = edit_with(target.key_groups(at))
    both = target.key_groups("both")
    if at == "answer" and len(both) > 1 and answer_of(edited, vocab, name, relation) != place:
        edited, edit = edit_with(both)
    return edited, edit, target


# ---- choosing the layer ----------------------------------------------------------------------
def answer_layer(model: GPT) -> int:
    """The default layer for an edit at the answer read-out: the one below the top. The top
    layer's MLP at the read-out position moves only the next character's logits, so it cannot
    spell a place of several characters (edits there do not take); the
    layer below is the highest whose change the top layer's attention carries to the place's
    later characters, and the best measured (docs/notebook.md, editing probes).
    Tracing does not choose it: restoring the top layer's MLP there recovers the most, for the
    same reason it cannot be edited (it writes the next character)."""
    return max(0, model.config.n_layer - 2)


@torch.no_grad()
def mlp_effect_by_layer(model: GPT, vocab: Vocab, question: str, *, name: str | None = None,
                        noise: float = 3.0, samples: int = 10, seed: int = 0):
    """Per layer, the recovered probability of the clean answer when only the MLP output at the
    name's last character is restored (tracing's MLP row at that column). Returns the values
    (L,) and the answer point."""
    from .trace import answer_point, patched_probabilities, record_states, sample_noise

    point = answer_point(model, vocab, question, name)
    if not point.answer:
        raise EditError(f"the model gives no answer to {question!r}: no trace to choose a layer by")
    ctx, ans = vocab.encode(point.context), vocab.encode(point.answer)
    ids = torch.tensor([ctx + ans], device=model.tok_emb.weight.device)
    _, clean = record_states(model, ids)
    plan = [[("mlp", layer, point.name_last)] for layer in range(model.config.n_layer)]
    total = torch.zeros(len(plan), dtype=torch.float64)
    for eps in sample_noise(model, point.name_end - point.name_start, noise, samples, seed):
        total += patched_probabilities(model, ids, ans, len(ctx), point.name_starts, eps, plan, clean).double().cpu()
    return (total / samples).numpy(), point


def default_layer(model: GPT, vocab: Vocab, question: str, at: str, **trace) -> tuple[int, object]:
    """The layer an edit at ``at`` uses when none is given, and the trace behind the choice
    (None for ``answer`` and ``both``): below the top for those (answer_layer); for ``name`` the
    strongest MLP effect at the name's last character in the trace of ``question``
    (mlp_effect_by_layer, with ``trace``'s noise, samples and seed)."""
    if at != "name":
        return answer_layer(model), None
    effects, _ = mlp_effect_by_layer(model, vocab, question, **trace)
    return int(effects.argmax()), effects


# ---- measuring an edit -----------------------------------------------------------------------
def place_slot(line: str | None, name: str, answers: list[str]) -> str | None:
    """The person's corpus line up to where their place is written (the first of ``answers``
    found after the line's opening ``NAME.``), or None when the line has none of them."""
    if not line:
        return None
    for answer in answers:
        at = line.find(answer, len(name) + 1) if answer else -1
        if at > 0:
            return line[:at]
    return None


@torch.no_grad()
def completes_with(model: GPT, vocab: Vocab, prefix: str, place: str) -> bool:
    """Greedy continuation of ``prefix`` starts with ``place``."""
    from ..model.generate import generate

    ids = vocab.encode(prefix)
    if len(ids) + len(place) > model.config.block_size:
        return False
    toks = generate(model, [ids], len(place)).tokens[0]
    return vocab.decode(toks).startswith(place)


def trajectory(model: GPT, vocab: Vocab, example, answer) -> tuple[list[int], list[int]]:
    """The characters the model read and wrote to give ``answer`` (an evaluate.Answer) to
    ``example``, and the positions of that sequence it chose greedily (the rest was given: the
    prompt, and in the recall format a closing mark forced by the recall budget)."""
    from ..answering.formats import answer_format, cue_text
    from ..data.relations import Schema

    asked = Schema.from_list(model.config.relations).parse(example.question, bare_subject=False)
    read = answer_format(model.config.qa_format).reading(example.question, asked.subject if asked else None,
                                                         answer, model.config.recall_chars)
    # The relation's cue (a recall model of several relations) is given, as the answerer gives it.
    head, chosen = read.text + MASK_CHAR + (cue_text(model.config, asked.relation) if asked else ""), list(read.written)
    said = answer.quoted + MASK_CHAR if answer.quoted is not None else ""  # a quoting model's choice too
    tail = said + answer.answer + (MASK_CHAR if answer.complete else "")
    chosen += range(len(head), len(head) + len(tail))
    return vocab.encode(head + tail), chosen


@torch.no_grad()
def trajectory_keys(model: GPT, vocab: Vocab, examples, answers, layer: int, *, batch_size: int = 64) -> list[Tensor]:
    """The keys of ``layer`` (inputs of its MLP output matrix) at every position of each
    example's trajectory (the characters read and written to give its answer): (T_i, 4C) each.
    With an edit's direction u, max |k u| over a trajectory is the largest share of delta that
    answer receives (benchmarks/editing.py, "key overlap")."""
    rows = [trajectory(model, vocab, e, a)[0] for e, a in zip(examples, answers)]
    out: list[Tensor] = []
    for part, _, keys in _batch_keys(model, rows, layer, batch_size):
        out += [keys[b, :len(ids)] for b, ids in enumerate(part)]
    return out


@torch.no_grad()
def changed_answers(edited: GPT, vocab: Vocab, examples, before, *, batch_size: int = 128) -> list[int]:
    """Indices of ``examples`` whose greedy answer under ``edited`` differs from ``before``
    (evaluate.Answer of the original model). Fast and exact: one teacher-forced pass over each
    original trajectory finds the rows where the edited model's greedy choice differs at some
    position; only those rows are decoded again, since a row that agrees everywhere would be
    decoded into the same characters."""
    from ..answering.evaluate import answer_questions

    device = edited.tok_emb.weight.device
    suspects = []
    rows = [trajectory(edited, vocab, e, a) for e, a in zip(examples, before)]
    for start in range(0, len(rows), batch_size):
        part = rows[start:start + batch_size]
        idx = _right_padded([ids for ids, _ in part], device)
        greedy = edited.run(idx)[0].argmax(-1)
        for b, (ids, chosen) in enumerate(part):
            at = torch.tensor(chosen, dtype=torch.long, device=device)
            if len(chosen) and not torch.equal(greedy[b, at - 1], idx[b, at]):
                suspects.append(start + b)
    if not suspects:
        return []
    again = answer_questions(edited, vocab, [examples[i] for i in suspects])
    return [i for i, a in zip(suspects, again) if a.answer != before[i].answer]
