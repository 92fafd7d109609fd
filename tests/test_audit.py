"""`rlvr audit`: the judge audit against a stand-in judge that accepts everything (the defences must cut its
master-key false positives to 0 while keeping its true positives), and the verifier audit's mutation counts
checked by hand."""

from __future__ import annotations

import json

import pytest

from rlvr.audit import ITEMS, OUR_KEYS, PAPER_KEYS, audit_judge, audit_verifier, format_judge_report
from rlvr.cli import main
from rlvr.verifiers import register_verifier


@pytest.fixture(scope="module")
def accept_all_server():
    pytest.importorskip("openai")
    from judge_standin import ScriptedJudgeServer_standin, accept_all

    with ScriptedJudgeServer_standin(accept_all) as server:
        yield server


def test_defences_cut_an_accept_all_judges_false_positives_to_zero(accept_all_server):
    items = list(ITEMS[:3])
    report = audit_judge(items, {"base_url": accept_all_server.base_url, "model": "m-audit", "backoff_s": 0.01})
    s = report["summary"]
    beyond = "answer beyond the judge's view"  # the judge verifier never sends a cut response, with or without
    n_keys = len(PAPER_KEYS) + sum(len(v) for v in OUR_KEYS.values())  # pre-checks: no set-up can be fooled by it
    for setup in ("plain prompt", "hardened prompt"):  # a prompt cannot fix a judge that says yes
        assert s[setup]["key_false_positive_rate"] == pytest.approx(1 - len(OUR_KEYS[beyond]) / n_keys)
    assert s["hardened + pre-checks"]["key_false_positive_rate"] == 0.0
    assert all(v["true_positive_rate"] == 1.0 for v in s.values())  # no correct answer was stopped
    assert all(v["honest_variant_accept_rate"] == 1.0 for v in s.values())  # nor one with the keys' words
    families = s["hardened + pre-checks"]["family_false_positive_rate"]
    assert set(families) == {"paper", *OUR_KEYS} and all(rate == 0.0 for rate in families.values())
    # every family fools the judge without pre-checks, except what the judge verifier itself refuses to cut
    assert all(rate == 1.0 for family, rate in s["hardened prompt"]["family_false_positive_rate"].items()
               if family != beyond)
    assert s["hardened prompt"]["family_false_positive_rate"][beyond] == 0.0
    assert all(v["wrong_answer_accept_rate"] == 1.0 for v in s.values())  # not a key: the judge's own job
    assert report["table"]["paper: 'Thought process:'"]["plain prompt"] == [3, 3]
    table = format_judge_report(report)
    assert "key false-positive rate" in table and "0.0%" in table


def test_cli_audit_judge_prints_the_table(accept_all_server, capsys, tmp_path):
    items = tmp_path / "items.jsonl"
    items.write_text(json.dumps({"prompt": "2+2?", "reference": "4", "response": "It is 4."}) + "\n")
    out = tmp_path / "report.json"
    assert main(["audit", "judge", "--endpoint", accept_all_server.base_url, "--model", "m-cli",
                 "--items", str(items), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "master key" in printed and "hardened + pre-checks" in printed
    report = json.loads(out.read_text())
    keys = [k for k in report["table"] if not k.startswith("[")]
    assert len(keys) == len(PAPER_KEYS) + sum(len(v) for v in OUR_KEYS.values())
    assert "family: unicode disguises" in printed and "honest variants accepted" in printed


def test_verifier_audit_counts_by_hand():
    rows = [{"response": "42", "reference": "42"}, {"response": "7", "reference": "7"},
            {"response": "wrong", "reference": "7"}]
    r = audit_verifier("exact", rows)
    assert (r["rows"], r["accepted_as_given"]) == (3, 2)
    by = {m["mutation"]: (m["wrong_calls"], m["probes"]) for m in r["mutations"]}
    assert by["surrounding whitespace"] == (0, 2)  # exact strips whitespace
    assert by["preamble sentence"] == (2, 2)  # exact compares the whole text: a preamble makes it wrong
    assert "CRLF line ends" not in by  # single-line responses have nothing to rewrite
    assert by["last number changed"] == (0, 2) and by["empty response"] == (0, 2)
    assert "second half cut off" not in by  # too short to cut
    assert r["false_negative_estimate"] == pytest.approx(2 / 4)
    assert r["false_positive_estimate"] == 0.0


@register_verifier("audit_test_lax")
def lax(response, reference, **options):
    """Accepts any response that contains a digit: the audit must catch it."""
    return float(any(ch.isdigit() for ch in response))


def test_verifier_audit_catches_a_lax_verifier():
    r = audit_verifier("audit_test_lax", [{"response": "so the answer is 12345", "reference": None}])
    by = {m["mutation"]: m["wrong_calls"] for m in r["mutations"]}
    assert by["last number changed"] == 1 and by["second half cut off"] == 0
    assert r["false_positive_estimate"] > 0


def test_cli_audit_verifier(tmp_path, capsys):
    data = tmp_path / "rows.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in [{"response": "x = \\boxed{3}", "reference": "3"},
                                                      {"response": "\\boxed{10}", "reference": "10"}]) + "\n")
    assert main(["audit", "verifier", "math", "--data", str(data)]) == 0
    printed = capsys.readouterr().out
    assert "false-positive estimate" in printed and "2 of 2 rows accepted" in printed
