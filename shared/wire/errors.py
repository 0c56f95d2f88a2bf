"""Heddle's error hierarchy: each error carries the context needed to act on it."""

from __future__ import annotations

from dataclasses import dataclass


class HeddleError(Exception):
    """Base of every error Heddle raises on purpose."""


class SettingsError(HeddleError):
    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("invalid settings: " + "; ".join(problems))


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with a document, located by a JSON-ish path such as ``steps[3].id``."""

    path: str
    message: str

    def to_json(self) -> dict[str, str]:
        return {"path": self.path, "message": self.message}


class InvalidWorkflow(HeddleError):
    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__(
            f"invalid workflow: {len(problems)} problem(s): "
            + "; ".join(f"{p.path}: {p.message}" for p in problems[:5])
        )


class DocumentTooLarge(HeddleError):
    """A document encodes to more bytes than one NATS message may hold: refused before
    anything is published or written."""

    def __init__(self, what: str, size: int, limit: int, path: str = "steps") -> None:
        self.what = what
        self.size = size
        self.limit = limit
        self.path = path  # the field that makes it large, for the answer's problem
        super().__init__(
            f"the {what} encodes to {size} bytes; the NATS server accepts documents up to "
            f"{limit} bytes"
        )


class NatsTooOld(HeddleError):
    def __init__(self, found_level: int, needed_level: int, needed_version: str) -> None:
        self.found_level = found_level
        self.needed_level = needed_level
        super().__init__(
            f"NATS server too old: Heddle needs nats-server {needed_version} or newer "
            f"(JetStream API level {needed_level}); this server reports level {found_level}"
        )


class JetStreamUnavailable(HeddleError):
    pass


class AcknowledgementLost(HeddleError, ConnectionError):
    """A publish's acknowledgement can no longer come: the connection it was sent on dropped
    (the server died, or it answers the old connection). Whether the message was stored is
    unknown, so it is sent again."""

    def __init__(self, subject: str) -> None:
        self.subject = subject
        super().__init__(f"connection lost before {subject} was acknowledged")


class ResourceMismatch(HeddleError):
    def __init__(self, resource: str, problems: list[str]) -> None:
        self.resource = resource
        self.problems = problems
        super().__init__(f"{resource}: " + "; ".join(problems))


class OutcomeUnknown(HeddleError):
    """Whether a step's outcome is stored could not be read (the server did not answer, or
    answered with an error): not the same as "none is stored"."""

    def __init__(self, subject: str, cause: Exception) -> None:
        self.subject = subject
        self.cause = cause
        super().__init__(f"reading the last message on {subject} failed: {cause!r}")


class TokenFileError(HeddleError):
    """The bootstrap admin token file cannot be used. The message names the file, never
    the token."""

    def __init__(self, path: str, problem: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(f"HEDDLE_ADMIN_TOKEN_FILE {path}: {problem}")


class NatsUnreachable(HeddleError):
    """A command's one connection to NATS failed: not there, or the user refused."""

    def __init__(self, url: str, user: str, why: str) -> None:
        who = f" as {user}" if user else ""
        super().__init__(f"cannot connect to NATS at {url}{who}: {why}")


class NatsRefused(HeddleError):
    """The NATS server refused this user: a wrong password, or no such user."""

    def __init__(self, user: str, url: str) -> None:
        who = f"user {user!r}" if user else "an anonymous connection (no HEDDLE_NATS_USER)"
        super().__init__(
            f"the NATS server at {url} refused {who}: check HEDDLE_NATS_USER and "
            "HEDDLE_NATS_PASSWORD (or HEDDLE_NATS_PASSWORD_FILE)"
        )
