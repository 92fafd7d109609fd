"""How a row becomes the prompt a model sees: an optional template filled from the row's fields, and an
optional system prompt.

    fill_template("{question}\nAnswer with a number.", row, where)   # "{name}" is replaced by row["name"]
    with_system_prompt("2+2=", "Be brief.")   # [{"role": "system", ...}, {"role": "user", "content": "2+2="}]

Only ``{name}`` with a plain field name is a placeholder, so LaTeX braces such as ``\\frac{1}{2}`` in a
template stay as written; ``{{`` and ``}}`` give literal braces.
"""

from __future__ import annotations

import re
from typing import Any

from rlvr.tasks.base import DataError, Prompt

_PLACEHOLDER = re.compile(r"\{\{|\}\}|\{([A-Za-z_][A-Za-z0-9_.]*)\}")


def template_fields(template: str) -> list[str]:
    """The field names a template uses, in order."""
    return [m.group(1) for m in _PLACEHOLDER.finditer(template) if m.group(1)]


def _lookup(row: dict[str, Any], name: str) -> Any:
    value: Any = row
    for part in name.split("."):  # "extra_info.question" reaches into a nested object
        if not isinstance(value, dict) or part not in value:
            raise KeyError(name)
        value = value[part]
    return value


def fill_template(template: str, row: dict[str, Any], where: str) -> str:
    """The template with each ``{field}`` replaced by the row's value; a missing field names the row."""

    def replace(match: re.Match) -> str:
        if match.group(0) in ("{{", "}}"):
            return match.group(0)[0]
        name = match.group(1)
        try:
            value = _lookup(row, name)
        except KeyError:
            raise DataError(f"{where}: field '{name}': missing (used by data.prompt_template)") from None
        if value is None:
            raise DataError(f"{where}: field '{name}': is null (used by data.prompt_template)")
        return value if isinstance(value, str) else str(value)

    return _PLACEHOLDER.sub(replace, template)


def with_system_prompt(prompt: Prompt, system_prompt: str | None) -> Prompt:
    """A chat prompt that starts with ``system_prompt``; a prompt that already has a system message keeps it."""
    if not system_prompt:
        return prompt
    if isinstance(prompt, str):
        return [{"role": "system", "content": system_prompt}, {"role": "user", "content": prompt}]
    if prompt and prompt[0].get("role") == "system":
        return prompt
    return [{"role": "system", "content": system_prompt}, *prompt]
