"""The client's methods that are one call each, declared once for the sync and the async
client: ``Endpoint`` turns a function making a ``Call`` into a method that sends it with
its client's ``send``, so ``Client().run(id)`` answers a RunDocument and
``AsyncClient().run(id)`` an awaitable of one.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from typing import Any, Generic, ParamSpec, TypeVar, overload

import heddle.shared.api.calls as calls
import heddle.shared.api.config as config
import heddle.shared.api.documents as documents
from heddle.shared.api.answers import GateAnswer, Submitted
from heddle.shared.api.documents import Source
from heddle.shared.api.registry_answers import PausedWorkflow, Registered
from heddle.shared.api.request import TIMEOUT, Call, Connection
from heddle.shared.api.waiting import POLL_INTERVAL

P = ParamSpec("P")
T = TypeVar("T")


class SyncSender(ABC):
    @abstractmethod
    def send(self, call: Call[T]) -> T: ...


class AsyncSender(ABC):
    @abstractmethod
    async def send(self, call: Call[T]) -> T: ...


class Endpoint(Generic[P, T]):
    """A method made of the function that makes its call."""

    def __init__(self, make: Callable[P, Call[T]]) -> None:
        self.make = make
        self.__doc__ = make.__doc__

    @overload
    def __get__(self, client: SyncSender, owner: Any) -> Callable[P, T]: ...

    @overload
    def __get__(self, client: AsyncSender, owner: Any) -> Callable[P, Awaitable[T]]: ...

    def __get__(self, client: Any, owner: Any) -> Any:
        make = self.make
        if client is None:
            return self

        def method(*args: P.args, **kwargs: P.kwargs) -> Any:
            return client.send(make(*args, **kwargs))

        method.__name__ = getattr(make, "__name__", "method")
        method.__doc__ = make.__doc__
        return method


def submit(
    workflow: Source, run_id: str | None = None, priority: int | None = None
) -> Call[Submitted]:
    """Run a workflow: a document, or the path of a JSON or YAML file (BadDocument, before
    anything is sent, if it has problems); ``run_id`` and ``priority`` over its own."""
    return calls.submit(documents.run_request(workflow, run_id, priority))


def register(workflow: Source) -> Call[Registered]:
    """Register a workflow (a document or a file, with a name): a new version if it changed."""
    return calls.register(documents.workflow(workflow))


def approve(run_id: str, step_id: str, comment: str | None = None) -> Call[GateAnswer]:
    """Approve a waiting gate: the step succeeds. Refused 409 if it was answered already."""
    return calls.decide(run_id, step_id, True, comment)


def reject(run_id: str, step_id: str, comment: str | None = None) -> Call[GateAnswer]:
    """Reject a waiting gate: the step fails. Refused 409 if it was answered already."""
    return calls.decide(run_id, step_id, False, comment)


def pause(name: str) -> Call[PausedWorkflow]:
    """Pause a workflow's schedule."""
    return calls.set_paused(name, True)


def resume(name: str) -> Call[PausedWorkflow]:
    """Resume a workflow's schedule."""
    return calls.set_paused(name, False)


class Api:
    """The calls both clients make alike; each returns the gateway's answer as its type.
    Where to connect, the token and the namespace come from the arguments, else
    HEDDLE_URL, HEDDLE_TOKEN (or the file HEDDLE_TOKEN_FILE names) and HEDDLE_NAMESPACE,
    else ``.heddle/url`` and ``.heddle/admin-token`` (Usage if there is no address)."""

    def __init__(
        self,
        url: str | None = None,
        *,
        token: str | None = None,
        token_file: str | None = None,
        namespace: str | None = None,
        timeout: float = TIMEOUT,
        connection: Connection | None = None,
    ) -> None:
        self.connection = connection or config.connection(
            url, token, token_file, namespace, timeout=timeout
        )
        self.poll_interval = POLL_INTERVAL  # seconds between reads of a run not streamed

    @property
    def url(self) -> str:
        return self.connection.url

    submit = Endpoint(submit)
    register = Endpoint(register)
    trigger = Endpoint(calls.trigger)
    run = Endpoint(calls.run)
    steps = Endpoint(calls.steps)
    step = Endpoint(calls.step)
    runs = Endpoint(calls.runs)
    cancel = Endpoint(calls.cancel)
    retry = Endpoint(calls.retry)
    logs = Endpoint(calls.logs)
    approve = Endpoint(approve)
    reject = Endpoint(reject)
    approvals = Endpoint(calls.approvals)
    workflows = Endpoint(calls.workflows)
    workflow = Endpoint(calls.workflow)
    history = Endpoint(calls.history)
    pause = Endpoint(pause)
    resume = Endpoint(resume)
    runners = Endpoint(calls.runners)
    semaphores = Endpoint(calls.semaphores)
    set_semaphore = Endpoint(calls.set_semaphore)
    namespaces = Endpoint(calls.namespaces)
    namespace = Endpoint(calls.namespace)
    set_quotas = Endpoint(calls.set_quotas)
    tokens = Endpoint(calls.tokens)
    create_token = Endpoint(calls.create_token)
    revoke_token = Endpoint(calls.revoke_token)
