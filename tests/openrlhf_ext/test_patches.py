"""Patches 4, 7, 9 and 10: the end-of-training evaluation's last-step test, seeded rollouts (also in the real
vLLM), the tokenizer sent as its path, and the training prompts' order from --train.seed."""

import os
import pickle

import pytest

from openrlhf_copo.embedded.models import tiny_qwen2
from openrlhf_copo.openrlhf_ext.patches import _TOKENIZERS, TokenizerByPath
from tests_support import copo_argv


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_qwen2(tmp_path_factory.mktemp("tiny") / "model"))
    tok.padding_side = "left"  # as OpenRLHF's get_tokenizer sets it for the actor
    return tok


def test_the_stand_in_pickles_small_and_loads_once_per_process(tokenizer):
    _TOKENIZERS.clear()
    sent = pickle.dumps(TokenizerByPath.of(tokenizer))
    assert len(sent) < 2_000 < 1_000_000 < len(pickle.dumps(tokenizer))  # a path and four settings, not 1.5 MB
    first, second = pickle.loads(sent), pickle.loads(sent)
    assert first is second and first is not tokenizer  # loaded once here, then kept
    assert (first.padding_side, first.pad_token, len(first)) == ("left", tokenizer.pad_token, len(tokenizer))
    text = "<|im_start|>user\nWhat is 25 + 4?<|im_end|>\n<|im_start|>assistant\n25 + 4 = 29<|im_end|>"
    ids = tokenizer(text=text, add_special_tokens=False)["input_ids"]
    assert first(text=text, add_special_tokens=False)["input_ids"] == ids  # what the rollout executor calls
    assert first.decode(ids, skip_special_tokens=False) == tokenizer.decode(ids, skip_special_tokens=False)


def test_a_tokenizer_changed_in_memory_is_refused_where_it_is_loaded(tokenizer):
    """A token added after loading is not in the folder: the engine would tokenize differently, so it refuses."""
    import copy

    changed = copy.deepcopy(tokenizer)
    changed.add_tokens(["<copo_extra>"])
    with pytest.raises(RuntimeError, match=r"has 49152 tokens, the trainer's has 49153"):
        pickle.loads(pickle.dumps(TokenizerByPath.of(changed)))


def test_a_tokenizer_without_a_local_folder_travels_as_itself(tokenizer):
    import copy

    hub = copy.deepcopy(tokenizer)
    hub.name_or_path = "HuggingFaceTB/SmolLM2-135M-Instruct"  # nothing on disk to load it from
    assert TokenizerByPath.of(hub) is hub


# --- Patch 7's seeded rollouts (`--copo.seeded_rollouts`) ---

from openrlhf_copo.contract import ROLLOUT_SEED_ENV  # noqa: E402
from openrlhf_copo.openrlhf_ext import patches  # noqa: E402


@pytest.fixture
def fresh_draws(monkeypatch):
    monkeypatch.setattr(patches, "_draws", {})


def test_seeded_rollouts_give_each_draw_of_a_prompt_its_own_reproducible_seed(monkeypatch, fresh_draws):
    from vllm import SamplingParams

    params = SamplingParams(temperature=1.0, max_tokens=8)
    assert patches.seeded_sampling_params(params, "2+2=") is params  # off: OpenRLHF's draws, untouched
    monkeypatch.setenv(ROLLOUT_SEED_ENV, "42")
    first = [patches.seeded_sampling_params(params, "2+2=").seed for _ in range(3)]
    other_prompt = patches.seeded_sampling_params(params, "3+3=").seed
    assert params.seed is None  # a copy is seeded, not the shared object
    assert len(set(first + [other_prompt])) == 4 and all(0 <= s < 2 ** 31 for s in first)
    monkeypatch.setattr(patches, "_draws", {})  # another run (process) with the same seed: the same seeds
    assert [patches.seeded_sampling_params(params, "2+2=").seed for _ in range(3)] == first
    monkeypatch.setattr(patches, "_draws", {})
    monkeypatch.setenv(ROLLOUT_SEED_ENV, "43")
    assert patches.seeded_sampling_params(params, "2+2=").seed != first[0]
    greedy, own = SamplingParams(temperature=0.0, max_tokens=8), SamplingParams(temperature=1.0, seed=5, max_tokens=8)
    assert patches.seeded_sampling_params(greedy, "2+2=") is greedy and patches.seeded_sampling_params(own, "x") is own


