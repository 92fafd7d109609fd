"""What one reward call may change in its worker process, recorded when the worker is ready and put back after
every call, so that the next call on the same worker gets the verdict it would get on a fresh one.

Each kind of state is one small class: its constructor records the state, ``restore()`` puts it back and returns
False when it cannot (the worker then retires after answering: a fresh worker is always clean). The kinds, in the
order they are restored:

- tracing: interval timers, trace and profile hooks (also those of new threads), sys.monitoring tools (3.12+);
- signals: Python's handlers, the kernel's dispositions (a handler or SIG_IGN set below Python, through ctypes)
  and the blocked-signal mask;
- descriptors: standard input, output and error and the worker's channel are put back from copies when a call
  closed them or dup2'ed something over them; a descriptor of the worker's own that was closed or replaced, or
  more than ``MAX_LEAKED_FDS`` left open, retires the worker;
- streams: sys.stdin/stdout/stderr (and their ``__dunder__`` originals) replaced or closed;
- directory: working directory, umask, resource limits;
- environment: os.environ and the C-level environment (setenv/putenv through ctypes reach child processes and C
  libraries without touching os.environ), and the time zone read from it;
- numbers: the decimal context of the calling thread and decimal's template contexts, the floating-point
  rounding mode (fesetround), flush-to-zero / denormals-are-zero (set by a library built with -ffast-math: cannot
  be put back portably, so the worker retires), and the global modes of numerical libraries once imported
  (numpy's error handling and print options, mpmath's precision, sympy's evaluate/distribute switches);
- interpreter: sys.path, sys.meta_path, sys.path_hooks, sys.modules (a module replaced or removed is put back; a
  module object planted under a new name without an import, i.e. without a spec, retires the worker), the
  builtins, the recursion limit, the int-to-string digit limit, the switch interval, display and except hooks,
  warning filters, the locale, the garbage collector's switch and thresholds; an audit hook added by a call
  cannot be removed, so it retires the worker.

- randomness: the global generators of ``random`` and numpy are reseeded from the OS, as in a fresh worker (not
  put back: a stochastic reward must not see the same draws on every call).

Not restored: caches (a fresh worker fills them the same way) and Python threads (a call that leaves one running
retires the worker: see worker.py).
"""

from __future__ import annotations

import builtins
import decimal
import gc
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import _signal

MAX_LEAKED_FDS = 16  # descriptors a call may leave open (a cached connection) before the worker retires
_RLIMITS = ("RLIMIT_AS", "RLIMIT_CORE", "RLIMIT_CPU", "RLIMIT_DATA", "RLIMIT_FSIZE", "RLIMIT_NOFILE", "RLIMIT_NPROC",
            "RLIMIT_STACK")
_HIGH_FD = 200  # where the copies of the kept descriptors live, away from the low numbers calls open and close


class Tracing:
    def __init__(self) -> None:
        monitoring = getattr(sys, "monitoring", None)  # Python 3.12+
        self.tools = {i: monitoring.get_tool(i) for i in range(6)} if monitoring else {}

    def _monitoring(self) -> bool:
        monitoring = sys.monitoring  # type: ignore[attr-defined]
        clean = True
        for tool, name in self.tools.items():
            if monitoring.get_tool(tool) == name:
                continue
            if name is not None:  # a tool of the worker's own was freed or replaced: cannot be put back
                clean = False
                continue
            # a call registered a tool: its callbacks would fire during the next call
            monitoring.set_events(tool, 0)
            for bit in range(20):
                try:
                    monitoring.register_callback(tool, 1 << bit, None)
                except ValueError:
                    pass
            monitoring.free_tool_id(tool)
        return clean

    def restore(self) -> bool:
        clean = self._monitoring() if self.tools else True
        for timer in (signal.ITIMER_REAL, signal.ITIMER_VIRTUAL, signal.ITIMER_PROF):
            signal.setitimer(timer, 0)
        sys.settrace(None)
        sys.setprofile(None)
        threading.settrace(None)  # type: ignore[arg-type]
        threading.setprofile(None)  # type: ignore[arg-type]
        return clean


