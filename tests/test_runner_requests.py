"""Requests carry the prompt and the task's metadata to the functions that ask for them, and into the cache key."""

import pytest
import reward_fns as rf

from rlvr.verifiers import CallableRequest, RewardRunner, ScoreRequest, Status, Verdict, register_verifier
from rlvr.verifiers.runner import (  # every public name of the package still imports from here
    CacheInfo,
    call_verifier,
    default_runner,
    score_batch,
    set_default_runner,
    to_verdict,
)

C = CallableRequest
PROMPT = [{"role": "user", "content": "3+4="}]
META = {"difficulty": "easy", "tool_state": {"files": ["a.txt"]}}


@register_verifier("test.inline_sees_prompt", replace=True)
def inline_sees_prompt(response, reference, *, prompt=None, meta=None):
    return Verdict(1.0, Status.CORRECT, "seen", details={"prompt": prompt, "meta": meta})


@register_verifier("test.inline_kwargs", replace=True)
def inline_kwargs(response, reference, **kwargs):
    return Verdict(1.0, Status.CORRECT, "seen", details={"keys": sorted(kwargs)})


@pytest.fixture(scope="module")
def runner():
    with RewardRunner(workers=1, timeout_s=10.0) as r:
        yield r


def test_public_names_import():
    assert CacheInfo._fields == ("hits", "misses", "maxsize", "currsize")
    assert callable(call_verifier) and callable(to_verdict) and callable(default_runner)
    assert callable(score_batch) and callable(set_default_runner)


def test_prompt_and_meta_reach_functions_that_name_them(runner):
    verdicts = runner.score([
        C(rf.sees_prompt, "7", "7", prompt=PROMPT, meta=META),
        C(rf.sees_prompt_only, "7", "7", prompt="3+4=", meta=META),
        C(rf.takes_kwargs, "7", "7", {"x": 1}, prompt="3+4=", meta=META),
        C(rf.no_options, "7", "7", prompt="3+4=", meta=META),   # names neither: called without them
        ScoreRequest("test.inline_sees_prompt", "7", "7", prompt="p", meta={"k": 1}),
        ScoreRequest("test.inline_kwargs", "7", "7", {"timeout_s": 1}, prompt="p"),
        ScoreRequest("exact", "7", "7", prompt="p", meta={"k": 1}),  # a built-in that takes neither
    ])
    assert [v.status for v in verdicts] == [Status.CORRECT] * 7, verdicts
    assert verdicts[0].details == {"prompt": PROMPT, "meta": META}
    assert verdicts[1].details == {"prompt": "3+4="}
    assert verdicts[2].details == {"options": ["meta", "prompt", "x"]}
    assert verdicts[4].details == {"prompt": "p", "meta": {"k": 1}}
    assert verdicts[5].details == {"keys": ["prompt", "timeout_s"]}  # meta is None: not passed


def test_none_is_not_passed(runner):
    v = runner.score([C(rf.takes_kwargs, "7", "7", {"y": 2})])[0]
    assert v.details == {"options": ["y"]}


def test_prompt_and_meta_are_part_of_the_cache_key(runner, tmp_path):
    log = tmp_path / "calls.txt"
    ref = str(log)
    runner.score([C(rf.counted_prompt, "r", ref, prompt="p1")])
    runner.score([C(rf.counted_prompt, "r", ref, prompt="p1")])  # cached
    runner.score([C(rf.counted_prompt, "r", ref, prompt="p2")])
    runner.score([C(rf.counted_prompt, "r", ref, prompt="p1", meta={"a": 1})])
    runner.score([C(rf.counted_prompt, "r", ref, prompt="p1", meta={"a": 2})])
    runner.score([C(rf.counted_prompt, "r", ref, prompt="p1", meta={"a": 2})])  # cached
    assert log.read_text().splitlines() == ["p1", "p2", "p1", "p1"]


def test_a_prompt_given_twice_or_a_bad_meta_is_a_caller_error(runner):
    with pytest.raises(ValueError, match="prompt"):
        runner.score([C(rf.match, "a", "a", {"prompt": "x"}, prompt="y")])
    with pytest.raises(TypeError, match="meta"):
        runner.score([C(rf.match, "a", "a", meta=["not", "a", "dict"])])


def test_positional_fields_keep_their_order():
    request = CallableRequest(rf.match, "r", "ref", {"o": 1}, False)
    assert (request.options, request.cache, request.prompt, request.meta) == ({"o": 1}, False, None, None)
    score = ScoreRequest("exact", "r", "ref", {"o": 1})
    assert (score.options, score.prompt, score.meta) == ({"o": 1}, None, None)
