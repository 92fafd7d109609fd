"""docs/api.md is the repository's own API reference: every section a docstring cites exists, no file cites a
document outside the repository, and every registered name (verifiers, estimators, losses, recipes, engines,
environments, tools, call formats, reward sources) and every subcommand is listed."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
API = (ROOT / "docs" / "api.md").read_text()
HEADINGS = set(re.findall(r"^#+ (.+)$", API, re.M))


def _cited_sections():
    cited = {}
    for path in [*(ROOT / "src").rglob("*.py"), *(ROOT / "docs").glob("*.md")]:
        for match in re.finditer(r'docs/api\.md,\s*((?:"[^"]+"(?:\s*and\s*)?)+)', path.read_text()):
            for section in re.findall(r'"([^"]+)"', match[1]):
                cited.setdefault(section, []).append(str(path.relative_to(ROOT)))
    return cited


def test_every_cited_section_exists():
    cited = _cited_sections()
    assert {"Verifiers", "Algorithms", "Data rows"} <= set(cited)
    assert {section: where for section, where in cited.items() if section not in HEADINGS} == {}


def test_nothing_cites_the_contract_document_kept_outside_the_repository():
    offenders = [str(p.relative_to(ROOT)) for p in [*(ROOT / "src").rglob("*.py"), *(ROOT / "docs").glob("*.md")]
                 if "CONTRACTS.md" in p.read_text()]
    assert offenders == []


REGISTRIES = """
import json
from rlvr.algos import advantages, losses, recipes
from rlvr.envs import env_names, format_names, tool_names
from rlvr.rewards import reward_source_names
from rlvr.rollout import engine_names
from rlvr.verifiers import verifier_names
print(json.dumps({"verifier": verifier_names(), "advantage": advantages.names(), "loss": losses.names(),
                  "recipe": recipes.names(), "engine": engine_names(), "env": env_names(), "tool": tool_names(),
                  "format": format_names(), "reward source": reward_source_names()}))
"""


def test_every_registered_name_and_subcommand_is_listed():
    """rlvr's own registries, read in a fresh interpreter (names other tests register in this one do not count)."""
    import json
    import subprocess
    import sys

    from rlvr.cli import build_parser

    out = subprocess.run([sys.executable, "-c", REGISTRIES], capture_output=True, text=True, check=True, timeout=300)
    registries = json.loads(out.stdout.strip().splitlines()[-1])
    missing = {kind: [n for n in names if f"`{n}`" not in API] for kind, names in registries.items()}
    assert {kind: names for kind, names in missing.items() if names} == {}
    subcommands = next(a for a in build_parser()._actions if a.dest == "command").choices
    assert [c for c in subcommands if f"rlvr {c}" not in API] == []
