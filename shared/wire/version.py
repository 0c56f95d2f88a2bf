"""Heddle's version: what a runner registers, the API document states and the chart deploys.
The same as pyproject.toml's and the chart's appVersion (tests/unit/test_release.py keeps
them equal); each release is tagged ``v<version>`` (docs/upgrading.md)."""

VERSION = "0.3.0"
