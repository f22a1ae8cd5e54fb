"""`compare.plan` and `--dry_run` (issue 68): every printed command read by train_ppo_ray's own parser and checked
with the refusals of the device the runs take, the sampling budget read by that parser, the seeds' interval said."""

import json
from pathlib import Path

import pytest

from compare_support import CPU_FLAGS, _data, setting
from openrlhf_copo import compare
from openrlhf_copo.cli import compare as cli
from openrlhf_copo.openrlhf_ext.device import CPU, DeviceDecision
from tests_support import REPO

def _twelve_prompts(tmp_path):
    (tmp_path / "train.jsonl").write_text("".join(f'{{"prompt": "q{n}", "label": "1"}}\n' for n in range(12)))
    (tmp_path / "test.jsonl").write_text('{"prompt": "t", "label": "1"}\n' * 4)


def _dry_run(tmp_path, *extra, device="cpu", flags=()):
    _twelve_prompts(tmp_path)
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
    _twelve_prompts(tmp_path)
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
    _twelve_prompts(tmp_path)
    s = compare.Setting(model="m", train=tmp_path / "train.jsonl", test=tmp_path / "test.jsonl", prompts_per_step=3,
                        steps=2, extra=CPU_FLAGS)
    text = compare.plan_text(compare.plan(s, ["grpo"], [0, 1], tmp_path / "out", decision=DeviceDecision(CPU, "t")))
    assert "Seeds: 0, 1 (2): the 95% interval over seeds is the mean +- 12.7 standard errors (Student's t at 1 degree " \
           "of freedom), so it says little" in text
    five = compare.plan_text(compare.plan(s, ["grpo"], range(5), tmp_path / "out", decision=DeviceDecision(CPU, "t")))
    assert "the mean +- 2.8 standard errors (Student's t at 4 degrees of freedom)." in five


