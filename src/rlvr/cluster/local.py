"""The local backend with several learners: ``cluster.learners`` ranks on this machine, started by torchrun.

The driver (the ``rlvr train`` process) checks the run directory, writes the resolved config beside the run, starts
``torchrun --standalone --nproc_per_node=N -m rlvr.cluster.rank`` and waits. The ranks die with the driver
(rlvr.cluster.lifeline), so killing it, SIGKILL included, leaves no process behind, and ``--resume`` continues
from the newest checkpoint.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from rlvr.cluster.lifeline import DRIVER_PID, die_with_parent
from rlvr.config import Config, save_config
from rlvr.train.run import prepare_run_dir
from rlvr.errors import UserError

LAUNCH_CONFIG = ".launch-config.yaml"


class LearnersFailed(UserError):
    """A learner rank exited with an error (its traceback was printed above by torchrun); a ValueError, so that
    `rlvr train` ends with this one line."""


def rank_environment() -> dict[str, str]:
    """The environment of every spawned rank: one intra-op thread unless the user set OMP_NUM_THREADS, and the pid
    of the driver the ranks must not outlive."""
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    env[DRIVER_PID] = str(os.getpid())
    src = str(Path(__file__).resolve().parents[2])  # the rlvr the driver runs is the one the ranks import
    env["PYTHONPATH"] = os.pathsep.join([src, *filter(None, [env.get("PYTHONPATH")])])
    return env


def torchrun_command(config_path: Path, learners: int, resume: bool) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={learners}",
            "-m", "rlvr.cluster.rank", str(config_path), *(["--resume"] if resume else [])]


def run_torchrun(cfg: Config, *, resume: bool = False) -> Path:
    """Train with ``cluster.learners`` local ranks; returns the run directory."""
    prepare_run_dir(cfg, resume)  # one-line errors (an earlier run there, not writable) before any rank starts
    run_dir = Path(cfg.train.out)
    config_path = run_dir / LAUNCH_CONFIG
    save_config(cfg, config_path)
    proc = subprocess.Popen(torchrun_command(config_path, cfg.cluster.learners, resume), env=rank_environment(),
                            preexec_fn=die_with_parent)
    try:
        code = proc.wait()
    except BaseException:  # Ctrl-C or a signal turned exception: stop the ranks before leaving
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        raise
    if code != 0:
        raise LearnersFailed(f"cluster.learners={cfg.cluster.learners}: a learner rank failed (torchrun exit status "
                             f"{code}); the checkpoints in {run_dir} are intact and --resume continues from the newest")
    config_path.unlink(missing_ok=True)
    return run_dir
