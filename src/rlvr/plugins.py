"""User modules imported before a config is validated, so that the verifiers, estimators, losses and engines they
register are known to every command.

    plugins: [my_pkg.rewards, ./my_rewards.py]        # in a config file
    rlvr eval --plugin ./my_rewards.py ...             # on any command

A dotted name is imported as a module; a path to a ``.py`` file is imported under its file name with its folder
put on ``sys.path``, so reward workers (fresh interpreters that get the caller's ``sys.path``) import it too.
"""

from __future__ import annotations

import importlib
import sys
import traceback
from pathlib import Path
from types import ModuleType


class PluginError(ValueError):
    """A plugin that cannot be imported; the message names it and the error it raised."""


def load_plugin(spec: str, base_dir: str | Path | None = None) -> ModuleType:
    """Import one plugin: a dotted module name, or a ``.py`` path (relative paths are tried against ``base_dir``,
    then the working directory)."""
    if not isinstance(spec, str) or not spec.strip():
        raise PluginError(f"plugin {spec!r}: expected a module name or a path to a .py file")
    spec = spec.strip()
    is_path = spec.endswith(".py") or "/" in spec or "\\" in spec
    try:
        if not is_path:
            return importlib.import_module(spec)
        path = Path(spec).expanduser()
        if not path.is_absolute():
            candidates = ([Path(base_dir) / path] if base_dir is not None else []) + [Path.cwd() / path]
            path = next((c for c in candidates if c.is_file()), candidates[-1])
        if not path.is_file():
            raise PluginError(f"plugin {spec}: no such file ({path})")
        folder = str(path.resolve().parent)
        if folder not in sys.path:
            sys.path.insert(0, folder)
        return importlib.import_module(path.stem)
    except PluginError:
        raise
    except BaseException as exc:  # a plugin's own failure, SystemExit included, is reported, not propagated
        where = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
        at = f" at {where.filename}:{where.lineno}" if where else ""
        raise PluginError(f"plugin {spec}: import failed{at}: {type(exc).__name__}: {exc}") from None


def load_plugins(specs, base_dir: str | Path | None = None) -> list[ModuleType]:
    if isinstance(specs, str):
        specs = [specs]
    if not isinstance(specs, (list, tuple)):
        raise PluginError(f"plugins: expected a list of module names or .py paths, got {type(specs).__name__}")
    return [load_plugin(s, base_dir) for s in specs]
