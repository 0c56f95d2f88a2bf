"""The docs say what the code does, and hold together: the settings table is the settings
module's, and every relative link between the README and the pages under docs/ resolves."""

from __future__ import annotations

import re
from pathlib import Path

from heddle.shared.runtime.settings import settings_table

from tests.stack import REPO

SETTINGS_PAGE = REPO / "docs" / "settings.md"
FENCE = re.compile(r"^ {0,3}(```|~~~).*?^ {0,3}\1[^\n]*$", re.M | re.S)
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1", re.S)
# [text](target) and ![alt](target); the target ends at the first space or ")".
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.+?)[ \t#]*$", re.M)


def docs_pages() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def prose(text: str) -> str:
    """The text outside fenced code blocks and code spans, where links are links."""
    return CODE_SPAN.sub("", FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text (links as their text, no markup) lower-cased,
    every character but letters, digits, spaces, hyphens and underscores dropped, spaces as
    hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    parts = text.split("`")  # HTML tags are markup outside code spans, text inside them
    text = "".join(p if i % 2 else re.sub(r"<[^>]+>", "", p) for i, p in enumerate(parts))
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors GitHub makes for a Markdown file's headings (a repeated one gets -1, -2)."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    for match in HEADING.finditer(FENCE.sub("", path.read_text())):
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(path: Path) -> list[str]:
    return LINK.findall(prose(path.read_text()))


def test_settings_page_lists_every_setting() -> None:
    page = SETTINGS_PAGE.read_text()
    start = page.index("<!-- settings-table:start -->\n") + len("<!-- settings-table:start -->\n")
    end = page.index("<!-- settings-table:end -->")
    assert page[start:end].strip() == settings_table().strip(), (
        "docs/settings.md's settings table is stale: paste the output of `heddle settings`"
    )


def test_ci_runs_the_readme_test_command() -> None:
    readme = (REPO / "README.md").read_text()
    assert "make test" in readme and "make up" in readme
    assert "exec make test" in (REPO / ".ci" / "run").read_text()


def test_the_slugs_are_githubs() -> None:
    assert slug("The watchdog: silence by receipt, not by clocks") == (
        "the-watchdog-silence-by-receipt-not-by-clocks"
    )
    assert slug("Inspecting it with the `nats` CLI") == "inspecting-it-with-the-nats-cli"
    assert slug("Run history index: `hist.<workflow>.<run>` in `heddle-runs`") == (
        "run-history-index-histworkflowrun-in-heddle-runs"
    )
    assert slug("Where a step's cost goes") == "where-a-steps-cost-goes"
    assert slug("Runs under way, bounded") == "runs-under-way-bounded"


def test_the_link_finder_sees_links_and_skips_code() -> None:
    text = "[a](x.md) ![b](i.png) `[c](no.md)` [d](y.md#h) [e](<z.md>)\n```\n[f](no.md)\n```\n"
    assert LINK.findall(prose(text)) == ["x.md", "i.png", "y.md#h", "z.md"]


def test_every_relative_link_and_anchor_resolves() -> None:
    broken = []
    for page in docs_pages():
        for target in links(page):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, mailto: ...
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            where = f"{page.relative_to(REPO)}: {target}"
            if not dest.exists():
                broken.append(f"{where} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(f"{where} (no heading #{anchor} in {dest.relative_to(REPO)})")
            elif anchor and dest.suffix != ".md":
                broken.append(f"{where} (an anchor in a file that is not Markdown)")
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_every_docs_page_is_linked_from_the_readme() -> None:
    readme = REPO / "README.md"
    linked = {(REPO / t.partition("#")[0]).resolve() for t in links(readme)}
    missing = [p.name for p in sorted((REPO / "docs").glob("*.md")) if p.resolve() not in linked]
    assert not missing, f"README.md links no line to: {missing}"


def test_every_decision_record_is_listed() -> None:
    index = REPO / "docs" / "decisions" / "README.md"
    linked = {(index.parent / t.partition("#")[0]).resolve() for t in links(index)}
    records = sorted((REPO / "docs" / "decisions").glob("[0-9]*.md"))
    assert records
    missing = [p.name for p in records if p.resolve() not in linked]
    assert not missing, f"docs/decisions/README.md does not list: {missing}"
