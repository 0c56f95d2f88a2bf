"""``/api/semaphores`` and the `heddle semaphore(s)` commands against a real stack: sizes set
by an admin alone, every problem of a request listed, an unknown semaphore of size 1, and
the steps' semaphore names checked with their workflow (docs/pools.md, "Semaphores")."""

from __future__ import annotations

import json

from tests.support.cli import env_of, heddle
from tests.support.stack import StackFactory


async def test_sizes_are_set_by_admins_and_read_by_viewers(stack: StackFactory) -> None:
    s = await stack(runners=1)
    status, body = await s.request("GET", "/api/semaphores/never-set")
    assert status == 200
    assert body == {
        "name": "never-set",
        "namespace": "default",
        "size": 1,
        "holders": [],
        "waiting": [],
    }
    status, body = await s.request("PUT", "/api/semaphores/db", json={"size": 3})
    assert (status, body["size"]) == (200, 3)
    status, body = await s.request("GET", "/api/semaphores")
    assert status == 200 and [(d["name"], d["size"]) for d in body["semaphores"]] == [("db", 3)]

    status, made = await s.request("POST", "/api/tokens", json={"name": "v", "role": "viewer"})
    assert status == 201
    viewer = {"Authorization": f"Bearer {made['token']}"}
    status, _ = await s.request("GET", "/api/semaphores/db", headers=viewer)
    assert status == 200
    status, _ = await s.request("PUT", "/api/semaphores/db", json={"size": 9}, headers=viewer)
    assert status == 403
    assert (await s.request("GET", "/api/semaphores/db"))[1]["size"] == 3


async def test_every_problem_of_a_request_is_listed(stack: StackFactory) -> None:
    s = await stack(runners=1)
    status, body = await s.request(
        "PUT", "/api/semaphores/bad.name", json={"size": 0, "color": "red"}
    )
    assert status == 400
    assert sorted(p["path"] for p in body["problems"]) == ["color", "name", "size"]
    status, body = await s.request("PUT", "/api/semaphores/db", json={})
    assert status == 400 and [p["path"] for p in body["problems"]] == ["size"]
    status, body = await s.request("GET", "/api/semaphores/bad.name")
    assert status == 400
    doc = {
        "steps": [
            {"id": "a", "command": "true", "semaphores": ["db", "no way"]},
            {"id": "b", "command": "true", "semaphores": "db"},
        ]
    }
    status, body = await s.request("POST", "/api/runs", json=doc)
    assert status == 400
    assert sorted(p["path"] for p in body["problems"]) == [
        "steps[0].semaphores[1]",
        "steps[1].semaphores",
    ]


async def test_the_commands(stack: StackFactory) -> None:
    s = await stack(runners=1)
    env = env_of(s)
    rc, out, err = await heddle("semaphore", "set", "db", "2", env=env)
    assert rc == 0, err
    assert out.strip() == "semaphore db size 2 (0 held)"
    rc, out, err = await heddle("semaphores", "--json", env=env)
    assert rc == 0, err
    assert json.loads(out)["semaphores"] == [
        {"name": "db", "namespace": "default", "size": 2, "holders": [], "waiting": []}
    ]
    rc, out, _ = await heddle("semaphores", env=env)
    assert rc == 0 and out.split("\n")[1].split() == ["db", "2", "0", "0", "-"]
    rc, _, err = await heddle("semaphore", "set", "db", "0", env=env)
    assert rc == 2 and "at least 1" in err
    rc, _, err = await heddle("semaphore", "set", "bad.name", "2", env=env)
    assert rc == 2 and "bad.name" in err
