"""User modules imported before a config is validated, so that the verifiers, estimators, losses and engines they
register are known to every command.

    plugins: [my_pkg.rewards, ./my_rewards.py]        # in a config file
    rlvr eval --plugin ./my_rewards.py ...             # on any command

A dotted name is imported as a module; a path to a ``.py`` file is imported under its file name with its folder
put first on ``sys.path``, so reward workers (fresh interpreters that get the caller's ``sys.path``) import it too.
A file whose name already means another module (``json.py``, ``time.py``, a module imported earlier) is refused
with an error that says so: importing by name would load the other module and register nothing.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import traceback
from pathlib import Path
from types import ModuleType

from rlvr.errors import UserError


class PluginError(UserError):
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
        return _import_file(path.resolve(), spec)
    except PluginError:
        raise
    except BaseException as exc:  # a plugin's own failure, SystemExit included, is reported, not propagated
        where = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
        at = f" at {where.filename}:{where.lineno}" if where else ""
        raise PluginError(f"plugin {spec}: import failed{at}: {type(exc).__name__}: {exc}") from None


def _import_file(path: Path, spec: str) -> ModuleType:
    """Import the file at ``path`` under its file name, and only that file: a name that already means another
    module (imported, built in, or earlier on sys.path) is refused rather than silently imported instead."""
    name, folder = path.stem, str(path.parent)
    if not name.isidentifier():
        raise PluginError(f"plugin {spec}: {name!r} is not a valid module name; rename the file")
    loaded = sys.modules.get(name)
    if loaded is not None:
        if _origin(getattr(loaded, "__file__", None)) == path:
            return loaded
        raise PluginError(f"plugin {spec}: the name {name!r} already belongs to the imported module "
                          f"{getattr(loaded, '__file__', None) or 'built in'}; rename the file")
    if name in sys.stdlib_module_names:
        raise PluginError(f"plugin {spec}: {name!r} is the name of a standard-library module; rename the file")
    if folder in sys.path:
        sys.path.remove(folder)
    other = importlib.util.find_spec(name)  # what the name means without this file's folder
    if other is not None and _origin(other.origin) != path:
        raise PluginError(f"plugin {spec}: the name {name!r} already belongs to {other.origin or 'another module'}; "
                          "rename the file")
    sys.path.insert(0, folder)  # first, so reward workers (which get this sys.path) resolve the name to this file
    return importlib.import_module(name)


def _origin(file: str | None) -> Path | None:
    return Path(file).resolve() if file else None


def import_user_module(name: str) -> ModuleType:
    """Import a module a config names (a tool's ``module:function``, an environment's ``load``): from sys.path, else
    from the working directory, which the ``rlvr`` console script (unlike ``python``) does not put on sys.path. The
    directory is then added to sys.path as an absolute path, so reward and tool workers, which start with the
    caller's sys.path, resolve the module the same way. A module that cannot be imported is a PluginError that
    says so, with what went wrong."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        here = Path.cwd()
        top = name.split(".")[0]
        if exc.name != top or not ((here / f"{top}.py").is_file() or (here / top / "__init__.py").is_file()):
            raise PluginError(f"cannot import {name!r}: {exc} (is it installed, or in the working directory {here}?)") \
                from None
        sys.path.insert(0, str(here))
        importlib.invalidate_caches()
        return importlib.import_module(name)
    except Exception as exc:  # the module's own failure
        raise PluginError(f"cannot import {name!r}: it raised {type(exc).__name__}: {exc}") from None


def load_plugins(specs, base_dir: str | Path | None = None) -> list[ModuleType]:
    if isinstance(specs, str):
        specs = [specs]
    if not isinstance(specs, (list, tuple)):
        raise PluginError(f"plugins: expected a list of module names or .py paths, got {type(specs).__name__}")
    return [load_plugin(s, base_dir) for s in specs]
