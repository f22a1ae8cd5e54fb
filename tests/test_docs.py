"""The README and docs/ agree with the code and with each other where a newcomer would compare them: the flag tables'
defaults and choices, the list of pages, the facts kept in one place, the sample output a page shows, and every
relative link."""

import json
import re
from dataclasses import MISSING, fields
from pathlib import Path

import pytest

from openrlhf_copo.openrlhf_ext.config import CopoSettings

REPO = Path(__file__).resolve().parents[1]
FLAG_TABLES = ["docs/flags.md"]  # the README links to it and to --copo.help
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


#: The project's own markdown pages: the README, docs/, the committed results and reports under benchmarks/, patches/
#: (not the whole tree: the environment, caches and a GPU bundle's staging folder hold other projects' pages).
PAGES = sorted([*REPO.glob("*.md"), *(p for folder in ("docs", "benchmarks", "patches")
                                       for p in (REPO / folder).rglob("*.md"))])


def anchors(page: Path) -> set:
    """The anchors a link may name on ``page``: each heading's, as GitHub makes it (lower case, every character but
    letters, digits, `_`, `-` and spaces dropped, spaces to `-`, a repeat numbered `-1`, `-2`, ...), outside code
    blocks; and every `<a id="...">`."""
    found, seen, in_code = set(), {}, False
    text = page.read_text()
    for line in text.splitlines():
        if line.startswith("```"):
            in_code = not in_code
        heading = None if in_code else re.match(r"#{1,6} (.*)", line)
        if heading:
            slug = re.sub(r"[^\w\- ]", "", heading.group(1).strip().lower()).replace(" ", "-")
            found.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
            seen[slug] = seen.get(slug, 0) + 1
    return found | set(re.findall(r'<a (?:id|name)="([^"]+)"', text))


def test_every_relative_link_reaches_its_file_and_anchor():
    """A page rewritten or a heading renamed leaves the links to it behind (testing.md's sections once were the
    anchors of four links on three other pages): every relative link of every page names a path that exists and, on
    a markdown page, an anchor that page has."""
    assert {"README.md", "docs/testing.md"} <= {str(p.relative_to(REPO)) for p in PAGES}
    broken = []
    for page in PAGES:
        text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)  # a link in a code block is an example
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                broken.append(f"{page.relative_to(REPO)}: {target}: no such path")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(f"{page.relative_to(REPO)}: {target}: no such anchor")
    assert broken == []


def test_the_probes_sample_output_is_what_the_probe_writes_today():
    """docs/gpu-recipe.md shows the probe's report of a SmolLM2 run. Its regime section reads the committed
    which-method-when table, so a new column, or a change to the report, leaves the sample behind: it once showed one
    "Nearest regime" line and one column where the probe wrote two of each."""
    from openrlhf_copo.probe import report

    record = json.loads((REPO / "tests" / "fixtures" / "probe_smollm2_arith.json").read_text())
    page = (REPO / "docs" / "gpu-recipe.md").read_text()
    shown = page.split("````markdown\n", 1)[1].split("\n````", 1)[0]
    assert shown == report(record, record["wall_seconds"]) + "\n\n" + record["filtered"]