def test_the_documented_command_fits_one_8_gpu_node_and_dapo_math_17k(tmp_path, load_args):
    """The command of docs/gpu-recipe.md, as written there: one node of 8 GPUs shared by the actor and the vLLM
    engines (colocated), and steps x prompts per step drawn from all of DAPO-Math-17k's ~17.4k distinct prompts (one
    episode of 1.94 passes), not refused for having fewer prompts than 66 x 512; none of its flags after -- redefines a
    method or a setting."""
    import shlex

    from openrlhf_copo.cli import compare as cli

    text = (REPO / "docs" / "gpu-recipe.md").read_text()
    block = text[text.index("python -m openrlhf_copo.cli.compare --model"):]
    command = " ".join(line.split("#")[0].rstrip(" \\") for line in block[:block.index("```")].splitlines())
    argv = shlex.split(command)[3:]
    i = argv.index("--")
    args = cli.parser().parse_args(argv[:i])
    rows = [{"prompt": [{"role": "user", "content": f"q{n}"}], "label": str(n)} for n in range(17_398)]
    (tmp_path / "dapo.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "math500.jsonl").write_text('{"prompt": "p", "label": "1", "datasource": "math500"}\n' * 500)
    s = compare.Setting(model=args.model, train=tmp_path / "dapo.jsonl", test=tmp_path / "math500.jsonl",
                        samples_per_prompt=args.samples_per_prompt, prompts_per_step=args.prompts_per_step,
                        steps=args.steps, lr=args.lr, eval_every=args.eval_every, extra=argv[i + 1:])
    train, episodes = compare.train_file(s, tmp_path / "out")
    drawn = train.read_text().splitlines()
    assert len(drawn) * episodes == args.steps * args.prompts_per_step and len(set(drawn)) == 17_398
    run = load_args(compare.run_argv(s, "copo", 0, tmp_path / "out" / "copo-seed0", train, True, episodes))
    assert run.train.colocate_all and run.actor.num_nodes * run.actor.num_gpus_per_node == 8
    assert run.vllm.num_engines * run.vllm.tensor_parallel_size == 8
    assert (run.rollout.batch_size, run.rollout.n_samples_per_prompt, run.actor.adam.lr) == (512, 6, 1e-6)
    plan = compare.plan(s, ["grpo", "copo"], args.seeds, tmp_path / "plan")
    assert plan["cost"]["gpu_hours"] == pytest.approx(4 * 66 * 0.2) and plan["held_out"] == {"math500": 500}


def test_a_dry_run_prints_every_command_the_prompts_the_held_out_sources_and_the_cost_and_writes_nothing(
        tmp_path, capsys, load_args):
    """12 steps of 3 prompts x G 6 from 10 prompts, 2 methods x 2 seeds, a held-out file of 3 MATH-500, 2 AIME and 1
    unlabelled rows: 36 drawn from 10 distinct (3.60 passes, 1 episode); each of the 4 commands is the run's own
    (parsed, the same arguments as `run_argv`'s); 216 responses a run, 4 x 216 x 0.2 / 3072 = 0.06 GPU-hours; --out
    is never made."""
    import shlex

    from openrlhf_copo.cli import compare as cli

    _data(tmp_path)
    rows = [{"datasource": "math500"}] * 3 + [{"datasource": "aime24"}] * 2 + [{}]
    (tmp_path / "test.jsonl").write_text("".join(json.dumps({"prompt": "t", "label": "1", **r}) + "\n" for r in rows))
    out = tmp_path / "out"
    assert cli.main(["--model", "m", "--train_data", str(tmp_path / "train.jsonl"), "--eval_data",
                     str(tmp_path / "test.jsonl"), "--prompts_per_step", "3", "--steps", "12", "--eval_every", "5",
                     "--out", str(out), "--device", "cpu", "--dry_run", "--", "--rollout.max_new_tokens", "64",
                     *CPU_FLAGS]) == 0
    text = capsys.readouterr().out
    assert not out.exists()
    assert "36 drawn (steps x prompts per step), 10 distinct of the 10 in the file, 3.60 passes in 1 OpenRLHF " \
           "episode" in text
    assert "math500: 3, aime24: 2, default: 1" in text
    assert "216 sampled responses a run" in text and "about 0.1 GPU-hours for the 4 runs to make" in text
    commands = [shlex.split(line) for line in text.splitlines() if "openrlhf_copo.cli.train_ppo_ray" in line]
    assert len(commands) == 4
    plan = compare.prompt_plan(setting(tmp_path, prompts_per_step=3, steps=12), out)
    s = setting(tmp_path, prompts_per_step=3, steps=12, eval_every=5, device="cpu",
                extra=["--rollout.max_new_tokens", "64", *CPU_FLAGS])
    s.model = "m"
    for command, (method, seed, step0) in zip(commands, [("grpo", 0, True), ("copo", 0, False), ("grpo", 1, True),
                                                         ("copo", 1, False)]):
        assert command[3:] == compare.run_argv(s, method, seed, compare.run_dir(out, method, seed),
                                               Path(plan["file"]), step0, plan["episodes"])
    assert load_args(commands[0][3:]).rollout.max_new_tokens == 64
    assert "[grpo seed 0] evaluates at steps 0, 5, 10, 12" in text
    assert "[copo seed 0] evaluates at steps 5, 10, 12" in text
    assert "Every command checked with train_ppo_ray's parser" in text and "would be refused" not in text


def test_the_plan_counts_an_adaptive_method_at_its_budget(tmp_path):
    """Reinforce-Ada draws G responses per prompt, then up to --copo.ada_budget for the prompts it has not resolved:
    the plan's cost counts its runs at the budget (an upper bound), and says so; GRPO's at G."""
    _data(tmp_path)
    s = setting(tmp_path, prompts_per_step=3, steps=2)
    base = compare.plan(s, ["grpo"], [0], tmp_path / "a")["cost"]
    assert compare.sampling_budget("grpo", []) is None and compare.sampling_budget("reinforce_ada", []) == 32
    assert compare.sampling_budget("reinforce_ada", ["--copo.ada_budget", "12"]) == 12
    both = compare.plan(s, ["grpo", "reinforce_ada"], [0], tmp_path / "b")
    G = s.samples_per_prompt
    assert both["cost"]["adaptive_budgets"] == {"reinforce_ada": 32}
    assert both["cost"]["gpu_hours"] == pytest.approx(base["gpu_hours"] * (1 + 32 / G))
    assert "reinforce_ada draws G, then more for the prompts it has not resolved, up to 32 per prompt: counted at " \
           "32 (an upper bound)." in compare.plan_text(both)


def test_the_plan_counts_the_selection_control_at_the_4g_it_draws(tmp_path):
    """Reinforce-Ada's selection control draws --copo.ada_draw_factor x G per prompt (4G by default), all of them, and
    trains on G: the plan counts its runs at 4G (so GRPO and it cost 5 x GRPO's alone), or at the factor given after
    --, and says so; its command keeps the tool's G and train batch (it trains on G). It has no rounds budget."""
    _data(tmp_path)
    s = setting(tmp_path, prompts_per_step=3, steps=2)
    G = s.samples_per_prompt
    base = compare.plan(s, ["grpo"], [0], tmp_path / "a")["cost"]
    both = compare.plan(s, ["grpo", "reinforce_ada_uniform"], [0], tmp_path / "b")
    assert both["cost"]["draw_factors"] == {"reinforce_ada_uniform": 4} and both["cost"]["adaptive_budgets"] == {}
    assert both["cost"]["gpu_hours"] == pytest.approx(base["gpu_hours"] * 5)
    control = both["runs"][1]["argv"]
    assert control[control.index("--rollout.n_samples_per_prompt") + 1] == str(G)
    assert control[control.index("--train.batch_size") + 1] == str(3 * G)
    assert "reinforce_ada_uniform draws 4 x G responses per prompt and trains on G of them, kept at random: counted " \
           "at 4 x G." in compare.plan_text(both)
    assert compare.draw_factor("reinforce_ada_uniform", ["--copo.ada_draw_factor=2"]) == 2
    assert compare.draw_factor("reinforce_ada", []) is None and compare.draw_factor("grpo", []) is None
    assert compare.sampling_budget("reinforce_ada_uniform", []) is None
    two = compare.plan(setting(tmp_path, prompts_per_step=3, steps=2, extra=["--copo.ada_draw_factor", "2"]),
                       ["grpo", "reinforce_ada_uniform"], [0], tmp_path / "c")["cost"]
    assert two["draw_factors"] == {"reinforce_ada_uniform": 2} and two["gpu_hours"] == pytest.approx(
        base["gpu_hours"] * 3)


def test_the_plan_counts_grpo_4xg_at_4g_and_a_users_flag_cannot_redefine_its_g(tmp_path):
    """2 steps x 3 prompts: GRPO's runs draw 36 responses, grpo_4xg's 144, so the two cost 5 x GRPO's alone; its
    command draws 24 per prompt. After --, --rollout.n_samples_per_prompt (any value but the run's own) and
    --train.batch_size (which would split its 4G responses into several optimizer steps) are refused."""
    _data(tmp_path)
    s = setting(tmp_path, prompts_per_step=3, steps=2)
    base = compare.plan(s, ["grpo"], [0], tmp_path / "a")["cost"]
    both = compare.plan(s, ["grpo", "grpo_4xg"], [0], tmp_path / "b")
    assert both["cost"]["sample_factors"] == {"grpo_4xg": 4} and both["cost"]["responses_per_run"] == 36
    assert both["cost"]["gpu_hours"] == pytest.approx(base["gpu_hours"] * 5)
    wide = both["runs"][1]["argv"]
    assert wide[wide.index("--rollout.n_samples_per_prompt") + 1] == "24"
    assert wide[wide.index("--train.batch_size") + 1] == "72"
    assert "grpo_4xg draws 4 x G responses per prompt and trains on all of them: counted at 4 x G." in \
        compare.plan_text(both)

    def conflicts(methods, *extra):
        return compare.extra_conflicts(setting(tmp_path, prompts_per_step=3, steps=2, extra=list(extra)), methods,
                                       [0], tmp_path / "out")

    assert conflicts(["grpo", "grpo_4xg"], "--rollout.n_samples_per_prompt", "6") == \
        ["--rollout.n_samples_per_prompt 6 would override the tool's --samples_per_prompt, which sets "
         "--rollout.n_samples_per_prompt 24"]
    assert conflicts(["grpo_4xg"], "--rollout.n_samples_per_prompt", "8") == \
        ["--rollout.n_samples_per_prompt 8 would override the tool's --samples_per_prompt, which sets "
         "--rollout.n_samples_per_prompt 24"]
    assert conflicts(["grpo", "grpo_4xg"], "--train.batch_size", "18") == \
        ["--train.batch_size 18 would change method grpo_4xg's optimizer steps per rollout batch: it trains on 4 x G "
         "responses per prompt in one step (--train.batch_size 72)"]
    assert conflicts(["grpo"], "--train.batch_size", "9") == []  # GRPO alone: the tool's default, as before
    with pytest.raises(SystemExit, match="would change method grpo_4xg's optimizer steps"):
        compare.plan(setting(tmp_path, prompts_per_step=3, steps=2, extra=["--train.batch_size", "18"]),
                     ["grpo", "grpo_4xg"], [0], tmp_path / "c")


def test_the_step_control_trains_k_times_the_steps_over_the_same_prompts_evaluated_at_each_multiple(tmp_path,
                                                                                                 load_args):
    """grpo_4xsteps (`compare.STEP_FACTOR`): 4 x the comparison's 2 steps over its 6 prompts (3 a step) is 4 whole
    passes of the same file (4 OpenRLHF episodes), evaluated every 2 steps, so at 2, 4, 6 and 8; the flags a preset
    repeats after -- with the comparison's own values (--train.num_episodes 1, as the CPU presets do) do not cut it
    to 2 steps: its own come after them. The plan counts it at 4 x the steps, says so, and records it."""
    _twelve_prompts(tmp_path)
    (tmp_path / "train.jsonl").write_text("".join(f'{{"prompt": "q{n}", "label": "1"}}\n' for n in range(6)))
    s = compare.Setting(model="m", train=tmp_path / "train.jsonl", test=tmp_path / "test.jsonl", prompts_per_step=3,
                        steps=2, eval_every=1, extra=[*CPU_FLAGS, "--train.num_episodes", "1"])
    p = compare.plan(s, ["grpo", "grpo_4xsteps"], [0], tmp_path / "out", decision=DeviceDecision(CPU, "a test"))
    grpo, longer = (load_args(r["argv"][3:]) for r in p["runs"])
    assert (grpo.train.num_episodes, grpo.eval.steps) == (1, 1)
    assert (longer.train.num_episodes, longer.eval.steps, longer.rollout.n_samples_per_prompt) == (4, 2, 6)
    assert longer.data.prompt_dataset == grpo.data.prompt_dataset == str(tmp_path / "train.jsonl")
    assert p["runs"][1]["evaluations"] == [2, 4, 6, 8] and not p["runs"][1]["refused"]
    assert p["cost"]["step_factors"] == {"grpo_4xsteps": 4}
    assert p["cost"]["gpu_hours"] == pytest.approx((6 * 6 + 4 * 6 * 6) * 0.2 / (512 * 6))
    text = compare.plan_text(p)
    assert "grpo_4xsteps trains 4 x the steps (8) on 24 prompts drawn (6 distinct, 4.00 passes), evaluated every 2 " \
           "steps: counted at 4 x the steps." in text
    assert compare.method_record("grpo_4xsteps") == {"method_flags": compare.METHODS["grpo"], "step_factor": 4}


def test_the_plan_names_the_run_an_adaptive_method_needs_for_its_equal_token_cell(tmp_path):
    """Reinforce-Ada may draw up to its budget: without a uniform GRPO at its tokens among the methods, the plan says
    which run would give its equal-tokens cell; with one, nothing."""
    _twelve_prompts(tmp_path)
    s = compare.Setting(model="m", train=tmp_path / "train.jsonl", test=tmp_path / "test.jsonl", prompts_per_step=3,
                        steps=2, extra=CPU_FLAGS)
    cpu = DeviceDecision(CPU, "a test")
    alone = compare.plan(s, ["grpo", "reinforce_ada"], [0], tmp_path / "out", decision=cpu)
    assert alone["equal_tokens"] == ["reinforce_ada may draw up to 32 responses per prompt, more than G: its "
                                     "equal-tokens cell needs a uniform GRPO at its tokens, which no method here "
                                     "spends; add grpo_4xsteps (4 x --steps, evaluated every 2 steps: its evaluation "
                                     "nearest the method's tokens is paired with it) or grpo_4xg (4 x G) to --methods"]
    assert "Equal tokens: reinforce_ada may draw up to 32" in compare.plan_text(alone)
    paired = compare.plan(s, ["grpo", "reinforce_ada", "grpo_4xsteps"], [0], tmp_path / "out", decision=cpu)
    assert paired["equal_tokens"] == []
