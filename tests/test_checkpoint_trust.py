"""A trainer state is data, never code: ``--resume`` unpickles only tensors and plain data, refuses a state that
disagrees with its folder, and every malformed state file is one line naming it (no traceback)."""

from __future__ import annotations

import dataclasses
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from rlvr.cli import main as cli_main
from rlvr.errors import UserError
from rlvr.train.collector import Collector
from rlvr.train.checkpoint import STATE_FILE, load_trainer_state

from conftest import one_digit_rl_config

MARKER = "rlvr-tampered-state-ran"


class RunsCode:
    """Unpickling this runs ``os.system``: what a tampered state file would hold."""

    def __init__(self, target: Path):
        self.target = target

    def __reduce__(self):
        return (os.system, (f"echo {MARKER} > {self.target}",))


@pytest.fixture(scope="module")
def run(tiny_model_dir, tmp_path_factory):
    """A finished 2-step run with checkpoint-1 and checkpoint-2, and its config file."""
    root = tmp_path_factory.mktemp("trust")
    cfg = one_digit_rl_config(tiny_model_dir, root / "run", steps=2, save_every=1)
    cfg["data"]["prompts_per_step"], cfg["rollout"]["group_size"] = 2, 2
    config = root / "config.yaml"
    config.write_text(yaml.safe_dump(cfg))
    assert cli(["train", str(config)]).returncode == 0
    return root / "run", config


def cli(argv, cwd=None):
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src"), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "rlvr.cli", *argv], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=600)


def good_state(run_dir: Path) -> dict:
    return torch.load(run_dir / "checkpoint-2" / STATE_FILE, weights_only=False)


def copy_run(run_dir: Path, dest: Path) -> Path:
    shutil.copytree(run_dir, dest)
    return dest


# (name, how the state file of checkpoint-2 is spoilt, what the one-line error says)
def _code(path: Path, state: dict) -> None:
    torch.save({**state, "sampler": RunsCode(path.parent.parent / "ran.txt")}, path)


def _step_zero(path: Path, state: dict) -> None:
    torch.save({**state, "step": 0}, path)


def _step_other(path: Path, state: dict) -> None:
    torch.save({**state, "step": 7}, path)


def _step_text(path: Path, state: dict) -> None:
    torch.save({**state, "step": "2"}, path)


def _missing(key):
    def spoil(path: Path, state: dict) -> None:
        torch.save({k: v for k, v in state.items() if k != key}, path)
    return spoil


def _not_a_dict(path: Path, state: dict) -> None:
    torch.save([1, 2, 3], path)


def _raw_pickle(path: Path, state: dict) -> None:
    path.write_bytes(pickle.dumps(RunsCode(path.parent.parent / "ran.txt")))


def _truncated(path: Path, state: dict) -> None:
    path.write_bytes(path.read_bytes()[:200])


def _garbage(path: Path, state: dict) -> None:
    path.write_bytes(bytes(range(256)) * 8)


def _empty(path: Path, state: dict) -> None:
    path.write_bytes(b"")


def _json_text(path: Path, state: dict) -> None:
    path.write_text('{"step": 2, "optimizer": {}')


SPOILT = [
    ("code in a pickled object", _code, r"not a readable trainer state"),
    ("a raw pickle that runs code", _raw_pickle, r"not a readable trainer state"),
    ("step 0 in checkpoint-2", _step_zero, r"says step 0, which disagrees with its folder checkpoint-2"),
    ("step 7 in checkpoint-2", _step_other, r"says step 7, which disagrees with its folder checkpoint-2"),
    ("the step as text", _step_text, r"says step '2'"),
    ("no optimizer", _missing("optimizer"), r"lacks optimizer"),
    ("no rng", _missing("rng"), r"lacks rng"),
    ("no step", _missing("step"), r"lacks step"),
    ("a list", _not_a_dict, r"expected a dict, got list"),
    ("truncated", _truncated, r"not a readable trainer state"),
    ("binary garbage", _garbage, r"not a readable trainer state"),
    ("empty", _empty, r"not a readable trainer state"),
    ("JSON text", _json_text, r"not a readable trainer state"),
]


# (file of checkpoint-2 and what it becomes): the folder's other files, damaged, are named before any model loads
DAMAGED_FILES = [
    ("config.json", b'{"model_type": "lla'),
    ("config.json", b""),
    ("config.json", b"\xff\xfe\x00\x01"),
    ("tokenizer.json", b"[" * 100_000),
    ("tokenizer_config.json", b'{"a": 1' + b"0" * 5000 + b"}"),
    ("model.safetensors", b"garbage" * 10),
    ("model.safetensors", b""),
]


