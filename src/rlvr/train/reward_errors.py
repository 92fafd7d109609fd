"""Rewards and tools that raised, shown where a user looks: the first traceback of each verifier and of each agent
tool in a run goes to the console and to ``RUN_DIR/reward_errors.log``; later ones are counted
(``reward_errors/<verifier>`` and ``tool_raised/<tool>`` in the metrics). Without this a verifier's exception was
visible only as a ``verdict_error`` fraction, and a tool's only as the one error line its episode's model read."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import Any

from rlvr.verifiers import Status

RAISED = ("verifier_raised", "internal_error")  # the reasons of a verdict whose verifier raised


class RewardErrorLog:
    def __init__(self, run_dir: Path | None, default_verifier: str, *, stream=None):
        self.path = run_dir / "reward_errors.log" if run_dir is not None else None
        self.default = default_verifier
        self.stream = stream if stream is not None else sys.stderr
        self.counts: Counter[str] = Counter()

    def observe(self, step: int, tasks: list[Any], verdicts: list[Any]) -> dict[str, int]:
        """Report this step's raised verdicts; returns the run's count per verifier so far."""
        for task, verdict in zip(tasks, verdicts):
            if verdict.status != Status.ERROR or verdict.reason not in RAISED:
                continue
            name = getattr(task, "verifier", None) or self.default
            self.counts[name] += 1
            if self.counts[name] == 1:
                trace = str(verdict.details.get("traceback") or verdict.details.get("error") or verdict.details)
                message = (f"rlvr: step {step}: verifier {name!r} raised on task {getattr(task, 'id', '?')} (its first "
                           f"error in this run; later ones are counted in reward_errors/{name}):\n{trace.rstrip()}\n")
                self._report(message)
        return dict(self.counts)

    def observe_tools(self, step: int, raised: list[tuple[str, str]]) -> None:
        """Report the tool calls that raised during this step (rlvr.envs.tools.take_raised)."""
        for tool, trace in raised:
            key = f"tool:{tool}"
            self.counts[key] += 1
            if self.counts[key] == 1:
                self._report(f"rlvr: step {step}: tool {tool!r} raised (its first error in this run; the model saw "
                             f"an error observation; later ones are counted in tool_raised/{tool}):\n{trace.rstrip()}\n")

    def _report(self, message: str) -> None:
        self.stream.write(message)
        self._append(message)

    def _append(self, text: str) -> None:
        if self.path is None:
            return
        try:
            with open(self.path, "a", encoding="utf-8") as fh:
                fh.write(text + "\n")
        except OSError:
            pass  # the console copy stands; the run goes on

    def metrics(self) -> dict[str, int]:
        return {(f"tool_raised/{name[5:]}" if name.startswith("tool:") else f"reward_errors/{name}"): n
                for name, n in sorted(self.counts.items())}
