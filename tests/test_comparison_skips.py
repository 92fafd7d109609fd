"""A comparison test that is skipped (its reference package missing) fails the run instead of passing silently."""

from pathlib import Path

pytest_plugins = ["pytester"]

CONFTEST = (Path(__file__).parent / "conftest.py").read_text()


def test_a_skipped_comparison_fails_and_other_skips_stay_skips(pytester):
    pytester.makeconftest(CONFTEST)
    pytester.makeini("[pytest]\nmarkers =\n    comparison: compares with a reference\n")
    pytester.makepyfile(
        test_math_public_cases="""
import pytest

def test_against_reference():
    pytest.importorskip("a_reference_that_is_not_installed")
""",
        test_ifeval_reference="""
import pytest
pytest.skip("lm-eval is not installed", allow_module_level=True)

def test_never_collected():
    pass
""",
        test_marked="""
import pytest

@pytest.mark.comparison
def test_marked_comparison():
    pytest.skip("no reference here")

def test_ordinary_skip():
    pytest.skip("an optional extra")

@pytest.mark.comparison
@pytest.mark.xfail(reason="a known difference", run=False)
def test_expected_difference():
    pass
""")
    # a comparison module skipped as a whole is a collection error, which stops a run; go on to see the rest
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rfEs", "--continue-on-collection-errors")
    result.assert_outcomes(failed=2, errors=1, skipped=1, xfailed=1)
    result.stdout.fnmatch_lines(["*test_ifeval_reference.py: a comparison test was skipped (lm-eval is not installed)*",
                                 "*test_marked_comparison: a comparison test was skipped (no reference here)*",
                                 "*test_against_reference: a comparison test was skipped (could not import*",
                                 "SKIPPED*an optional extra*"])
