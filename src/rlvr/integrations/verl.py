"""rlvr verifiers as a verl custom reward function.

In a verl config::

    custom_reward_function:
      path: /path/to/site-packages/rlvr/integrations/verl.py
      name: compute_score

verl calls ``compute_score(data_source, solution_str, ground_truth, extra_info)`` for every sample.
The verifier is ``extra_info["verifier"]`` when a row names one, else the one mapped to the row's
data_source in DATA_SOURCE_VERIFIERS, else "exact".
"""

from __future__ import annotations

from typing import Any

from rlvr.verifiers import ScoreRequest, Status, score_batch
from rlvr.verifiers.registry import verifier_names

# Common verl data_source names and the rlvr verifier that fits them.
DATA_SOURCE_VERIFIERS: dict[str, str] = {
    "openai/gsm8k": "numeric",
    "gsm8k": "numeric",
}


def pick_verifier(data_source: str | None, extra_info: dict[str, Any] | None) -> str:
    if extra_info and extra_info.get("verifier"):
        return str(extra_info["verifier"])
    if data_source in DATA_SOURCE_VERIFIERS:
        return DATA_SOURCE_VERIFIERS[data_source]
    if data_source and any(key in data_source.lower() for key in ("math", "aime", "amc")) and "math" in verifier_names():
        return "math"
    return "exact"


def compute_score(data_source: str, solution_str: str, ground_truth: Any, extra_info: dict[str, Any] | None = None, **kwargs: Any) -> dict[str, float]:
    """verl's custom reward function signature. Returns {"score": reward, "acc": 1.0 if correct else 0.0};
    verl uses "score" as the reward and logs the other keys."""
    verifier = pick_verifier(data_source, extra_info)
    options = dict((extra_info or {}).get("verifier_options") or {})
    meta = {k: v for k, v in (extra_info or {}).items() if k not in ("verifier", "verifier_options")}
    meta["data_source"] = data_source
    verdict = score_batch([ScoreRequest(verifier, solution_str, ground_truth, options, meta=meta)])[0]
    return {"score": float(verdict.score), "acc": 1.0 if verdict.status == Status.CORRECT else 0.0}