def _kernel_signals() -> tuple[str, ...]:
    """The process's ignored, caught and (main thread's) blocked signal sets, as the kernel has them."""
    try:
        with open("/proc/self/status", "rb") as f:
            lines = f.read().split(b"\n")
    except OSError:
        return ()
    return tuple(line.decode() for line in lines if line[:6] in (b"SigIgn", b"SigCgt", b"SigBlk"))


class Signals:
    def __init__(self) -> None:
        self.handlers: dict[int, Any] = {}
        for sig in signal.valid_signals():
            try:
                handler = _signal.getsignal(sig)
            except (ValueError, OSError):
                continue
            if handler is not None:
                self.handlers[int(sig)] = handler
        self.mask = signal.pthread_sigmask(signal.SIG_BLOCK, [])
        self.kernel = _kernel_signals()

    def _reinstall(self, all_of_them: bool) -> bool:
        clean = True
        for sig, handler in self.handlers.items():
            if all_of_them or _signal.getsignal(sig) is not handler:
                try:
                    _signal.signal(sig, handler)
                except (ValueError, OSError, TypeError):
                    clean = False
        return clean

    def restore(self) -> bool:
        clean = self._reinstall(all_of_them=False)
        if signal.pthread_sigmask(signal.SIG_BLOCK, []) != self.mask:
            signal.pthread_sigmask(signal.SIG_SETMASK, self.mask)
        if _kernel_signals() != self.kernel:  # changed below Python (ctypes sigaction/signal/sigprocmask)
            clean = self._reinstall(all_of_them=True) and clean
            signal.pthread_sigmask(signal.SIG_SETMASK, self.mask)
            clean = clean and _kernel_signals() == self.kernel
        return clean


def _fd_identity(fd: int) -> tuple[int, int] | None:
    try:
        st = os.fstat(fd)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _open_fds() -> set[int]:
    try:
        return {int(name) for name in os.listdir("/proc/self/fd")}
    except OSError:  # no /proc: check only the kept descriptors
        return set()


class Descriptors:
    def __init__(self, keep: tuple[int, ...]) -> None:
        self.copies: dict[int, tuple[int, tuple[int, int]]] = {}  # kept fd -> (its copy, identity)
        import fcntl

        for fd in (0, 1, 2, *keep):
            identity = _fd_identity(fd)
            if identity is not None:
                try:
                    copy = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, _HIGH_FD)
                except OSError:  # RLIMIT_NOFILE below _HIGH_FD: the lowest free number will do
                    copy = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
                self.copies[fd] = (copy, identity)
        self.own = {fd: _fd_identity(fd) for fd in _open_fds()}
        self.own = {fd: ident for fd, ident in self.own.items() if ident is not None}

    def restore(self) -> bool:
        clean = True
        for fd, (copy, identity) in self.copies.items():
            if _fd_identity(fd) != identity:
                if _fd_identity(copy) != identity:
                    return False  # the copy is gone too: nothing to put back
                os.dup2(copy, fd, inheritable=fd <= 2)
        now = _open_fds()
        for fd, identity in self.own.items():
            if fd not in now or _fd_identity(fd) != identity:
                clean = False
        if len(now - set(self.own)) > MAX_LEAKED_FDS + 1:  # +1: the listing's own descriptor
            clean = False
        return clean


_STREAMS = (("stdin", 0, "r"), ("stdout", 1, "w"), ("stderr", 2, "w"))


class Streams:
    def __init__(self) -> None:
        self.objects = {name: getattr(sys, name) for name, _, _ in _STREAMS}
        self.dunders = {name: getattr(sys, f"__{name}__") for name, _, _ in _STREAMS}

    def restore(self) -> bool:
        for name, fd, mode in _STREAMS:
            stream = self.objects[name]
            if stream is not None and getattr(stream, "closed", False):
                try:  # a call closed it: a new stream on the same descriptor (which Descriptors put back)
                    stream = self.objects[name] = open(fd, mode, closefd=False, buffering=-1 if fd == 0 else 1,
                                                       errors="backslashreplace")
                except OSError:
                    return False
                if getattr(self.dunders[name], "closed", False):
                    self.dunders[name] = stream
            if getattr(sys, name) is not stream:
                setattr(sys, name, stream)
            if getattr(sys, f"__{name}__") is not self.dunders[name]:
                setattr(sys, f"__{name}__", self.dunders[name])
        return True


