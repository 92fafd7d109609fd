"""The trainer knows which responses hit the length limit: that flag reaches the verifiers (``truncated=``), through
the one generate-and-score path used by training and evaluation, so a verifier can refuse to credit an answer a
response never committed to. A response cut at a stop string ended on purpose: it is not truncated."""

from __future__ import annotations

import pytest
import torch
from truncation_rewards import truncation_reward

from rlvr.config import config_from_dict
from rlvr.models import encode_prompt
from rlvr.rollout import HFEngine, SamplingParams
from rlvr.rollout.episodes import PromptPolicy, Scoring, generate_and_score, score, score_requests
from rlvr.tasks import Task
from rlvr.train import train
from rlvr.verifiers import CallableRequest, RewardRunner, ScoreRequest, Verdict, register_verifier
from rlvr.verifiers.runner.calls import keyword_args

SEEN: list[tuple[str, bool]] = []


@register_verifier("test.truncation", isolation="inline")
def _records_truncation(response, reference, *, truncated: bool = False):
    SEEN.append((response, truncated))
    return Verdict(0.0 if truncated else 1.0, "incorrect" if truncated else "correct", "seen")


@register_verifier("test.truncation_kwargs", isolation="inline")
def _takes_kwargs(response, reference, **options):
    """Forwards its keyword arguments as options (as wrappers do): it must not receive ``truncated``."""
    return Verdict(1.0, "correct", "options", details={"options": sorted(options)})


# ------------------------------------------------------------------------------------------ the runner


@pytest.mark.parametrize("flag", [True, False])
def test_a_verifier_naming_truncated_gets_the_flag(flag):
    SEEN.clear()
    with RewardRunner(workers=1) as runner:
        [v] = runner.score([ScoreRequest("test.truncation", "so 4", "4", truncated=flag)])
    assert SEEN == [("so 4", flag)] and v.score == (0.0 if flag else 1.0)


def test_kwargs_functions_do_not_receive_truncated():
    with RewardRunner(workers=1) as runner:
        [v] = runner.score([ScoreRequest("test.truncation_kwargs", "4", "4", {"x": 1}, truncated=True)])
    assert v.details["options"] == ["x"]
    assert "truncated" not in keyword_args(_takes_kwargs, {}, "p", {"m": 1}, truncated=True)
    assert keyword_args(_records_truncation, {}, truncated=True) == {"truncated": True}
    assert keyword_args(_records_truncation, {}) == {"truncated": False}


def test_truncated_both_as_field_and_option_is_a_caller_error():
    with RewardRunner(workers=1) as runner, pytest.raises(ValueError, match="'truncated' both as a field"):
        runner.score([ScoreRequest("test.truncation", "4", "4", {"truncated": False}, truncated=True)])


def test_a_non_boolean_flag_is_a_caller_error():
    with RewardRunner(workers=1) as runner:
        with pytest.raises(TypeError, match="truncated must be a bool"):
            runner.score([ScoreRequest("test.truncation", "4", "4", truncated="yes")])
        [v] = runner.score([ScoreRequest("test.truncation", "4", "4", truncated=torch.tensor(True))])
    assert v.score == 0.0


def test_pooled_rewards_get_the_flag_and_the_cache_tells_them_apart():
    with RewardRunner(workers=1) as runner:
        first = runner.score([CallableRequest(truncation_reward, "4", "4"),
                              CallableRequest(truncation_reward, "4", "4", truncated=True)])
        again = runner.score([CallableRequest(truncation_reward, "4", "4", truncated=True),
                              CallableRequest(truncation_reward, "4", "4")])
        hits = runner.stats()["cache_hits"]
    assert [v.score for v in first] == [1.0, 0.0] and [v.score for v in again] == [0.0, 1.0]
    assert hits == 2  # the second batch came from the cache, each request under its own key


# ------------------------------------------------------------------------------ the generate-and-score path


def test_score_requests_carry_the_flags():
    tasks = [Task("1+1=", "2", "a"), Task("2+2=", "4", "b")]
    requests = score_requests(tasks, ["2", "4"], Scoring("exact"), truncated=[True, False])
    assert [r.truncated for r in requests] == [True, False]
    assert [r.truncated for r in score_requests(tasks, ["2", "4"], Scoring("exact"))] == [False, False]
    with pytest.raises(ValueError, match="1 truncated flags for 2 responses"):
        score_requests(tasks, ["2", "4"], Scoring("exact"), truncated=[True])


def _ragged_engine(tiny):
    """The tiny model with a third of the vocabulary as end-of-sequence, so some rows end and others hit the limit."""
    model, tokenizer = tiny
    eos = list(range(4, len(tokenizer), 3))
    return HFEngine(model, pad_id=tokenizer.pad_token_id, eos_ids=eos), set(eos)


