"""One exception root for the toolkit. The CLI maps each class to a one-line message and an exit code."""

from __future__ import annotations


class HaOpsError(Exception):
    """Base of every error ha-ops raises on purpose."""

    exit_code = 1


class SpecError(HaOpsError):
    """A cluster spec (or other input) is invalid. Carries one line per problem, each naming its field."""

    exit_code = 2

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = problems
        super().__init__(f"{source}: " + "; ".join(problems))


class LabError(HaOpsError):
    """The local lab could not be built, checked or removed."""

    exit_code = 3


class NotRootError(LabError):
    """The operation needs root (namespaces, daemons)."""


class TransportError(HaOpsError):
    """A node could not be reached or a command on it could not be run."""

    exit_code = 4


class HostKeyError(TransportError):
    """A host's SSH key is unknown or differs from known_hosts: refused, never accepted. Bad input, not an outage."""

    exit_code = 2


class CommandFailed(TransportError):
    """A command ran and exited non-zero."""

    def __init__(self, argv: list[str], returncode: int, stdout: str, stderr: str, where: str = "") -> None:
        self.argv = argv
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr
        place = f" on {where}" if where else ""
        tail = (stderr or stdout).strip().splitlines()[-3:]
        super().__init__(f"{' '.join(argv)!r}{place} exited {returncode}: {' | '.join(tail)}")


class CommandTimeout(TransportError):
    """A command outlived its timeout and was killed."""

    def __init__(self, argv: list[str], timeout: float, where: str = "") -> None:
        self.argv = argv
        self.timeout = timeout
        place = f" on {where}" if where else ""
        super().__init__(f"{' '.join(argv)!r}{place} did not finish within {timeout:g} s")


class WaitTimeout(HaOpsError):
    """A bounded wait for a condition ran out; says what was awaited and the last observation."""

    exit_code = 5
