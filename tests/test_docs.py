"""The docs say what the code does: the README's settings table is the settings module's."""

from __future__ import annotations

from shared.settings import settings_table
from tests.stack import REPO


def test_readme_lists_every_setting() -> None:
    readme = (REPO / "README.md").read_text()
    start = readme.index("<!-- settings-table:start -->\n") + len("<!-- settings-table:start -->\n")
    end = readme.index("<!-- settings-table:end -->")
    assert readme[start:end].strip() == settings_table().strip(), (
        "README settings table is stale: paste the output of `heddle settings`"
    )


def test_ci_runs_the_readme_test_command() -> None:
    readme = (REPO / "README.md").read_text()
    assert "make test" in readme and "make up" in readme
    assert "exec make test" in (REPO / ".ci" / "run").read_text()
