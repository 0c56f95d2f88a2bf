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


DEMO_YAML = """\
# the README's demo, as YAML
steps:
  - id: A
    command: echo hello
  - id: B
    command: sleep 0.3
    dependsOn: [A]
  - {id: C, command: sleep 0.3, dependsOn: [A]}
  - id: D
    command: date
    dependsOn: [B, C]
"""


FAILING = {
    "steps": [
        {"id": "flaky", "command": 'echo "try $HEDDLE_ATTEMPT"; exit 3', "retries": 1},
        {"id": "after", "command": "echo never", "dependsOn": ["flaky"]},
    ]
}
