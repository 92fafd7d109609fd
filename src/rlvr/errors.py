"""The one kind of error the command line reports as a single line: a problem with what the user gave (a config
key, a data row, a path, an option), whose message names it and says what was expected.

Anything else that escapes a command is a bug in rlvr or in a plugin: the command line prints its traceback and
asks for a report, so no real fault ever hides behind a one-line message.
"""

from __future__ import annotations


class UserError(ValueError):
    """Bad input from the user; the message names the file, line, key or flag and what was expected."""


class MissingDependency(UserError, ImportError):
    """An optional package a configured feature needs is not installed; the message names what to install."""


class UnknownName(KeyError, UserError):
    """A name no registry holds; a KeyError (a failed lookup) that the command line reports as one line."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""
