"""A verifier that raises is shown where a CLI user looks: its first traceback on the console and in
RUN_DIR/reward_errors.log, later ones counted in the metrics."""

from rlvr.config import config_from_dict
from rlvr.train import train
from rlvr.train.metrics import read_metrics
from rlvr.verifiers import register_verifier

from conftest import one_digit_rl_config


@register_verifier("test.raises_on_digits", isolation="inline")
def raises_on_digits(response, reference, **_):
    raise RuntimeError(f"cannot read {reference!r}")


def test_the_first_traceback_is_shown_and_the_rest_counted(tiny_model_dir, tmp_path, capsys):
    cfg = one_digit_rl_config(tiny_model_dir, tmp_path, steps=2)
    cfg["data"].update(verifier="test.raises_on_digits", prompts_per_step=2)
    cfg["rollout"].update(group_size=2, max_new_tokens=3)
    rows = read_metrics(train(config_from_dict(cfg)))
    err = capsys.readouterr().err
    assert err.count("verifier 'test.raises_on_digits' raised") == 1
    assert "RuntimeError: cannot read" in err and "Traceback" in err
    log = (tmp_path / "reward_errors.log").read_text()
    assert log.count("Traceback") == 1 and "raises_on_digits" in log
    assert [r["reward_errors/test.raises_on_digits"] for r in rows] == [4, 8]


def explode(x: int) -> str:
    """A tool that always fails."""
    raise ZeroDivisionError(f"cannot use {x}")


def test_a_tool_that_raises_shows_its_first_traceback(tmp_path):
    import io

    from agent_fixtures import ScriptedEngine, qwen_style_tokenizer

    from rlvr.envs.tools import take_raised
    from rlvr.rollout.base import SamplingParams
    from rlvr.rollout.episodes import Scoring, generate_and_score
    from rlvr.tasks import Task
    from rlvr.train.reward_errors import RewardErrorLog

    tok = qwen_style_tokenizer()
    call = '<tool_call>{"name": "explode", "arguments": {"x": 1}}</tool_call>'
    engine = ScriptedEngine(tok, lambda text: call if "<tool_response>" not in text else "done")
    task = Task("go", "done", "t1", env="tools", env_options={"tools": ["test_reward_errors:explode"],
                                                                "tool_format": "hermes"})
    take_raised()
    samples = generate_and_score(engine, tok, [task], SamplingParams(n=3, max_new_tokens=300), Scoring("exact"))
    assert all(e["tool_errors"] == 1 for e in samples.episodes)  # the model saw an error observation each time
    out = io.StringIO()
    log = RewardErrorLog(tmp_path, "exact", stream=out)
    log.observe_tools(1, take_raised())
    assert out.getvalue().count("tool 'explode' raised") == 1 and "ZeroDivisionError: cannot use 1" in out.getvalue()
    assert "Traceback" in (tmp_path / "reward_errors.log").read_text()
    assert log.metrics() == {"tool_raised/explode": 3}