SAME_DRAW_WHATEVER_THE_BATCH = r"""
import json, os, sys
os.environ["OPENRLHF_COPO_ROLLOUT_SEED"] = "7"
from vllm import LLM, SamplingParams
from openrlhf_copo.openrlhf_ext import patches

# A token budget of one max-length prompt per step: the batch below (12 prompts of ~40 tokens) does not fit one step,
# which is where vLLM splits prefills (chunked prefill) and rewinds a seeded request's generator.
llm = LLM(model=sys.argv[1], dtype="float32", enforce_eager=True, max_model_len=128, max_num_batched_tokens=128,
          seed=0)
params = SamplingParams(temperature=1.0, max_tokens=12)

def run(prompts):
    patches._draws.clear()  # a fresh run: draw 0 of each prompt
    outs = llm.generate(prompts, [patches.seeded_sampling_params(params, p) for p in prompts], use_tqdm=False)
    return {p: list(o.outputs[0].token_ids) for p, o in zip(prompts, outs)}

alone = run(["12+7="])
batched = run([f"Question {i}: what is {i} times {i + 3}, added to the sum of {i} and 7? Answer:" for i in range(11)]
              + ["12+7="])
patches._draws.clear()
draws = [list(o.outputs[0].token_ids) for o in llm.generate(["12+7="] * 2, [patches.seeded_sampling_params(params, "12+7=")
         for _ in range(2)], use_tqdm=False)]
print("RESULT", json.dumps({"alone": alone["12+7="], "batched": batched["12+7="], "draws": draws}))
"""


def test_a_seeded_draw_is_the_same_alone_or_in_a_batch_in_the_real_vllm(tmp_path):
    """vLLM's per-request seed on the CPU: the same prompt's first draw comes out the same when sent alone and
    amid other prompts (unseeded, the engine's one generator serves the batch in arrival order), and the
    prompt's second draw is another response. The batch does not fit one step's token budget: on a
    chunked-prefill engine vLLM would rewind the seeded generator of a split prefill, which a CPU generator cannot
    (the engine died: "CPU Generator does not use offset"); the CPU path schedules prefills whole."""
    import json
    import os
    import subprocess
    import sys

    from openrlhf_copo.openrlhf_ext.cpu import loopback_env

    model = tiny_qwen2(tmp_path / "model")
    out = subprocess.run([sys.executable, "-c", SAME_DRAW_WHATEVER_THE_BATCH, model], capture_output=True, text=True,
                         timeout=600, env={**os.environ, **loopback_env(), "HF_HUB_OFFLINE": "1"})
    lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
    assert out.returncode == 0 and lines, (out.stdout + out.stderr)[-4000:]
    result = json.loads(lines[-1][len("RESULT "):])
    assert len(result["alone"]) == 12 and result["alone"] == result["batched"]
    assert result["draws"][0] == result["alone"] and result["draws"][1] != result["draws"][0]


# --- Patch 4's end-of-training evaluation (`--copo.eval_after_train`) ---


def fake_trainer(draws, eval_steps=6, episodes=1):
    """A trainer as `PPOTrainer.fit` sees it: a samples generator whose draws return (samples, pass rate,
    prompts consumed, exhausted), and `evaluate` recording the steps it was asked for."""
    from types import SimpleNamespace as NS

    draws = iter(draws)
    trainer = NS(args=NS(eval=NS(steps=eval_steps, temperature=1.0, n_samples_per_prompt=2),
                         train=NS(num_episodes=episodes), copo=NS(eval_after_train=True)),
                 samples_generator=NS(generate_samples=lambda **kw: next(draws)), eval_dataloader=[0],
                 generate_kwargs={}, evaluated=[])
    trainer.evaluate = lambda step, **kw: trainer.evaluated.append(step)
    patches.watch_prompt_draws(trainer)
    return trainer


def test_a_dapo_run_that_runs_out_of_prompts_mid_batch_is_evaluated_at_its_last_step():
    """DAPO seed 1 of the benchmark: 71 of 72 prompts drawn by step 7, the last one cannot fill a batch, the
    next draw comes back empty and fit() stops; step 7 (not a multiple of --eval.steps 6) must be evaluated."""
    trainer = fake_trainer([(["batch"], 0.5, 11, False), ([], None, 1, True)])
    assert trainer.samples_generator.generate_samples()[3] is False
    trainer._copo_logged = (7, 0)  # what save_logs_and_checkpoints records for the step
    assert trainer.samples_generator.generate_samples() == ([], None, 1, True)
    assert trainer.evaluated == [7]


