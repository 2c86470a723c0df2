"""The abstention rule and confidence correction stored with a run: ``abstention.json`` beside
the checkpoint, written by ``attnlab calibrate`` (and ``finetune`` when it holds people out), so
that ``ask`` reads a fitted rule in a millisecond instead of answering the held-out people again.

The file names the weights it was fitted for (``weights_digest``: sha256 of the model's tensors)
and the policy fields the fit depends on (the held-out file, its share, the share of right
answers kept); a file for other weights or another policy is not used, and the rule is fitted
afresh. Nothing in it comes from dev or test labels: the rules and the correction are fitted on
training-file people held out from finetuning (abstention.py ``fit_rules``, calibration.py
``fit_correction``).
"""

from __future__ import annotations

import hashlib
import json
import os
import weakref
from pathlib import Path
from typing import Any

from ..core import logs
from ..core.paths import write_atomically
from ..data.subject_orders import DEFAULT_ORDER, recorded_holdout
from .calibration import Correction, PartsCorrection

STORED_NAME = "abstention.json"
# 4: a rule may hold a joint threshold on the name and the answer together ("both" does); 3:
# the confidence threshold keeps the conformal count of held-out right answers (2 kept
# ceil(keep * n)); 2: the correction is beta calibration (1 stored a temperature). A format-3
# file reads as it was written (its rules have no joint threshold).
FORMAT = 4
READS = (3, 4)
# The policy fields a fit depends on; a stored fit answers a policy only when these agree. A fit
# stored before a field existed was made at its value here.
FIT_FIELDS = ("holdout_file", "holdout_fraction", "keep_right", "subject_order")
FIT_FIELD_BEFORE = {"subject_order": DEFAULT_ORDER}


def weights_digest(model) -> str:
    """sha256 over the model's tensors in name order: the identity of the weights a rule was
    fitted for (an edited or further trained model has other weights).

    Kept per model while no tensor changes (each tensor's storage and version counter, which
    every in-place change bumps): a served model checks its stored correction at every batch,
    and hashing every weight each time would cost more than the batch's bookkeeping."""
    state = sorted(model.state_dict().items())
    key = tuple((name, t.data_ptr(), t._version) for name, t in state)
    kept = _DIGESTS.get(model)
    if kept is not None and kept[0] == key:
        return kept[1]
    h = hashlib.sha256()
    for name, tensor in state:
        h.update(name.encode())
        h.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    _DIGESTS[model] = (key, h.hexdigest())
    return _DIGESTS[model][1]


_DIGESTS: "weakref.WeakKeyDictionary[Any, tuple[tuple, str]]" = weakref.WeakKeyDictionary()


def stored_path(run: str | os.PathLike) -> Path:
    """Where a run's stored rule lives: beside its checkpoint (``run`` is a run directory or a
    checkpoint file)."""
    run = Path(run)
    return (run if run.is_dir() else run.parent) / STORED_NAME


def read_stored(run: str | os.PathLike | None) -> dict[str, Any] | None:
    """The run's stored fit, or None when there is none or it cannot be read (a damaged file
    is ignored: the rule is fitted again, which is slow but right; a file of another format is
    said so once, with how to store a new one)."""
    if run is None:
        return None
    path = stored_path(run)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    if data.get("format") not in READS:
        logs.warn(f"{path} was written by another version of attnlab (format {data.get('format')}, this one "
                  f"reads {' and '.join(map(str, READS))}): the rule is fitted again at each start; `attnlab calibrate {path.parent}` "
                  "stores a new one")
        return None
    try:  # every rule and the correction must read, or none is used
        stored_rules(data)
        stored_correction(data)
    except (ValueError, TypeError, KeyError, AttributeError) as e:
        logs.warn(f"{path} cannot be read ({e}): the rule is fitted again at each start; "
                  f"`attnlab calibrate {path.parent}` stores a new one")
        return None
    return data


def matches(stored: dict[str, Any] | None, digest: str, fit: dict[str, Any]) -> bool:
    """Whether ``stored`` was fitted for these weights and these policy fields."""
    if not stored or stored.get("weights") != digest:
        return False
    policy = stored.get("policy", {})
    return all(policy.get(k, FIT_FIELD_BEFORE.get(k)) == fit.get(k) for k in FIT_FIELDS)


def stored_json(digest: str, fit: dict[str, Any], rules: dict[str, Any], correction: Correction | None,
                held_out: dict[str, int]) -> str:
    """The file's text: the weights, the policy fields, each fitted rule, the confidence correction."""
    rules_out = {kind: {"confidence": r.confidence, "familiarity": r.familiarity, "how": r.how,
                        **({"measure": r.measure} if r.needs_familiarity else {}),
                        **({"joint": r.joint} if r.joint is not None else {}),
                        **({"score": "chance"} if r.chance is not None else {})}
                 for kind, r in rules.items()}
    body = {"format": FORMAT, "weights": digest, "policy": {k: fit[k] for k in FIT_FIELDS},
            "rules": rules_out,
            "correction": correction.to_dict() if correction else None, "held_out": held_out}
    return json.dumps(body, indent=2) + "\n"


def write_stored(path: str | os.PathLike, text: str) -> Path:
    """Atomically (a derived file: replacing an older fit is what storing means)."""
    return write_atomically(path, text)


def stored_correction(stored: dict[str, Any] | None) -> Correction | None:
    """The stored confidence correction, or None when the fit had none (no people held out, or
    all of them answered right or all wrong)."""
    return Correction.from_dict((stored or {}).get("correction"))


def stored_rules(stored: dict[str, Any]) -> dict[str, Any]:
    """The stored rules as ``Rule`` objects, by kind (both, name, confidence)."""
    from .abstention import MEASURE_BEFORE, Rule

    chance = stored_correction(stored)

    def number(value):
        return None if value is None else float(value)

    return {kind: Rule(number(r.get("confidence")), number(r.get("familiarity")), f"stored: {r.get('how', '')}",
                       chance if r.get("score") == "chance" else None, r.get("measure", MEASURE_BEFORE),
                       number(r.get("joint")))
            for kind, r in stored.get("rules", {}).items()}


def fit_for_storing(model, vocab, meta: dict[str, Any], policy, *, batch_size: int = 256) -> str:
    """Fit every rule of ``policy`` (an AbstainPolicy; its mode does not matter) and, when the
    run records people held out from finetuning, the correction of its confidence, all on those
    people, answered once; the text of abstention.json."""
    from ..core.datafiles import resolve
    from .abstention import fitted_on_held_out

    fit = policy.fit_fields(meta)
    rules, correction, held = fitted_on_held_out(model, vocab, resolve(fit["holdout_file"]), fit["holdout_fraction"],
                                                 policy.keep_right, order=fit["subject_order"],
                                                 correct=recorded_holdout(meta) > 0, batch_size=batch_size)
    return stored_json(weights_digest(model), fit, rules, correction,
                       {"people": len(held.right), "right": sum(held.right)})
