"""A release's version is one number everywhere it is stated: the package's, the code's, the
chart's and its image tag's; and the CHANGELOG has its entry (docs/upgrading.md)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml
from heddle.shared.wire.version import VERSION

ROOT = Path(__file__).resolve().parents[2]
SEMVER = re.compile(r"\d+\.\d+\.\d+\Z")


def test_the_version_is_one_number_everywhere() -> None:
    package = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    chart = yaml.safe_load((ROOT / "deploy/helm/heddle/Chart.yaml").read_text())
    assert SEMVER.match(VERSION), VERSION
    assert (package, chart["version"], chart["appVersion"]) == (VERSION, VERSION, VERSION)


def test_the_changelog_has_the_version_s_entry() -> None:
    headings = re.findall(r"^## (\S+)", (ROOT / "CHANGELOG.md").read_text(), re.M)
    assert headings[0] == "Unreleased"
    assert VERSION in headings, headings
