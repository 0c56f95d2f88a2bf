"""The browser every web test drives: the system's Chromium, headless."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from playwright.async_api import Browser, async_playwright

from tests.support.web_page import CHROMIUM


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    if not Path(CHROMIUM).exists():
        pytest.fail("the browser tests need Chromium: make test-tools (apt-get install chromium)")
    async with async_playwright() as p:
        b = await p.chromium.launch(executable_path=CHROMIUM, headless=True)
        yield b
        await b.close()
