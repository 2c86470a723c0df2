"""The model shipped in models/cpu/ (issue 11): small, weights only, and it knows what its
provenance says it knows."""

import json
from pathlib import Path

from attnlab.model.checkpoint import load_checkpoint, load_model
from attnlab.data.datasets import read_qa
from attnlab.answering.evaluate import evaluate
from attnlab.model.shipped import is_shipped, output_dir

REPO = Path(__file__).resolve().parents[1]
SHIPPED = REPO / "models" / "cpu"


def test_the_shipped_model_is_weights_only_and_under_20_mb():
    assert is_shipped(SHIPPED)
    assert (SHIPPED / "checkpoint.safetensors").stat().st_size <= 20 * 2**20
    ckpt = load_checkpoint(SHIPPED)
    assert not ckpt.optimizer_state  # weights only
    assert ckpt.model_config.qa_format == "recall"
    provenance = json.loads((SHIPPED / "provenance.json").read_text())
    assert {"commands", "commit", "wall_s", "dev_correct", "dev_total"} <= provenance.keys()
    assert output_dir(SHIPPED) == REPO / "runs" / "cpu"  # the checkout's runs/, from any directory


def test_the_shipped_model_scores_on_dev_what_its_provenance_says():
    model, vocab, _ = load_model(SHIPPED)
    examples = read_qa(REPO / "data" / "birth_dev.tsv", labelled=True)
    _, score = evaluate(model, vocab, examples)
    provenance = json.loads((SHIPPED / "provenance.json").read_text())
    assert (score.correct, score.total) == (provenance["dev_correct"], provenance["dev_total"])
    assert score.correct > 0.3 * score.total  # it knows things: the London baseline is 25/500