@pytest.mark.parametrize("name, content", DAMAGED_FILES)
def test_a_damaged_checkpoint_file_is_named(run, tmp_path, name, content):
    run_dir = copy_run(run[0], tmp_path / "run")
    path = run_dir / "checkpoint-2" / name
    assert path.is_file()
    path.write_bytes(content)
    with pytest.raises(UserError, match="the checkpoint folder is damaged") as caught:
        load_trainer_state(run_dir / "checkpoint-2")
    assert str(caught.value).startswith(str(path)) and "\n" not in str(caught.value)


def test_batches_under_way_load_as_rlvr_data_classes(run, tmp_path):
    """An asynchronous or streaming run checkpoints its batches under way (rlvr dataclasses and enums): they load."""
    from rlvr.rollout.base import RolloutBatch
    from rlvr.tasks.base import Task
    from rlvr.verifiers.base import Status

    run_dir = copy_run(run[0], tmp_path / "run")
    required = [f.name for f in dataclasses.fields(RolloutBatch)
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    batch = RolloutBatch(**{name: torch.zeros(2, 3) for name in required})
    pending = (3, ([batch], [Task(prompt="1+1=", reference="2", id="t")], [Status.CORRECT]))
    torch.save({**good_state(run[0]), "collector": {"pending": pending}}, run_dir / "checkpoint-2" / STATE_FILE)
    state = load_trainer_state(run_dir / "checkpoint-2")
    step, (batches, tasks, statuses) = state["collector"]["pending"]
    assert step == 3 and isinstance(batches[0], RolloutBatch) and tasks[0].id == "t" and statuses == [Status.CORRECT]


class Plain:
    """Not a dataclass: rebuilding it could run its code, so the unpickler refuses it."""


# rlvr names that are not plain data: a function, a class that is not a dataclass, a function called with arguments
OTHER_GLOBALS = [
    ("a function of rlvr", lambda p: (cli_main, ("--help",))),
    ("a class that is not data", lambda p: (Collector, ())),
    ("a builtin", lambda p: (eval, ("1",))),
    ("a class of the test", lambda p: (Plain, ())),
]


@pytest.mark.parametrize("name, call", OTHER_GLOBALS, ids=[o[0] for o in OTHER_GLOBALS])
def test_globals_other_than_rlvr_data_classes_are_refused(run, tmp_path, name, call):
    class Calls:
        def __reduce__(self):
            return call(tmp_path)

    run_dir = copy_run(run[0], tmp_path / "run")
    path = run_dir / "checkpoint-2" / STATE_FILE
    torch.save({**good_state(run[0]), "collector": {"pending": Calls()}}, path)
    with pytest.raises(UserError, match="not a readable trainer state"):
        load_trainer_state(run_dir / "checkpoint-2")


def test_a_saved_state_loads_as_plain_data(run):
    run_dir, _ = run
    state = load_trainer_state(run_dir / "checkpoint-2")
    assert state["step"] == 2 and {"optimizer", "scheduler", "sampler", "rng"} <= set(state)


@pytest.mark.parametrize("name, spoil, message", SPOILT, ids=[s[0] for s in SPOILT])
def test_a_spoilt_state_is_refused_naming_its_file(run, tmp_path, name, spoil, message):
    run_dir = copy_run(run[0], tmp_path / "run")
    path = run_dir / "checkpoint-2" / STATE_FILE
    spoil(path, good_state(run[0]))
    with pytest.raises(UserError, match=message) as caught:
        load_trainer_state(run_dir / "checkpoint-2")
    assert str(path) in str(caught.value) and "\n" not in str(caught.value)
    assert not (tmp_path / "run" / "ran.txt").exists()


@pytest.mark.parametrize("name, spoil, message", [SPOILT[0], SPOILT[2]], ids=["code", "step zero"])
def test_resume_from_a_spoilt_state_is_one_line_and_changes_nothing(run, tmp_path, name, spoil, message):
    run_dir = copy_run(run[0], tmp_path / "run")
    config = tmp_path / "config.yaml"
    config.write_text(run[1].read_text().replace(str(run[0]), str(run_dir)))
    path = run_dir / "checkpoint-2" / STATE_FILE
    spoil(path, good_state(run[0]))
    metrics = (run_dir / "metrics.jsonl").read_text()
    done = cli(["train", str(config), "--resume", "train.steps=3"])
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    errors = [line for line in done.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and str(path) in errors[0], done.stderr
    assert (run_dir / "metrics.jsonl").read_text() == metrics  # no logged step rewritten
    assert not (run_dir / "ran.txt").exists() and not (run_dir / "checkpoint-3").exists()
