"""The docs site builds with `mkdocs build --strict`: any warning (a broken link or
anchor, a missing page, a page not in the nav, a generated part that cannot be written
whole) fails it. Needs nothing but the dev extra (no network, no broker)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from tests.docs.hook import ROOT


def build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_site_builds_strict_with_no_warning(tmp_path):
    result = build(ROOT / "mkdocs.yml", tmp_path / "site")
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "WARNING" not in output, output
    reference = (tmp_path / "site" / "reference" / "codes" / "index.html").read_text()
    assert "uncovered_interrupt" in reference  # the generated part is in the page
    assert "<!-- generated:" not in reference


def copy_of_the_site(tmp_path: Path) -> tuple[Path, Path]:
    """The docs and mkdocs.yml copied, so a test can break them."""
    docs = tmp_path / "docs"
    shutil.copytree(ROOT / "docs", docs, ignore=shutil.ignore_patterns("__pycache__"))
    config = (ROOT / "mkdocs.yml").read_text()
    config = re.sub(r"(?m)^docs_dir: .*$", f"docs_dir: {docs}", config)
    # the checkout's own hook: it reads schemas/, deploy/ and bench/ from the checkout
    config = config.replace("  - docs/hooks/reference.py", f"  - {ROOT}/docs/hooks/reference.py")
    path = tmp_path / "mkdocs.yml"
    path.write_text(config)
    return docs, path


def test_a_broken_link_an_unknown_anchor_or_a_page_outside_the_nav_fail_the_build(tmp_path):
    docs, config = copy_of_the_site(tmp_path)
    with (docs / "guides" / "groups.md").open("a") as page:
        page.write("\n[gone](no-such-page.md) and [nowhere](fleets.md#no-such-heading)\n")
    (docs / "orphan.md").write_text("# Not in the nav\n")
    result = build(config, tmp_path / "site")
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert "no-such-page.md" in output
    assert "no-such-heading" in output
    assert "orphan.md" in output


def test_a_generated_part_that_does_not_exist_fails_the_build(tmp_path):
    docs, config = copy_of_the_site(tmp_path)
    with (docs / "reference" / "codes.md").open("a") as page:
        page.write("\n<!-- generated: no-such-part -->\n")
    result = build(config, tmp_path / "site")
    assert result.returncode != 0
    assert "no-such-part" in result.stdout + result.stderr


def test_every_page_is_in_the_nav_and_every_nav_entry_exists():
    config = (ROOT / "mkdocs.yml").read_text()
    in_nav = set(re.findall(r":\s+([\w/-]+\.md)\s*$", config, re.MULTILINE))
    pages = {
        str(path.relative_to(ROOT / "docs"))
        for path in (ROOT / "docs").rglob("*.md")
        if "hooks" not in path.parts
    }
    assert in_nav == pages


def test_the_readme_is_a_doorway():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 250
    assert "./scripts/run.sh" in readme and "./scripts/test.sh" in readme
    # no benchmark diary: no commit hashes in backticks, no dated runs
    assert not re.findall(r"`[0-9a-f]{7,40}`", readme)
    # every link into the docs names a page that exists
    for target in re.findall(r"\]\((docs/[^)#]+)", readme):
        assert (ROOT / target).is_file(), target
