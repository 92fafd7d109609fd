"""What a data row may set among its verifier's options: never where the trainer connects, nor which secret it uses.

A data row (a JSONL line, a dataset record, a task built in code) may name its own verifier and ``verifier_options``.
Rows come from data, and data is not the operator: a row that chose the judge's ``base_url`` or the remote
verifier's ``url`` would have the trainer send the prompt and the model's response (and, with a key, the operator's
credentials) to an address the data picked. So an option that names an endpoint or a secret comes from the run's
config (``data.verifier_options``, ``reward.terms``) only. A row option is refused when, at any depth:

- its name says endpoint, network or secret (``url``, ``uri``, ``host``, ``hostname``, ``port``, ``endpoint``,
  ``base_url``, ``api_base``, ``address``, ``proxy``, ``server``, ``socket``, ``network``, ``headers``, ``api_key``,
  ``api_key_env``, ``key``, ``env``, ``secret``, ``token``, ``password``, ``credentials``, ``auth``, ``cookie``, also
  as the last part of a longer name such as ``judge_url``, and in camelCase: ``baseURL``); or
- its value is a string shaped like a network address (``scheme://...``, ``//host``, ``host.name:port``).

A row that repeats the config's own value for that option chooses nothing and is let through. Options carried
inside a row's reference (an inline rubric's ``{"judge": ..., "options": {...}}`` criteria) are the row's too.
Where rows are read from a file the loader stops at the row (``file:line: field 'verifier_options.base_url'``);
anywhere else the row gets an "error" verdict, reason ``row_option_refused`` (the same message under
``details["error"]``), without its verifier being called, while the other rows are scored (``score_rows``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from rlvr.verifiers.base import Status, Verdict

REASON = "row_option_refused"
_MAX_DEPTH = 8

_ENDPOINT_NAME = re.compile(
    r"(?:^|_)(?:url|urls|uri|uris|host|hosts|hostname|port|ports|endpoint|endpoints|base|api_base|address|addr"
    r"|proxy|proxies|server|servers|socket|network|headers|header|key|keys|api_key|key_env|env|environ|secret"
    r"|secrets|token|tokens|password|passwd|credential|credentials|auth|authorization|cookie|cookies)$"
)
_ADDRESS_VALUE = re.compile(
    r"^\s*(?:[a-z][a-z0-9+.\-]*://|//|\\\\"
    r"|(?:localhost|(?:[a-z0-9\-]+\.)+[a-z0-9\-]+|\[[0-9a-f:.]+\]):\d{1,5}(?:/|\s*$))",
    re.IGNORECASE,
)


def _snake(name: str) -> str:
    """``baseURL`` -> ``base_url``, ``api-key`` -> ``api_key``: the forms a name may be spelled in."""
    name = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name)
    return re.sub(r"[\s\-.]+", "_", name).lower()


def endpoint_name(name: Any) -> bool:
    """The option name says an endpoint, the network or a secret."""
    return not isinstance(name, str) or _ENDPOINT_NAME.search(_snake(name)) is not None


_MISSING = object()


def _at(config: Any, path: tuple) -> Any:
    for step in path:
        if isinstance(config, Mapping) and step in config:
            config = config[step]
        elif isinstance(config, Sequence) and not isinstance(config, str) and isinstance(step, int) \
                and 0 <= step < len(config):
            config = config[step]
        else:
            return _MISSING
    return config


def _where(path: tuple) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)


def row_option_problem(options: Any, config_options: Mapping[str, Any] | None = None,
                       where: str = "verifier_options") -> str | None:
    """Why a data row may not set ``options`` (the first option naming an endpoint or a secret, with its path), or
    None. ``config_options``: the run's own options for the same verifier; a row repeating one of them is fine."""
    if not options:
        return None
    config = config_options or {}

    def walk(value: Any, path: tuple) -> str | None:
        if len(path) > _MAX_DEPTH:
            return f"field '{where}{_where(path)}': nested deeper than {_MAX_DEPTH} levels"
        if path and (value is None or value is False or _at(config, path) == value):
            return None  # unset, switched off, or the config's own choice
        if path and isinstance(path[-1], str) and endpoint_name(path[-1]):
            return f"field '{where}{_where(path)}': names an endpoint or a secret"
        if isinstance(value, str):
            if _ADDRESS_VALUE.match(value):
                return f"field '{where}{_where(path)}': a network address ({value[:80]!r})"
        elif isinstance(value, Mapping):
            for key, item in value.items():
                if not isinstance(key, str):
                    return f"field '{where}{_where(path)}': a key that is not a string ({key!r})"
                found = walk(item, (*path, key))
                if found:
                    return found
        elif isinstance(value, (list, tuple)):
            for i, item in enumerate(value):
                found = walk(item, (*path, i))
                if found:
                    return found
        return None

    if not isinstance(options, Mapping):
        return None  # not options at all: the loader or the verifier says so
    found = walk(options, ())
    if found is None:
        return None
    return (f"{found}: a data row cannot choose where the trainer connects or which secret it sends; "
            f"set it in the run's config (data.verifier_options)")


# Keys under which a reference carries options for a verifier it runs (a rubric's criteria: {"check": {"judge": ...,
# "options": {...}}}): those options are a row's too.
_OPTION_KEYS = ("options", "inner_options", "judge", "verifier_options")


def reference_problem(reference: Any, where: str = "reference") -> str | None:
    """Why a row's reference may not be scored: verifier options inside it (an inline rubric's criterion options,
    at any depth) that name an endpoint or a secret; None when it has none."""
    def walk(value: Any, path: str, depth: int) -> str | None:
        if depth > _MAX_DEPTH:
            return None
        items = value.items() if isinstance(value, Mapping) else enumerate(value) \
            if isinstance(value, (list, tuple)) else ()
        for key, item in items:
            here = f"{path}[{key}]" if isinstance(key, int) else f"{path}.{key}"
            if key in _OPTION_KEYS and isinstance(item, Mapping):
                found = row_option_problem(item, where=here)
                if found:
                    return found
            found = walk(item, here, depth + 1)
            if found:
                return found
        return None

    return walk(reference, where, 0) if isinstance(reference, (Mapping, list, tuple)) else None


def task_problem(options: Any, reference: Any, config_options: Mapping[str, Any] | None = None) -> str | None:
    """row_option_problem of a row's options, then reference_problem of its reference."""
    return row_option_problem(options, config_options) or reference_problem(reference)


def refused_verdict(problem: str) -> Verdict:
    return Verdict(0.0, Status.ERROR, REASON, details={"error": problem})


def score_rows(requests: Sequence[Any], problems: Sequence[str | None]) -> list[Verdict]:
    """The verdicts of ``requests`` (ScoreRequest / CallableRequest), where ``problems[i]`` (row_option_problem)
    refuses request i: it gets the "error" verdict and its verifier is never called."""
    from rlvr.verifiers.runner import score_batch

    if len(problems) != len(requests):
        raise ValueError(f"{len(problems)} problems for {len(requests)} requests")
    admitted = [i for i, p in enumerate(problems) if p is None]
    scored = dict(zip(admitted, score_batch([requests[i] for i in admitted]))) if admitted else {}
    return [scored[i] if p is None else refused_verdict(p) for i, p in enumerate(problems)]
