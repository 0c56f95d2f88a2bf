"""Workflow documents that several test files submit."""

from __future__ import annotations

EXAMPLE = {
    "name": "example",
    "steps": [
        {"id": "A", "command": "echo hello"},
        {"id": "B", "command": "sleep 0.5", "dependsOn": ["A"]},
        {"id": "C", "command": "sleep 0.5", "dependsOn": ["A"]},
        {"id": "D", "command": "date", "dependsOn": ["B", "C"]},
    ],
}
