"""Imports point down: every module of rlvr imports only from its own package or from packages of a
lower layer, including imports made inside functions. algos imports torch and nothing else of rlvr; verifiers
never import torch or the trainer."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src" / "rlvr"

# Lower numbers are lower floors. A package may import its own modules and anything on a strictly lower floor.
LAYERS: dict[str, int] = {
    "errors": -1,  # the user-error type every floor raises
    "__init__": 0, "jsonl": 0, "progress": 0, "plugins": 0, "yaml_text": 0,  # the package root holds only the version
    "algos": 1, "verifiers": 1,
    # models sits below tasks and rewards: the loaders check images with its decoder, and every reader of data,
    # tool or model text tokenizes it with its plain-text encoder (rlvr.models.prompts)
    "models": 2,
    "tasks": 3, "integrations": 3,
    "rewards": 4, "envs": 4,
    "rollout": 5,
    "config": 6,
    "eval": 7,
    "train": 8,
    "serve": 9, "audit": 9, "cluster": 9,
    "demo": 10,  # the demo's RL phase runs in the layout of its cluster section
    "cli": 11, "__main__": 11,
}


def unit(module: str) -> str:
    """rlvr.train.loop -> train; rlvr.cli -> cli; rlvr -> __init__."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def module_name(path: Path) -> str:
    rel = path.relative_to(SRC.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1] if len(parts) > 1 else parts
    return ".".join(parts)


def imports_of(path: Path) -> list[tuple[int, str]]:
    """(line, imported module) for every import statement in the file, at any depth."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            found.append((node.lineno, name))
    return found


def modules() -> list[Path]:
    return sorted(p for p in SRC.rglob("*.py"))


def violations() -> list[str]:
    bad = []
    for path in modules():
        own = unit(module_name(path)) if module_name(path) != "rlvr" else "__init__"
        if own not in LAYERS:
            bad.append(f"{path.relative_to(SRC)}: package '{own}' has no layer in LAYERS")
            continue
        for line, name in imports_of(path):
            where = f"{path.relative_to(SRC)}:{line} imports {name}"
            if own == "algos" and name.startswith("rlvr.") and unit(name) != "algos":
                bad.append(f"{where} (algos imports torch and nothing else of rlvr)")
            if own == "verifiers" and (name == "torch" or name.startswith("torch.")):
                bad.append(f"{where} (verifiers never import torch)")
            if not (name == "rlvr" or name.startswith("rlvr.")):
                continue
            other = unit(name)
            if other == own:
                continue
            if other not in LAYERS or LAYERS[other] >= LAYERS[own]:
                bad.append(f"{where} (layer {LAYERS.get(other)} from layer {LAYERS[own]}: imports must point down)")
    return bad


def test_every_import_points_down():
    assert violations() == []


def test_the_check_catches_an_upward_import(tmp_path):
    """The check itself can fail: a verifier that imports the trainer, and a sideways import, are reported."""
    fake = tmp_path / "rlvr"
    (fake / "verifiers").mkdir(parents=True)
    (fake / "algos").mkdir()
    (fake / "verifiers" / "bad.py").write_text("def f():\n    from rlvr.train.loop import train\n    import torch\n")
    (fake / "algos" / "bad.py").write_text("from rlvr.verifiers import verify\n")
    global SRC
    saved, SRC = SRC, fake
    try:
        found = violations()
    finally:
        SRC = saved
    assert any("verifiers/bad.py:2 imports rlvr.train.loop" in v for v in found)
    assert any("verifiers/bad.py:3 imports torch" in v for v in found)
    assert any("algos/bad.py:1 imports rlvr.verifiers" in v for v in found)


@pytest.mark.parametrize("name, expected", [("rlvr.train.loop", "train"), ("rlvr.cli", "cli"), ("rlvr", "__init__")])
def test_unit_of_a_module(name, expected):
    assert unit(name) == expected
