"""The web page: served by a real stack and driven in headless Chromium (Playwright).
`pytest -m web`."""
