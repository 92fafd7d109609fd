"""The step labeller (``reader: labels``) reads every step's label from one prefill and one cached token per step:
its scores equal re-running the whole growing prefix per step, and the tokens it runs through the model grow
linearly with the number of steps (the per-prefix way runs steps x prefix tokens)."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from rlvr.models import TinySpec, save_tiny_model
from rlvr.models.tiny import char_tokenizer
from rlvr.rewards import process
from rlvr.rewards.process import compute_process
from rlvr.tasks import Task
from rlvr.tasks.steps import labelling_prompt
from test_prm_training import batch_of, labeller_scores  # the per-prefix reference: a full forward per step

CHAR = char_tokenizer()


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


@pytest.fixture(scope="module")
def labeller(tmp_path_factory):
    folder = save_tiny_model(tmp_path_factory.mktemp("labeller") / "m",
                             TinySpec(hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64, max_positions=2048), seed=3)
    config = AutoModelForCausalLM.from_pretrained(folder).config
    assert "ForCausalLM" in config.architectures[0]
    return folder


class Counting(torch.nn.Module):
    """The model, counting the tokens each forward is given."""

    def __init__(self, model):
        super().__init__()
        self.model, self.tokens, self.calls = model, 0, 0
        self.config = model.config

    def forward(self, input_ids=None, **kwargs):
        self.tokens += int(input_ids.numel())
        self.calls += 1
        return self.model(input_ids=input_ids, **kwargs)


def steps_text(n, seed):
    """``n`` step lines: ``n - 1`` sums and the answer line."""
    lines = [f"{(k * 7 + seed) % 10}+{k % 3}={(k * 7 + seed) % 10 + k % 3}" for k in range(n - 1)]
    return "\n".join([*lines, f"#{n}"])


# (step counts of the rows of one batch): one row, rows of different counts (left padding), many steps
CASES = [[3], [1, 4, 2], [12, 5], [40]]


@pytest.mark.parametrize("counts", CASES)
def test_cached_labels_equal_the_per_prefix_scores(labeller, monkeypatch, counts):
    model = AutoModelForCausalLM.from_pretrained(labeller).eval()
    counting = Counting(model)
    monkeypatch.setattr(process, "load_prm", lambda *a, **k: (counting, CHAR))
    texts = [steps_text(n, seed=i) for i, n in enumerate(counts)]
    tasks = [Task(prompt=f"{i}+{i}=", reference="", id=str(i)) for i in range(len(counts))]
    pr = compute_process("prm", batch_of(texts), texts, tasks, CHAR, path=str(labeller), reader="labels")
    prompt_lens = []
    for i, text in enumerate(texts):
        lines = text.split("\n")
        expected = labeller_scores(labeller, tasks[i].prompt, lines)
        assert pr.values[i][pr.step_end[i]].tolist() == pytest.approx(expected, abs=1e-5)
        prompt_lens.append(len(CHAR(labelling_prompt(tasks[i].prompt, lines))["input_ids"]))
    longest = max(counts)
    # one padded prefill plus one token per row for every step after the first
    assert counting.tokens == len(counts) * (max(prompt_lens) + longest - 1)
    assert counting.calls == longest


def test_tokens_grow_linearly_with_the_steps(labeller, monkeypatch):
    model = AutoModelForCausalLM.from_pretrained(labeller).eval()
    used = {}
    for n in (10, 20, 40, 80):
        counting = Counting(model)
        monkeypatch.setattr(process, "load_prm", lambda *a, c=counting, **k: (c, CHAR))
        text = steps_text(n, seed=1)
        compute_process("prm", batch_of([text]), [text], [Task(prompt="1+1=", reference="", id="0")], CHAR,
                        path=str(labeller), reader="labels")
        used[n] = counting.tokens
        sequence = len(CHAR(labelling_prompt("1+1=", text.split("\n")))["input_ids"])
        assert counting.tokens <= 2 * sequence  # per-prefix: about n x sequence
    # doubling the steps (and so the sequence) at most doubles the tokens, plus the fixed prompt
    assert used[80] - used[40] <= 2 * (used[40] - used[20]) + 8
