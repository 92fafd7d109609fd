"""YAML from untrusted places (configs, rubric files, a reward server's config): safe types only, YAML 1.2 floats
without a dot (``1e-5``), and bounds on the text's length and on the size its aliases expand to, so an alias bomb
("billion laughs") is one error rather than a hang or a blow-up.

    data = load_yaml(text)        # raises yaml.YAMLError (a bound included) or TooLarge
"""

from __future__ import annotations

import re
from typing import Any

import yaml


class TooLarge(yaml.YAMLError):
    """The text is longer than MAX_YAML_CHARS."""


MAX_YAML_CHARS = 1 << 20  # a YAML text longer than this is refused
MAX_YAML_NODES = 100_000  # scalars, lists and mappings a document may expand to once aliases are followed


class BoundedLoader(yaml.SafeLoader):
    """safe_load, plus YAML 1.2 floats without a dot (``1e-5``), which YAML 1.1 would leave a string, and a bound
    on the document's size once aliases are expanded: an alias bomb ("billion laughs") is one error, not a hang."""

    def compose_document(self) -> yaml.Node:
        node = super().compose_document()
        size = _expanded_size(node, {})
        if size > MAX_YAML_NODES:
            raise yaml.YAMLError(f"the document expands to {size} nodes through its aliases "
                                 f"(at most {MAX_YAML_NODES}); an alias bomb?")
        return node


def _expanded_size(node: yaml.Node, memo: dict[int, int]) -> int:
    """Nodes in the tree a composed graph stands for, each alias counted as a full copy (memoised, so a graph
    that doubles at every level is counted in linear time)."""
    if id(node) in memo:
        return memo[id(node)]
    memo[id(node)] = 0  # a recursive alias counts once; SafeLoader refuses to construct it anyway
    if isinstance(node, yaml.MappingNode):
        size = 1 + sum(_expanded_size(k, memo) + _expanded_size(v, memo) for k, v in node.value)
    elif isinstance(node, yaml.SequenceNode):
        size = 1 + sum(_expanded_size(v, memo) for v in node.value)
    else:
        size = 1
    memo[id(node)] = size
    return size


BoundedLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)[eE][-+]?[0-9]+$"), list("-+0123456789.")
)


def load_yaml(text: str) -> Any:
    """Parse ``text`` with BoundedLoader; a text over MAX_YAML_CHARS raises TooLarge."""
    if len(text) > MAX_YAML_CHARS:
        raise TooLarge(f"{len(text)} characters, over the {MAX_YAML_CHARS} a YAML text may hold")
    return yaml.load(text, Loader=BoundedLoader)
