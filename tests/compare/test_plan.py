"""`compare.plan` and `--dry_run` (issue 68): every printed command read by train_ppo_ray's own parser and checked
with the refusals of the device the runs take, the sampling budget read by that parser, the seeds' interval said."""

import pytest

from openrlhf_copo import compare
from openrlhf_copo.cli import compare as cli
from openrlhf_copo.openrlhf_ext.device import CPU, DeviceDecision

#: What the CPU path needs that OpenRLHF's defaults do not give (`cpu.cpu_problems`), fp32 being the CPU demo's.
CPU_FLAGS = ["--vllm.sync_backend", "gloo", "--ds.attn_implementation", "sdpa", "--ds.param_dtype", "fp32"]


def _data(tmp_path):
    (tmp_path / "train.jsonl").write_text("".join(f'{{"prompt": "q{n}", "label": "1"}}\n' for n in range(12)))
    (tmp_path / "test.jsonl").write_text('{"prompt": "t", "label": "1"}\n' * 4)


def _dry_run(tmp_path, *extra, device="cpu", flags=()):
    _data(tmp_path)
    return cli.main(["--model", "m", "--train_data", str(tmp_path / "train.jsonl"), "--eval_data",
                     str(tmp_path / "test.jsonl"), "--prompts_per_step", "3", "--steps", "2", "--device", device,
                     "--seeds", "0", "--out", str(tmp_path / "out"), *flags, "--dry_run", "--", *extra])


def test_the_budget_is_read_by_train_ppo_rays_parser():
    """`--copo.ada_budget=64` is the parser's 64; the hand-written reader looked for `--copo.ada_budget` followed by a
    value and gave the default 32, halving the plan's cost of a Reinforce-Ada run."""
    assert compare.sampling_budget("reinforce_ada", ["--copo.ada_budget=64"]) == 64
    assert compare.sampling_budget("reinforce_ada", ["--copo.ada_budget", "12"]) == 12
    assert compare.sampling_budget("reinforce_ada", []) == 32 and compare.sampling_budget("grpo", []) is None


def test_a_misspelt_flag_after_the_separator_is_refused_before_anything_runs(tmp_path):
    """`--copo.rhoo 1.5 --vllm.num_engine 8` passed the dry run (the reader dropped flags it did not know, and took
    abbreviations train_ppo_ray refuses): every run then failed at its start. Now both are named."""
    with pytest.raises(SystemExit, match=r"train_ppo_ray does not know --copo.rhoo, --vllm.num_engine \(misspelt, or "
                                         r"abbreviated"):
        _dry_run(tmp_path, "--copo.rhoo", "1.5", "--vllm.num_engine", "8", *CPU_FLAGS)
    assert not (tmp_path / "out").exists()


def test_the_dry_run_names_what_the_cpu_path_would_refuse(tmp_path, capsys):
    """On the CPU path, OpenRLHF's defaults (a NCCL weight sync, flash-attention) are refused by every run at its
    start (`cpu.cpu_problems`): the dry run printed them as runnable commands and exited 0. Now it names each refusal
    under each command and exits 1; with the CPU path's flags every command is accepted."""
    assert _dry_run(tmp_path) == 1
    text = capsys.readouterr().out
    assert "2 of 2 commands would be refused (the actors run on the CPU path here: --copo.device cpu)" in text
    refused = [line for line in text.splitlines() if line.startswith("  would be refused: ")]
    assert len(refused) == 4  # two refusals under each of the two commands
    assert "  would be refused: on the CPU path: --vllm.sync_backend nccl: NCCL needs CUDA; add --vllm.sync_backend " \
           "gloo" in refused
    assert any("--ds.attn_implementation flash_attention_2 needs flash-attention" in line for line in refused)
    assert _dry_run(tmp_path, *CPU_FLAGS) == 0
    assert "would be refused" not in capsys.readouterr().out


def test_the_plan_checks_each_command_with_the_device_it_is_given(tmp_path):
    """COPO's own refusals (a bad --copo value) are named for every command, whatever the device; a decision on CUDA
    refuses the CPU path's fp32."""
    _data(tmp_path)
    s = compare.Setting(model="m", train=tmp_path / "train.jsonl", test=tmp_path / "test.jsonl", prompts_per_step=3,
                        steps=2, extra=[*CPU_FLAGS, "--copo.entropy_base", "1"])
    on_cpu = compare.plan(s, ["grpo", "copo"], [0], tmp_path / "out", decision=DeviceDecision(CPU, "a test"))
    assert [len(r["refused"]) for r in on_cpu["runs"]] == [1, 1]
    assert all(r["refused"][0].startswith("--copo.entropy_base 1.0") for r in on_cpu["runs"])
    s.extra = CPU_FLAGS
    on_cuda = compare.plan(s, ["grpo"], [0], tmp_path / "out", decision=DeviceDecision("cuda", "a test"))
    assert on_cuda["runs"][0]["refused"] == ["on CUDA: --ds.param_dtype fp32 is the CPU path's (OpenRLHF on a GPU trains "
                                             "in bf16 or fp16): drop it"]


def test_samples_per_prompt_0_is_refused_not_taken_for_the_default(tmp_path, capsys):
    """`--samples_per_prompt 0` became G = 6 (`args.samples_per_prompt or 6`)."""
    with pytest.raises(SystemExit):
        _dry_run(tmp_path, *CPU_FLAGS, flags=("--samples_per_prompt", "0"))
    assert "argument --samples_per_prompt: 0: must be 1 or more" in capsys.readouterr().err
    for flag in ("--steps", "--prompts_per_step", "--eval_every"):
        with pytest.raises(SystemExit):
            cli.parser().parse_args(["--out", "x", flag, "0"])
        assert f"argument {flag}: 0: must be 1 or more" in capsys.readouterr().err


def test_the_plan_says_what_two_seeds_can_tell(tmp_path, capsys):
    """The default two seeds give intervals of +- 12.7 standard errors (t at 1 dof): the plan says so."""
    _data(tmp_path)
    s = compare.Setting(model="m", train=tmp_path / "train.jsonl", test=tmp_path / "test.jsonl", prompts_per_step=3,
                        steps=2, extra=CPU_FLAGS)
    text = compare.plan_text(compare.plan(s, ["grpo"], [0, 1], tmp_path / "out", decision=DeviceDecision(CPU, "t")))
    assert "Seeds: 0, 1 (2): the 95% interval over seeds is the mean +- 12.7 standard errors (Student's t at 1 degree " \
           "of freedom), so it says little" in text
    five = compare.plan_text(compare.plan(s, ["grpo"], range(5), tmp_path / "out", decision=DeviceDecision(CPU, "t")))
    assert "the mean +- 2.8 standard errors (Student's t at 4 degrees of freedom)." in five
