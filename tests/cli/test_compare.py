"""`python -m openrlhf_copo.cli.compare`: its flags, their defaults and refusals, and the one copy of its command."""

import pytest

from tests_support import REPO


def test_the_cli_refuses_a_comparison_without_the_baseline(tmp_path, capsys):
    from openrlhf_copo.cli import compare as cli

    with pytest.raises(SystemExit):
        cli.main(["--model", "m", "--train_data", "t", "--eval_data", "e", "--out", str(tmp_path), "--methods", "copo"])
    assert "--methods must include grpo" in capsys.readouterr().err


def test_the_cli_needs_model_and_data_only_to_run(tmp_path, capsys):
    from openrlhf_copo.cli import compare as cli

    with pytest.raises(SystemExit):
        cli.main(["--out", str(tmp_path), "--model", "m"])
    assert "--train_data, --eval_data required to run (not with --report_only)" in capsys.readouterr().err


def test_the_compare_command_is_written_once():
    """One copy of the command at the paper's size (docs/gpu-recipe.md); the README and the CLI's docstring link to
    it. Three copies had drifted apart (one without the micro-batch flags)."""
    from openrlhf_copo.cli import compare as cli

    copies = {path: (REPO / path).read_text().count("openrlhf_copo.cli.compare --model")
              for path in ("README.md", "docs/gpu-recipe.md", "docs/benchmarks.md", "openrlhf_copo/cli/compare.py")}
    assert copies == {"README.md": 0, "docs/gpu-recipe.md": 1, "docs/benchmarks.md": 0, "openrlhf_copo/cli/compare.py": 0}
    assert "docs/gpu-recipe.md#comparing-methods-at-the-papers-size" in (REPO / "README.md").read_text()
    assert "docs/gpu-recipe.md" in cli.__doc__ and "Comparing methods at the paper's size" in cli.__doc__


def test_help_states_every_flags_default():
    """`compare --help` showed no default and six flags without help text (issue 51)."""
    import re

    from openrlhf_copo.cli import compare as cli

    text = cli.parser().format_help()
    blocks = re.split(r"\n  (?=-)", text.split("options:", 1)[1])
    flags = {block.split()[0].rstrip(","): " ".join(block.split()) for block in blocks if block.strip()}
    expected = {"--prompts_per_step": "(default: 8)", "--steps": "(default: 10)", "--lr": "(default: 1e-06)",
                "--eval_every": "(default: 5)", "--input_key": "(default: prompt)", "--label_key": "(default: label)",
                "--device": "(default: auto)", "--samples_per_prompt": "(default: 6 when running",
                "--methods": "(default: grpo copo when running", "--seeds": "(default: 0 1 when running",
                "--target_difference": "(default: 0.02 0.05)", "--report_only": "(default: False)",
                "--dry_run": "(default: False)", "--start_checkpoint": "(default: --model)"}
    for flag, default in expected.items():
        assert default in flags[flag], flag
    for flag, block in flags.items():
        if flag not in ("-h",):
            assert "default:" in block and len(block.split()) > 4, block  # a default and a help text


def test_help_says_what_each_method_is():
    """`compare --help` listed the methods by name alone (`copo_seqmean`, `copo_selective_rho05`, ...; issue 70):
    each now has its line after the flags, and a method added without one fails here."""
    import re

    from openrlhf_copo import compare
    from openrlhf_copo.cli import compare as cli

    assert set(compare.METHOD_HELP) == set(compare.METHODS)
    text = cli.parser().format_help()
    listed = text.split("methods (--methods):\n", 1)[1]
    named = re.findall(r"^  (\w+) +\S", listed, flags=re.M)
    assert named == list(compare.METHODS)
    flat = " ".join(listed.split())
    assert "copo_seqmean COPO with sequence-mean aggregation (the released code's seq-mean-token-mean)" in flat
    assert "grpo_4xsteps GRPO for 4 x --steps" in flat