class Directory:
    def __init__(self) -> None:
        self.cwd = os.getcwd()
        self.umask = os.umask(0o022)
        os.umask(self.umask)
        self.rlimits: dict[int, tuple[int, int]] = {}
        try:
            import resource

            for name in _RLIMITS:
                if hasattr(resource, name):
                    self.rlimits[getattr(resource, name)] = resource.getrlimit(getattr(resource, name))
        except ImportError:
            pass

    def restore(self) -> bool:
        clean = True
        try:
            if os.getcwd() != self.cwd:
                os.chdir(self.cwd)
        except OSError:  # the directory we were in was removed under us: go back by name
            try:
                os.chdir(self.cwd)
            except OSError:
                clean = False
        os.umask(self.umask)
        if self.rlimits:
            import resource

            for which, limits in self.rlimits.items():
                if resource.getrlimit(which) != limits:
                    try:
                        resource.setrlimit(which, limits)
                    except (ValueError, OSError):
                        clean = False
        return clean


def _c_environ() -> list[bytes] | None:
    """The C library's ``environ`` (what child processes and C code see), or None where it cannot be read."""
    try:
        import ctypes

        environ = ctypes.POINTER(ctypes.c_char_p).in_dll(ctypes.CDLL(None), "environ")
    except (ImportError, OSError, ValueError, AttributeError):
        return None
    out = []
    if not environ:  # clearenv() leaves a NULL environ
        return out
    i = 0
    while environ[i] is not None:
        out.append(environ[i])
        i += 1
    return out


def _as_pairs(entries: list[bytes]) -> dict[bytes, bytes]:
    pairs = {}
    for entry in entries:
        name, sep, value = entry.partition(b"=")
        if sep and name:
            pairs.setdefault(name, value)
    return pairs


class Environment:
    def __init__(self) -> None:
        self.environ = dict(os.environ)
        self.data = dict(getattr(os.environ, "_data", os.environ))
        self.c_level = _c_environ()
        self.tz = os.environ.get("TZ")

    def restore(self) -> bool:
        changed = False
        if getattr(os.environ, "_data", os.environ) != self.data:
            os.environ.clear()
            os.environ.update(self.environ)
            changed = True
        if self.c_level is not None:
            now = _c_environ()
            if now != self.c_level:
                want, have = _as_pairs(self.c_level), _as_pairs(now or [])
                for name in have.keys() - want.keys():
                    os.unsetenv(name)
                for name, value in want.items():
                    if have.get(name) != value:
                        os.putenv(name, value)
                changed = True
                if _as_pairs(_c_environ() or []) != want:
                    return False
        if changed:
            time.tzset()  # a call may have read a TZ of its own into the C library
        return True


@dataclass(frozen=True)
class LibraryMode:
    """A process-wide mode of a library, checked once the library is imported: ``default`` is what a fresh import
    has (or, for a library imported before the worker was ready, what it had then)."""

    module: str
    get: Callable[[Any], Any]
    set: Callable[[Any, Any], None]
    default: Any


_NUMPY_PRINT = {"edgeitems": 3, "threshold": 1000, "floatmode": "maxprec", "precision": 8, "suppress": False,
                "linewidth": 75, "nanstr": "nan", "infstr": "inf", "sign": "-", "formatter": None, "legacy": False}


def _set_sympy(module: Any, value: tuple[bool, bool, bool]) -> None:
    params = module.global_parameters
    params.evaluate, params.distribute, params.exp_is_pow = value


