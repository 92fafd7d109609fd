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
