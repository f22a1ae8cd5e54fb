"""The README and docs/ agree with the code and with each other where a newcomer would compare them: the flag tables'
defaults and choices, the list of pages, and the facts kept in one place."""

import re
from dataclasses import MISSING, fields
from pathlib import Path

import pytest

from openrlhf_copo.openrlhf_ext.config import CopoSettings

REPO = Path(__file__).resolve().parents[1]
FLAG_TABLES = ["README.md", "docs/flags.md"]
#: How the tables write a default of None, per setting: what None means for it.
NONE_MEANS = {"std": "the mode's", "metrics_file": "none", "mode": "estimator's name", "probe": "none"}


def flag_rows(page: str) -> dict:
    """{setting: (default cell, meaning cell)} of the rows of ``page`` that name one `--copo.<setting>` flag."""
    rows = {}
    for line in (REPO / page).read_text().splitlines():
        cells = [c.strip() for c in line.split("|")[1:-1]]
        match = re.fullmatch(r"`--copo\.(\w+)`", cells[0]) if len(cells) >= 3 else None
        if match:
            rows[match.group(1)] = (cells[1], cells[2])
    return rows


def written_default(name: str, default) -> str:
    """A default as the flag tables write it."""
    if default is None:
        return NONE_MEANS[name]
    if isinstance(default, bool):
        return "on" if default else "off"
    return f"`{default}`" if isinstance(default, str) else f"{default:g}"


@pytest.mark.parametrize("page", FLAG_TABLES)
def test_the_flag_tables_give_the_codes_defaults_and_every_choice(page):
    """`--copo.std` once read `population` in the README, "the mode's" in flags.md and None in --help (which now says
    what None means), and the README left out `--copo.zero_control uniform`."""
    rows = flag_rows(page)
    settings = {f.name: f for f in fields(CopoSettings)}
    assert {"zero_control", "std"} <= set(rows)
    for name, (default, meaning) in rows.items():
        f = settings.get(name)
        if f is None:  # a flag of the CPU demo's, not a COPO setting
            continue
        value = f.default if f.default is not MISSING else f.default_factory()
        shown = default.split(" (")[0]
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            assert float(shown) == value, (page, name, default)
        else:
            assert shown == written_default(name, value), (page, name, default)
        choices = f.metadata["choices"]
        if choices and not callable(choices):
            assert all(f"`{c}`" in meaning for c in choices), (page, name, choices, meaning)


def test_the_help_says_what_a_default_of_none_means():
    std = next(f for f in fields(CopoSettings) if f.name == "std")
    assert std.default is None and "unset (None): the mode's own" in std.metadata["help"]


def test_every_docs_page_is_in_the_readmes_list():
    readme = (REPO / "README.md").read_text()
    listed = set(re.findall(r"^- \[docs/([\w-]+\.md)\]", readme[readme.index("## Documentation"):], re.M))
    assert listed == {p.name for p in (REPO / "docs").glob("*.md")}


def test_ci_runs_the_readmes_test_command():
    """The brief's rule: `.ci/run` calls the README's test command, the one a newcomer copies, so that what passes in
    CI is what they run (the command once gained pytest-xdist's flags in one place only)."""
    readme = (REPO / "README.md").read_text()
    commands = re.findall(r"```bash\n(bash scripts/setup_cpu\.sh && \.venv/bin/python -m pytest[^\n]*)\n```", readme)
    assert len(commands) == 1, commands
    ci_lines = (REPO / ".ci" / "run").read_text().splitlines()
    ci = [line for line in ci_lines if line and not line.startswith(("#", "set ", "cd "))]  # its one command
    assert ci == commands, (ci, commands)
