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


def imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
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