@pytest.mark.parametrize("logged, episodes, evaluated_before, expected", [
    ((6, 0), 1, None, []),    # OpenRLHF's own evaluation at a multiple of --eval.steps saw it
    ((7, 0), 1, 7, []),       # evaluated already (the draw that fed step 7 said the prompts were used up)
    ((7, 0), 2, None, []),    # an episode is left: the prompts are drawn again
    ((7, 1), 2, None, [7]),   # the last episode's end
    ((0, None), 1, None, []),  # no step was made: nothing to evaluate after training
])
def test_the_end_of_the_prompts_evaluates_the_last_step_once(logged, episodes, evaluated_before, expected):
    trainer = fake_trainer([([], None, 0, True)], episodes=episodes)
    trainer._copo_logged = logged
    if evaluated_before is not None:
        trainer._copo_evaluated_step = evaluated_before
    trainer.samples_generator.generate_samples()
    assert trainer.evaluated == expected


def test_a_draw_that_uses_up_the_prompts_with_a_batch_is_flagged_for_the_steps_logging():
    """A draw that hits the end of the prompts while still filling a batch returns that batch: fit() trains on
    it, logs the step (whose logging then evaluates it) and stops. Nothing is evaluated at the draw itself."""
    trainer = fake_trainer([(["partial batch"], 0.5, 2, True)])
    trainer.samples_generator.generate_samples()
    assert trainer._copo_draw_exhausted is True and trainer.evaluated == []
    trainer._copo_logged = (5, 0)
    patches.evaluate_last_step(trainer)
    assert trainer.evaluated == [5]
    patches.watch_prompt_draws(trainer)  # installed once: a second call does not wrap the wrapper
    assert trainer.samples_generator.generate_samples.__wrapped__.__name__ == "<lambda>"


# --- Patch 10: the training prompts' order comes from --train.seed ---

PROMPT_ORDER = r"""
import json, sys, torch
import openrlhf.trainer.ppo_trainer as ppo_trainer
from openrlhf.utils import get_strategy, get_tokenizer
from openrlhf_copo.cli.train_ppo_ray import load_args
from openrlhf_copo.openrlhf_ext import patches

argv, model = json.loads(sys.argv[1]), sys.argv[2]

def first_prompts(seed, drawn_before):
    # OpenRLHF's own prompt loader, built as in the PPOTrainer actor (torch.distributed not initialized there),
    # after the process's global torch generator drew `drawn_before` numbers
    args = load_args(argv + ["--train.seed", str(seed)])
    strategy = get_strategy(args)
    tokenizer = get_tokenizer(model, None, "left", strategy)
    torch.manual_seed(1234)
    torch.rand(drawn_before)
    prompts_dataloader, _, _ = ppo_trainer.prepare_datasets(strategy, tokenizer)
    return [p for _, batch, _, _ in prompts_dataloader for p in batch][:8]

unpatched = first_prompts(0, 0) == first_prompts(0, 3)
patches.apply_seeded_prompt_order()
patched = first_prompts(0, 0) == first_prompts(0, 3)
print("RESULT", json.dumps({"unpatched_same": unpatched, "patched_same": patched,
                            "seed_1_differs": first_prompts(1, 0) != first_prompts(0, 0)}))
"""


def test_the_training_prompts_order_follows_the_seed_not_the_process(tmp_path, tiny_model_dir):
    """OpenRLHF builds the prompt loader in the PPOTrainer actor, where its sampler seeds itself from the
    process's global torch generator, which nothing there seeds with --train.seed: the benchmark's COPO and GRPO
    runs of one seed drew different first batches. With patch 10, two processes that drew differently before
    build the same order, and another --train.seed gives another order."""
    import json
    import subprocess
    import sys

    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"What is {i} + {i}?", "label": str(2 * i)}) + "\n" for i in range(40)))
    argv = copo_argv("--data.prompt_dataset", str(data), "--data.input_key", "prompt", "--data.label_key", "label",
                     model=tiny_model_dir)
    out = subprocess.run([sys.executable, "-c", PROMPT_ORDER, json.dumps(argv), tiny_model_dir],
                         capture_output=True, text=True, timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
    assert out.returncode == 0 and lines, (out.stdout + out.stderr)[-4000:]
    assert json.loads(lines[-1][len("RESULT "):]) == {"unpatched_same": False, "patched_same": True,
                                                       "seed_1_differs": True}
