"""The code's layering, read from its imports, as prefix rules over the one installed package
``heddle``: the wire and the core import no other layer and do no I/O, only the NATS edge
(``heddle.shared.broker``) imports nats-py, only ``heddle.shared.core.expressions`` the CEL
library, nothing in ``heddle.shared`` imports a service, no service imports another, and no
import circle closes anywhere."""

from __future__ import annotations

import ast
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = {"heddle.shared": ROOT / "shared", "heddle.services": ROOT / "services"}
SERVICES = ("gateway", "orchestrator", "dispatcher", "runner_agent")
EDGE = "heddle.shared.broker"
# What reaches a socket, a file, a process or a cluster.
IO_MODULES = {"nats", "aiohttp", "kubernetes", "socket", "subprocess", "select", "selectors"}
IO_MODULES |= {"shutil", "urllib", "http", "sqlite3", EDGE, "heddle.shared.runtime"}
# The services' own pure modules: no I/O, tested directly (the wire and the core are pure
# as a whole).
PURE_IN_SERVICES = (
    "heddle.services.orchestrator.state",
    "heddle.services.orchestrator.run_steps",
    "heddle.services.orchestrator.transitions",
    "heddle.services.orchestrator.continuations",
    "heddle.services.orchestrator.attempt_reports",
    "heddle.services.orchestrator.new_run",
    "heddle.services.orchestrator.stopping",
    "heddle.services.orchestrator.decisions",
    "heddle.services.orchestrator.watchdog",
    "heddle.services.orchestrator.pods",
    "heddle.services.orchestrator.pod_objects",
    "heddle.services.orchestrator.backstop",
    "heddle.services.orchestrator.ownership",
    "heddle.services.orchestrator.unplaceable",
    "heddle.services.orchestrator.step_waits",
    "heddle.services.orchestrator.slot_answers",
    "heddle.services.orchestrator.call_steps",
    "heddle.services.orchestrator.gates",
    "heddle.services.orchestrator.gate_answers",
    "heddle.services.dispatcher.pool",
    "heddle.services.dispatcher.hand",
    "heddle.services.dispatcher.waiting",
    "heddle.services.dispatcher.autoscale",
    "heddle.services.runner_agent.chunks",
    "heddle.services.local.runner_pools",
    "heddle.services.runner_agent.process_result",
    "heddle.services.runner_agent.step_environment",
    "heddle.services.gateway.reads.log_lines",
    "heddle.services.gateway.reads.waiting",
    "heddle.services.gateway.openapi.workflow_schema",
    "heddle.services.cli.approvals",
    "heddle.shared.api.calls",
    "heddle.shared.api.events",
    "heddle.shared.api.request",
    "heddle.shared.api.waiting",
)


def module_files() -> Iterator[tuple[str, Path]]:
    """Every module of the package, by its dotted name."""
    for package, folder in FOLDERS.items():
        for path in sorted(folder.rglob("*.py")):
            parts = path.relative_to(folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            yield ".".join((package, *parts)), path


MODULES = dict(module_files())


def imports(path: Path, *, at_run_time: bool = False) -> set[str]:
    """The modules ``path`` imports (a ``from p import m`` of a module ``p.m`` counts as
    ``p.m``); ``at_run_time``: not those under ``if TYPE_CHECKING:`` (annotations, never
    run)."""
    tree = ast.parse(path.read_text(), str(path))
    if at_run_time:
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
                node.body = []
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names} & MODULES.keys()
    return found


def under(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def heddle_imports(module: str, **kw: bool) -> set[str]:
    return {m for m in imports(MODULES[module], **kw) if under(m, "heddle")}


def test_everything_is_imported_under_heddle() -> None:
    """No generic top-level name: not ``shared``, not ``services``, in code, tests or bench."""
    offenders = {}
    for folder in ("shared", "services", "tests", "bench"):
        for path in (ROOT / folder).rglob("*.py"):
            bad = {m for m in imports(path) if m.split(".")[0] in ("shared", "services")}
            if bad:
                offenders[str(path.relative_to(ROOT))] = sorted(bad)
    assert offenders == {}


def test_the_packages_installed_are_the_folders() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = {m for m, p in MODULES.items() if p.name == "__init__.py"}
    assert set(config["packages"]) == folders
    assert config["package-dir"] == {"heddle.shared": "shared", "heddle.services": "services"}


def test_only_the_nats_edge_imports_nats_py() -> None:
    users = {m for m, p in MODULES.items() if any(i.split(".")[0] == "nats" for i in imports(p))}
    assert {m for m in users if not under(m, EDGE)} == set()


def test_only_the_expressions_module_imports_the_cel_library() -> None:
    users = {m for m, p in MODULES.items() if any(under(i, "cel_expr_python") for i in imports(p))}
    assert users == {"heddle.shared.core.expressions"}


@pytest.mark.parametrize(
    ("layer", "may"),
    [
        ("heddle.shared.wire", ("heddle.shared.wire",)),
        ("heddle.shared.core", ("heddle.shared.wire", "heddle.shared.core")),
        ("heddle.shared", ("heddle.shared",)),
    ],
)
def test_a_layer_imports_only_the_layers_below_it(layer: str, may: tuple[str, ...]) -> None:
    offenders = {
        m: sorted(i for i in heddle_imports(m) if not any(under(i, p) for p in may))
        for m in MODULES
        if under(m, layer)
    }
    assert {m: i for m, i in offenders.items() if i} == {}


def test_no_service_imports_another() -> None:
    for service in SERVICES:
        mine = f"heddle.services.{service}"
        for module in (m for m in MODULES if under(m, mine)):
            others = {
                i
                for i in heddle_imports(module)
                if under(i, "heddle.services") and not under(i, mine)
            }
            assert not others, (module, others)


def test_the_pure_modules_import_nothing_that_does_io() -> None:
    pure = [m for m in MODULES if under(m, "heddle.shared.wire") or under(m, "heddle.shared.core")]
    for module in [*pure, *PURE_IN_SERVICES]:
        found = {
            i
            for i in imports(MODULES[module], at_run_time=True)
            if any(under(i, io) for io in IO_MODULES)
        }
        assert not found, (module, found)


def test_no_import_circle() -> None:
    """Tarjan's strongly connected components over every import, those for annotations
    alone or deferred into a function included: each must be one module."""
    graph = {m: heddle_imports(m) & MODULES.keys() for m in MODULES}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for module in graph:
        if module not in index:
            visit(module)
    assert circles == []
