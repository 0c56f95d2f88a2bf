"""The code's layering, read from its imports: services never import one another, nothing
in shared/ imports a service, and only shared/'s NATS edge imports nats-py."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SERVICES = ("gateway", "orchestrator", "dispatcher", "runner_agent", "client")
# The modules that may talk to nats-py directly (docs/architecture.md, "Code layout").
NATS_EDGE = {
    "acked",
    "buckets",
    "consume",
    "documents",
    "jetstream_api",
    "kv_changes",
    "kv_reads",
    "kv_watch",
    "nats_io",
    "nats_types",
    "pull",
    "resources",
    "streams",
    "stored_events",
}


def imports(path: Path, *, at_run_time: bool = False) -> set[str]:
    """The modules ``path`` imports; ``at_run_time``: not those under ``if TYPE_CHECKING:``
    (annotations, never run)."""
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
    return found


def modules(folder: str) -> list[Path]:
    return sorted((ROOT / folder).rglob("*.py"))


def test_no_service_module_imports_nats_py() -> None:
    offenders = {
        str(p.relative_to(ROOT)): sorted(m for m in imports(p) if m.split(".")[0] == "nats")
        for p in modules("services")
    }
    assert {p: m for p, m in offenders.items() if m} == {}


def test_only_the_nats_edge_in_shared_imports_nats_py() -> None:
    users = {
        p.stem for p in modules("shared") if any(m.split(".")[0] == "nats" for m in imports(p))
    }
    assert users <= NATS_EDGE, users - NATS_EDGE


def test_services_do_not_import_one_another_and_shared_imports_no_service() -> None:
    for service in SERVICES:
        for path in modules(f"services/{service}"):
            others = {
                m
                for m in imports(path)
                if m.startswith("services.")
                and m.split(".")[1] in SERVICES
                and m.split(".")[1] != service
            }
            assert not others, (path, others)
    for path in modules("shared"):
        assert not any(m.startswith("services") for m in imports(path)), path


# The modules docs/architecture.md ("Code layout") calls pure: no I/O, tested directly.
PURE = (
    "shared/dag.py",
    "shared/validation.py",
    "shared/backoff.py",
    "shared/cron.py",
    "shared/tokens.py",
    "shared/hosts.py",
    "shared/tickets.py",
    "shared/nats_permissions.py",
    "shared/partitions.py",
    "services/orchestrator/state.py",
    "services/orchestrator/decisions.py",
    "services/orchestrator/watchdog.py",
    "services/orchestrator/pods.py",
    "services/orchestrator/backstop.py",
    "services/orchestrator/ownership.py",
    "services/dispatcher/pool.py",
    "services/dispatcher/hand.py",
    "services/dispatcher/waiting.py",
    "services/dispatcher/autoscale.py",
    "services/runner_agent/chunks.py",
    "services/gateway/reads/log_lines.py",
)
# What reaches a socket, a file, a process or a cluster.
IO_MODULES = {"nats", "aiohttp", "kubernetes", "socket", "subprocess", "select", "selectors"}
IO_MODULES |= {"shutil", "urllib", "http", "sqlite3"} | {f"shared.{m}" for m in NATS_EDGE}


def test_the_pure_modules_import_nothing_that_does_io() -> None:
    docs = (ROOT / "docs" / "architecture.md").read_text()
    layout = docs[docs.index("## Code layout") :][:2500].replace("\n", " ")
    for rel in PURE:
        assert f"`{rel}`" in layout, f"{rel} is not listed as pure in docs/architecture.md"
        found = {
            m
            for m in imports(ROOT / rel, at_run_time=True)
            if m in IO_MODULES or m.split(".")[0] in IO_MODULES
        }
        assert not found, (rel, found)
