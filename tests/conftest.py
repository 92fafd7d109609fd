import os

import pytest
import torch

from rlvr.models import TinySpec, build_tiny_model, save_tiny_model

SMALL = TinySpec(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64)


@pytest.fixture(autouse=True)
def _threads():
    torch.set_num_threads(2)


@pytest.fixture(autouse=True)
def _environment():
    """What a test puts in os.environ (the demo's kernel pin, a launcher's LOCAL_RANK) leaves with it: later tests'
    subprocesses would inherit it and compute with other kernels or think they were launched distributed."""
    saved = dict(os.environ)
    yield
    if os.environ != saved:
        os.environ.clear()
        os.environ.update(saved)


@pytest.fixture
def tiny():
    """A fresh random tiny model and its character tokenizer."""
    return build_tiny_model(SMALL, seed=0)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """A tiny model saved as a Hugging Face folder."""
    return save_tiny_model(tmp_path_factory.mktemp("tiny") / "model", SMALL, seed=0)


@pytest.fixture(scope="session")
def warm_model_dir(tmp_path_factory):
    """A tiny model briefly fine-tuned on one-digit addition, so it is right some of the time."""
    from rlvr.tasks.arithmetic import ArithmeticSpec, all_problems
    from rlvr.train import sft

    model, tokenizer = build_tiny_model(TinySpec(hidden_size=64, num_layers=2, num_heads=4, intermediate_size=256), seed=0)
    torch.manual_seed(0)
    pairs = [(t.prompt, t.reference) for t in all_problems(ArithmeticSpec(digits=1), "train")]
    sft(model, tokenizer, pairs, steps=100, batch_size=32, lr=3e-3, seed=0, progress=False)
    path = tmp_path_factory.mktemp("warm") / "model"
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def one_digit_rl_config(model_dir, out, algo=None, **train):
    """A short RL run on one-digit addition from ``model_dir`` (a dict for config_from_dict)."""
    return {
        "model": {"path": str(model_dir)},
        "data": {"train": "arithmetic:train:digits=1", "verifier": "exact", "prompts_per_step": 32},
        "rollout": {"group_size": 8, "max_new_tokens": 4},
        "algo": algo or {},
        "train": {"steps": 100, "lr": 1e-3, "out": str(out), "progress": False, **train},
    }


def assert_reward_went_up(rows, margin=0.15):
    rewards = [row["verifier_score_mean"] for row in rows]
    first, last = sum(rewards[:10]) / 10, sum(rewards[-10:]) / 10
    assert last > first + margin, f"reward did not go up: first 10 steps {first:.3f}, last 10 steps {last:.3f}"


# Comparison tests measure rlvr against a reference package (Math-Verify, Google's IFEval checker, the verifiers
# package). The docs quote what they find, so a skip (a reference that is not installed) must fail the run instead
# of passing it silently: `make test` installs the dev extra, which holds every reference.
COMPARISON_MODULES = frozenset({"test_math_public_cases.py", "test_ifeval_reference.py", "test_envs_adapters.py"})
INSTALL_HINT = "install the references with: pip install -c requirements.lock -e '.[dev]'"


def _skip_reason(report) -> str:
    longrepr = report.longrepr
    reason = str(longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else longrepr)
    return reason.removeprefix("Skipped: ")


def _fail_skipped_comparison(report, where: str) -> None:
    reason = _skip_reason(report)
    report.outcome = "failed"
    report.longrepr = f"{where}: a comparison test was skipped ({reason}); {INSTALL_HINT}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    report = (yield).get_result()
    comparison = item.path.name in COMPARISON_MODULES or item.get_closest_marker("comparison") is not None
    if report.skipped and comparison and not hasattr(report, "wasxfail"):
        _fail_skipped_comparison(report, item.nodeid)


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    report = (yield).get_result()
    if report.skipped and isinstance(collector, pytest.Module) and collector.path.name in COMPARISON_MODULES:
        _fail_skipped_comparison(report, collector.nodeid)
