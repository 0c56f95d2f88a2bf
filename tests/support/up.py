"""`heddle up` run as a subprocess, waited for until its gateway lists every runner."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import aiohttp


async def wait_http(url: str, token_file: Path, runners: int = 3, timeout: float = 30.0) -> dict:
    deadline = time.monotonic() + timeout
    while not token_file.exists():  # made by heddle up before anything starts
        assert time.monotonic() < deadline, f"{token_file} not made"
        await asyncio.sleep(0.05)
    headers = {"Authorization": f"Bearer {token_file.read_text().strip()}"}
    async with aiohttp.ClientSession(headers=headers) as http:
        while True:
            try:
                async with http.get(url) as resp:
                    body = await resp.json()
                    if resp.status == 200 and body.get("total") == runners:
                        return body
            except aiohttp.ClientError:
                pass
            assert time.monotonic() < deadline, f"{url} not ready"
            await asyncio.sleep(0.1)
