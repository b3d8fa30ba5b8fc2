"""One error type for bad input: it names the file, the line and the field, in one line."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    """Something wrong in a file: where (file, line, field) and what."""

    file: str
    line: int | None
    field: str | None
    message: str

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        what = f"{self.field}: {self.message}" if self.field else self.message
        return one_line(f"{where}: {what}")


def one_line(text: str) -> str:
    """``text`` with control characters (newlines included) and unpaired surrogates escaped, so
    that a message quoting bad input stays one printable line."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


class InputError(Exception):
    """Bad input in a workspace file. ``str(err)`` is the one line shown to the user."""

    def __init__(self, file: str, line: int | None, field: str | None, message: str):
        self.problem = Problem(str(file), line, field, message)
        super().__init__(str(self.problem))

    @classmethod
    def of(cls, problem: Problem) -> "InputError":
        return cls(problem.file, problem.line, problem.field, problem.message)


class UsageError(Exception):
    """Bad usage (an unknown option value, a malformed id): exit status 2."""


class NotFound(Exception):
    """Refused or not found: exit status 1."""
