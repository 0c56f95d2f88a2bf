"""Heddle's gateway service: the HTTP API and the web page. ``app.py`` builds the app and
starts and stops it; the rest, by concern, from the bottom up: ``openapi/`` (the API's types
and its description), ``reads/`` (the read models), ``http/`` (the plumbing every request
goes through), ``handlers/`` (the API by resource) and ``page/`` (the web page)."""
