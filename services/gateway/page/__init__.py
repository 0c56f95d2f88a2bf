"""The web page: ``GET /`` and its assets under ``GET /static/{name}`` (web.py), from the
files in static/ (package data, shipped in the wheel)."""