def test_generate_and_score_tells_the_verifier_which_rows_hit_the_length_limit(tiny):
    _, tokenizer = tiny
    engine, eos = _ragged_engine(tiny)
    tasks = [Task(p, "0", str(i)) for i, p in enumerate(["1+2=", "10+25=", "7+", "abc"])]
    params = SamplingParams(n=4, max_new_tokens=4)
    torch.manual_seed(0)
    SEEN.clear()
    samples = generate_and_score(engine, tokenizer, tasks, params, Scoring("test.truncation"))
    flags = [t for _, t in SEEN]
    assert [r for r, _ in SEEN] == samples.responses
    for row, flag in enumerate(flags):  # truncated exactly when the row ran to the limit without an EOS token
        n = int(samples.batch.response_mask[row].sum())
        ended = int(samples.batch.response_ids[row, n - 1]) in eos
        assert flag == (not ended) and flag == (n == params.max_new_tokens and not ended), row
    assert True in flags and False in flags, "expected both kinds of rows"
    assert samples.rewards == [0.0 if f else 1.0 for f in flags]


def test_a_row_cut_at_a_stop_string_is_not_truncated(tiny):
    model, tokenizer = tiny
    engine = HFEngine(model, pad_id=tokenizer.pad_token_id, eos_ids=tokenizer.eos_token_id)
    tasks = [Task("1+2=", "0", "a"), Task("abc", "0", "b")]
    params = SamplingParams(n=4, max_new_tokens=6)
    torch.manual_seed(0)
    batch = engine.generate([encode_prompt(tokenizer, t.prompt) for t in tasks], params)
    texts = tokenizer.batch_decode(batch.response_ids, skip_special_tokens=True)
    assert bool(batch.truncated.all()), "the random tiny model is expected to run every row to the limit"
    stop = texts[0][2]  # a character the first row holds after its start, so that row gets cut

    SEEN.clear()
    torch.manual_seed(0)
    samples = generate_and_score(engine, tokenizer, tasks, params, Scoring("test.truncation"),
                                 prompts=PromptPolicy(stop=(stop,)))
    assert len(SEEN) == 8 and samples.metrics["stopped_frac"] > 0
    for (response, flag), text in zip(SEEN, texts):
        assert flag == (stop not in text), (text, stop)  # cut rows ended on purpose; the others hit the limit
        if not flag:
            assert response == text[: text.find(stop)]


def test_training_passes_the_flag_to_the_verifier(warm_model_dir, tmp_path):
    """A real `rlvr train` step on a model that answers one-digit sums and stops: with room for two tokens, a
    one-digit answer ends with EOS (not truncated) and a two-digit one runs into the limit (truncated)."""
    cfg = config_from_dict({"model": {"path": str(warm_model_dir)},
                            "data": {"train": "arithmetic:train:digits=1", "verifier": "test.truncation",
                                     "prompts_per_step": 8},
                            "rollout": {"group_size": 2, "max_new_tokens": 2, "temperature": 0.0},
                            "train": {"steps": 1, "out": str(tmp_path / "run"), "progress": False}})
    SEEN.clear()
    train(cfg)
    assert len(SEEN) == 16
    for response, flag in SEEN:
        assert flag == (len(response) == 2), (response, flag)  # the character tokenizer: one token per character
    assert {flag for _, flag in SEEN} == {True, False}


def test_a_response_cut_off_where_its_last_number_is_the_reference_gets_no_math_credit(warm_model_dir):
    """The family the flag exists for: a model that answers one-digit sums, given room for one token, writes the
    right digit and is cut off before it could end; the math verifier, told so, does not credit what the text
    happens to end with. Given room to finish, the same answers get credit."""
    from rlvr.models import load_model
    from rlvr.tasks.arithmetic import ArithmeticSpec, all_problems

    model, tokenizer = load_model(warm_model_dir, device="cpu")
    engine = HFEngine(model, pad_id=tokenizer.pad_token_id, eos_ids=tokenizer.eos_token_id)
    tasks = [t for t in all_problems(ArithmeticSpec(digits=1), "train") if len(t.reference) == 1][:12]
    greedy = dict(n=1, temperature=0.0)
    cut = generate_and_score(engine, tokenizer, tasks, SamplingParams(max_new_tokens=1, **greedy), Scoring("math"))
    whole = generate_and_score(engine, tokenizer, tasks, SamplingParams(max_new_tokens=4, **greedy), Scoring("math"))
    assert bool(cut.batch.truncated.all())
    lucky = [i for i, t in enumerate(tasks) if cut.responses[i].strip() == t.reference]
    assert lucky, "expected the model to write some right digits before the cut"
    assert all(cut.rewards[i] == 0.0 for i in lucky)
    unflagged = score([tasks[i] for i in lucky], [cut.responses[i] for i in lucky], Scoring("math"))
    assert all(v.score == 1.0 for v in unflagged)  # the same text, not known to be cut off, would be credited
    ended_right = [i for i, t in enumerate(tasks) if not bool(whole.batch.truncated[i])
                   and whole.responses[i].strip() == t.reference]
    assert ended_right and all(whole.rewards[i] == 1.0 for i in ended_right)