LIBRARY_MODES = (
    LibraryMode("numpy", lambda np: np.geterr(), lambda np, v: np.seterr(**v),
                {"divide": "warn", "over": "warn", "under": "ignore", "invalid": "warn"}),
    LibraryMode("numpy", lambda np: {k: np.get_printoptions().get(k) for k in _NUMPY_PRINT},
                lambda np, v: np.set_printoptions(**v), _NUMPY_PRINT),
    LibraryMode("mpmath", lambda m: (m.mp.prec, m.mp.pretty, m.mp.trap_complex),
                lambda m, v: (setattr(m.mp, "prec", v[0]), setattr(m.mp, "pretty", v[1]),
                              setattr(m.mp, "trap_complex", v[2])), (53, False, False)),
    LibraryMode("sympy.core.parameters",
                lambda m: (m.global_parameters.evaluate, m.global_parameters.distribute, m.global_parameters.exp_is_pow),
                _set_sympy, (True, True, False)),
)

_CONTEXT_FIELDS = ("prec", "rounding", "Emin", "Emax", "capitals", "clamp")


def _context_state(context: decimal.Context) -> tuple:
    return (*(getattr(context, f) for f in _CONTEXT_FIELDS), dict(context.traps))


def _float_probe() -> tuple[bool, bool]:
    """(subnormal results survive, subnormal inputs count): both False under flush-to-zero / denormals-are-zero."""
    tiny = float.fromhex("0x1p-1022")
    sub = float.fromhex("0x1p-1074")
    return (tiny / 2.0) != 0.0, (sub * 2.0) != 0.0


def _rounding_functions() -> tuple[Any, Any] | None:
    try:
        import ctypes

        libc = ctypes.CDLL(None)
        return libc.fegetround, libc.fesetround
    except (ImportError, OSError, AttributeError):
        return None


class Numbers:
    def __init__(self) -> None:
        self.context = decimal.getcontext().copy()
        self.templates = {name: _context_state(getattr(decimal, name))
                          for name in ("DefaultContext", "BasicContext", "ExtendedContext")}
        self.modes = {i: mode.get(sys.modules[mode.module]) for i, mode in enumerate(LIBRARY_MODES)
                      if mode.module in sys.modules}
        self.rounding = _rounding_functions()
        self.round_mode = self.rounding[0]() if self.rounding else None
        self.float_probe = _float_probe()

    def restore(self) -> bool:
        clean = True
        decimal.setcontext(self.context.copy())
        for name, state in self.templates.items():
            template = getattr(decimal, name)
            if _context_state(template) != state:
                for f, value in zip(_CONTEXT_FIELDS, state):
                    setattr(template, f, value)
                template.traps = dict(state[-1])
        for i, mode in enumerate(LIBRARY_MODES):
            module = sys.modules.get(mode.module)
            if module is None:
                continue
            want = self.modes.get(i, mode.default)
            try:
                if mode.get(module) != want:
                    mode.set(module, want)
                    clean = clean and mode.get(module) == want
            except Exception:  # a library replaced by something else: do not trust this worker
                clean = False
        if self.rounding is not None and self.rounding[0]() != self.round_mode:
            self.rounding[1](self.round_mode)
            clean = clean and self.rounding[0]() == self.round_mode
        if _float_probe() != self.float_probe:
            clean = False  # flush-to-zero set by native code: no portable way back
        return clean


def _locale() -> str | None:
    try:
        import locale

        return locale.setlocale(locale.LC_ALL)
    except Exception:
        return None


