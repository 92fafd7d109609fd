"""A process reward model trained with rlvr, used as another run's ``prm`` process-reward source: ``rlvr sft`` and
``rlvr train`` on ``steps:`` tasks make a causal LM that writes one label per step; ``reward.process: {source: prm,
options: {path: FOLDER, reader: labels}}`` reads it, and its step rewards reach the other run's batch."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
import yaml
from transformers import AutoModelForCausalLM, AutoTokenizer

from rlvr.cli import main
from rlvr.errors import UserError
from rlvr.models import TinySpec, build_tiny_model, save_tiny_model
from rlvr.models.tiny import char_tokenizer
from rlvr.rewards.process import check_process_options, compute_process, step_spans
from rlvr.tasks import Task, load_tasks
from rlvr.tasks.steps import BAD, GOOD, labelling_prompt
from rlvr.train.metrics import read_metrics

CHAR = char_tokenizer()
SPEC = TinySpec(hidden_size=64, num_layers=2, num_heads=4, intermediate_size=256)
STEPS_DATA = "steps:arithmetic:chain:terms=3,n=2000,seed=0"


@pytest.fixture(autouse=True)
def _one_thread():
    """Tiny models train fastest on one thread; two wait on each other on a busy 2-core machine."""
    torch.set_num_threads(1)


@pytest.fixture(scope="module")
def trained_prm(tmp_path_factory):
    """A tiny step labeller: `rlvr sft` on step-labelling tasks (the labels as the target), then 2 steps of
    `rlvr train` on them (the labels checked by exact match); the folder of the last checkpoint."""
    root = tmp_path_factory.mktemp("prm")
    base = save_tiny_model(root / "base", SPEC, seed=0)
    config = root / "labeller.yaml"
    config.write_text(yaml.safe_dump({"model": {"path": str(base)}, "data": {"train": STEPS_DATA},
                                      "train": {"progress": False}}))
    assert main(["sft", str(config), "data.completion_field=reference", "data.prompts_per_step=32",
                 "train.steps=60", "train.lr=3e-3", f"train.out={root / 'sft'}"]) == 0
    assert main(["train", str(config), f"model.path={root / 'sft' / 'checkpoint-60'}", "data.prompts_per_step=8",
                 "rollout.group_size=4", "rollout.max_new_tokens=5", "train.steps=2", "train.lr=1e-4",
                 f"train.out={root / 'rl'}"]) == 0
    rows = read_metrics(root / "rl")
    assert [r["step"] for r in rows] == [1, 2] and all("verifier_score_mean" in r for r in rows)
    return root / "rl" / "checkpoint-2"


def batch_of(texts: list[str]):
    """A right-padded batch of the character tokenizer's responses, each ending with EOS."""
    rows = [CHAR(t, add_special_tokens=False)["input_ids"] + [CHAR.eos_token_id] for t in texts]
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), CHAR.pad_token_id)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, :len(r)], mask[i, :len(r)] = torch.tensor(r), 1
    return SimpleNamespace(response_ids=ids, response_mask=mask)


def labeller_scores(folder, problem: str, lines: list[str]) -> list[float]:
    """p(+) - p(-) where the labeller writes each step's label, by plain unpadded forwards, its greedy labels fed
    back in turn."""
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    good, bad = (tokenizer(x, add_special_tokens=False)["input_ids"][0] for x in (GOOD, BAD))
    ids, scores = list(tokenizer(labelling_prompt(problem, lines))["input_ids"]), []
    for _ in lines:
        with torch.no_grad():
            pair = model(input_ids=torch.tensor([ids])).logits[0, -1, [good, bad]].softmax(-1)
        scores.append(float(pair[0] - pair[1]))
        ids.append(good if pair[0] >= pair[1] else bad)
    return scores


# (problem, response, the step lines the labeller is shown): steps of different counts in one batch, a blank line
# that joins the next step, a response without a newline
RESPONSES = [
    ("5+4+6=", "5+4=9\n9+6=15\n#15", ["5+4=9", "9+6=15", "#15"]),
    ("1+8+1=", "1+8=9\n9+1=13\n#13", ["1+8=9", "9+1=13", "#13"]),
    ("2+2+2=", "#6", ["#6"]),
    ("3+5+1=", "3+5=8\n\n8+1=9\n#9", ["3+5=8", "8+1=9", "#9"]),
    ("7+2+9=", "7+2=9\n9+9=18\n18+0=18\n#18", ["7+2=9", "9+9=18", "18+0=18", "#18"]),
]