class Interpreter:
    def __init__(self) -> None:
        self.path, self.path_items = sys.path, list(sys.path)
        self.meta_path, self.meta_items = sys.meta_path, list(sys.meta_path)
        self.path_hooks, self.hook_items = sys.path_hooks, list(sys.path_hooks)
        self.modules = dict(sys.modules)
        self.builtins = dict(vars(builtins))
        self.limits = (sys.getrecursionlimit(), sys.get_int_max_str_digits(), sys.getswitchinterval())
        self.hooks = (sys.displayhook, sys.excepthook, sys.unraisablehook, sys.breakpointhook)
        import warnings

        self.warnings = (warnings.filters, list(warnings.filters), warnings.showwarning, warnings.formatwarning)
        self.locale = _locale()
        self.gc = (gc.isenabled(), gc.get_threshold(), gc.get_debug())
        self.audit_hook_added = False
        sys.addaudithook(self._audit)

    def _audit(self, event: str, args: tuple) -> None:
        if event == "sys.addaudithook":
            self.audit_hook_added = True

    def _lists(self) -> None:
        for attr, original, items in (("path", self.path, self.path_items), ("meta_path", self.meta_path, self.meta_items),
                                      ("path_hooks", self.path_hooks, self.hook_items)):
            if getattr(sys, attr) is not original:
                setattr(sys, attr, original)
            if original != items:
                original[:] = items

    def restore(self) -> bool:
        clean = not self.audit_hook_added
        self._lists()
        modules = sys.modules
        if len(modules) != len(self.modules) or any(modules.get(k) is not v for k, v in self.modules.items()):
            for name, module in self.modules.items():
                if modules.get(name) is not module:
                    modules[name] = module
        for name in modules.keys() - self.modules.keys():
            module = modules[name]
            if getattr(module, "__spec__", None) is None and not hasattr(module, "__file__"):
                clean = False  # planted without an import: a later import of that name would get it
            self.modules[name] = module  # imported by this call: from now on part of the worker
        table = vars(builtins)
        if len(table) != len(self.builtins) or any(table.get(k) is not v for k, v in self.builtins.items()):
            for name in table.keys() - self.builtins.keys():
                if name != "_":
                    del table[name]
            table.update(self.builtins)
        if (sys.getrecursionlimit(), sys.get_int_max_str_digits(), sys.getswitchinterval()) != self.limits:
            sys.setrecursionlimit(self.limits[0])
            sys.set_int_max_str_digits(self.limits[1])
            sys.setswitchinterval(self.limits[2])
        sys.displayhook, sys.excepthook, sys.unraisablehook, sys.breakpointhook = self.hooks
        import warnings

        filters, items, show, form = self.warnings
        if warnings.filters is not filters or filters != items:
            warnings.filters = filters
            filters[:] = items
            warnings._filters_mutated()
        warnings.showwarning, warnings.formatwarning = show, form
        if _locale() != self.locale and self.locale is not None:
            import locale

            try:
                locale.setlocale(locale.LC_ALL, self.locale)
            except locale.Error:
                clean = False
        if (gc.isenabled(), gc.get_threshold(), gc.get_debug()) != self.gc:
            (gc.enable if self.gc[0] else gc.disable)()
            gc.set_threshold(*self.gc[1])
            gc.set_debug(self.gc[2])
        return clean


class Randomness:
    """The global generators of ``random`` and numpy are reseeded from the OS after every call, as a fresh worker's
    are: a call that seeds them (or draws from them) decides nothing about the next call's draws."""

    def restore(self) -> bool:
        import random

        random.seed()
        numpy_random = sys.modules.get("numpy.random")
        if numpy_random is not None:
            try:
                numpy_random.seed()
            except Exception:
                return False
        return True


class ProcessState:
    """Every kind above, recorded now. ``restore()`` puts each back and returns the names of the kinds that
    could not be (empty: the worker is clean)."""

    def __init__(self, keep_fds: tuple[int, ...] = ()) -> None:
        self.kinds: list[tuple[str, Any]] = [
            ("tracing", Tracing()),
            ("signals", Signals()),
            ("descriptors", Descriptors(keep_fds)),
            ("streams", Streams()),
            ("directory", Directory()),
            ("environment", Environment()),
            ("numbers", Numbers()),
            ("randomness", Randomness()),
            ("interpreter", Interpreter()),
        ]

    def restore(self) -> list[str]:
        failed = []
        for name, kind in self.kinds:
            try:
                if not kind.restore():
                    failed.append(name)
            except Exception:
                failed.append(name)
        return failed