@pytest.mark.parametrize("batch_size", [16, 2, 1])
def test_labels_reader_scores_each_step_where_the_labeller_writes_its_label(trained_prm, batch_size):
    texts = [r for _, r, _ in RESPONSES]
    tasks = [Task(prompt=p, reference="", id=str(i)) for i, (p, _, _) in enumerate(RESPONSES)]
    pr = compute_process("prm", batch_of(texts), texts, tasks, CHAR, path=str(trained_prm), reader="labels",
                         batch_size=batch_size)
    for i, (problem, text, lines) in enumerate(RESPONSES):
        ids = CHAR(text, add_special_tokens=False)["input_ids"] + [CHAR.eos_token_id]
        assert torch.nonzero(pr.step_end[i]).flatten().tolist() == [last for _, last, _ in step_spans(CHAR, ids)]
        expected = labeller_scores(trained_prm, problem, lines)
        assert pr.values[i][pr.step_end[i]].tolist() == pytest.approx(expected, abs=1e-5)
        assert all(-1.0 <= s <= 1.0 for s in expected)
    assert (pr.values[~pr.step_end] == 0).all()


def test_a_prm_trained_with_rlvr_scores_another_runs_steps(trained_prm, tmp_path):
    """The other run: PURE (which reads step rewards) on chain arithmetic, its policy warmed on worked solutions so
    it writes several steps; every step logs the PRM's step metrics."""
    from rlvr.train import sft

    model, tokenizer = build_tiny_model(SPEC, seed=1)
    torch.manual_seed(1)
    pairs = [(t.prompt, t.meta["solution"]) for t in load_tasks("arithmetic:chain:terms=3,n=500,seed=0")]
    sft(model, tokenizer, pairs, steps=60, batch_size=32, lr=3e-3, seed=0, progress=False)
    policy = tmp_path / "policy"
    model.save_pretrained(policy)
    tokenizer.save_pretrained(policy)
    out = tmp_path / "run"
    assert main(["train", "examples/arithmetic.yaml", f"model.path={policy}", "algo.recipe=pure",
                 "data.train=arithmetic:chain:terms=3", "data.verifier=chain_answer", "data.prompts_per_step=4",
                 "rollout.group_size=4", "rollout.max_new_tokens=24", "train.steps=2", "train.progress=false",
                 f"train.out={out}",
                 f"reward.process={{source: prm, options: {{path: '{trained_prm}', reader: labels}}}}"]) == 0
    rows = read_metrics(out)
    assert [r["step"] for r in rows] == [1, 2]
    for row in rows:
        assert row["process/steps_mean"] >= 1.0
        assert -1.0 <= row["process/reward_mean"] <= 1.0 and row["process/reward_mean"] != 0.0
        assert 0.0 <= row["process/false_step_frac"] <= 1.0


def test_labels_reader_errors_name_the_option(trained_prm, tmp_path):
    batch = batch_of(["1+1=2"])
    tasks = [Task(prompt="1+1=", reference="2", id="t")]
    check_process_options("prm", {"path": "x", "reader": "labels"})
    with pytest.raises(UserError, match=r"options.reader: expected one of classifier, labels, got 'label'"):
        compute_process("prm", batch, ["1+1=2"], tasks, CHAR, path=str(trained_prm), reader="label")
    from transformers import LlamaConfig, LlamaForTokenClassification

    classifier = tmp_path / "classifier"
    LlamaForTokenClassification(LlamaConfig(vocab_size=len(CHAR), hidden_size=16, intermediate_size=32,
                                            num_hidden_layers=1, num_attention_heads=2, num_labels=2,
                                            pad_token_id=CHAR.pad_token_id)).save_pretrained(classifier)
    CHAR.save_pretrained(classifier)
    with pytest.raises(UserError, match=r"classifier holds LlamaForTokenClassification; reader: labels reads a causal"):
        compute_process("prm", batch, ["1+1=2"], tasks, CHAR, path=str(classifier), reader="labels")
    with pytest.raises(UserError, match=r"not a token-classification model .*reader=labels"):
        compute_process("prm", batch, ["1+1=2"], tasks, CHAR, path=str(trained_prm))
