"""Patches 7 and 9 (`openrlhf_ext/runtime_patches/rollout.py`): the tokenizer sent as its path, and seeded rollouts (also
in the real vLLM)."""

import os
import pickle

import pytest

from openrlhf_copo.contract import ROLLOUT_SEED_ENV
from openrlhf_copo.cpu_demo.models import tiny_qwen2
from openrlhf_copo.openrlhf_ext.runtime_patches import rollout
from openrlhf_copo.openrlhf_ext.runtime_patches.rollout import _TOKENIZERS, TokenizerByPath

# --- Patch 9: the tokenizer travels to the vLLM engines as its path ---


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


@pytest.fixture
def fresh_draws(monkeypatch):
    monkeypatch.setattr(rollout, "_draws", {})


def test_seeded_rollouts_give_each_draw_of_a_prompt_its_own_reproducible_seed(monkeypatch, fresh_draws):
    from vllm import SamplingParams

    params = SamplingParams(temperature=1.0, max_tokens=8)
    assert rollout.seeded_sampling_params(params, "2+2=") is params  # off: OpenRLHF's draws, untouched
    monkeypatch.setenv(ROLLOUT_SEED_ENV, "42")
    first = [rollout.seeded_sampling_params(params, "2+2=").seed for _ in range(3)]
    other_prompt = rollout.seeded_sampling_params(params, "3+3=").seed
    assert params.seed is None  # a copy is seeded, not the shared object
    assert len(set(first + [other_prompt])) == 4 and all(0 <= s < 2 ** 31 for s in first)
    monkeypatch.setattr(rollout, "_draws", {})  # another run (process) with the same seed: the same seeds
    assert [rollout.seeded_sampling_params(params, "2+2=").seed for _ in range(3)] == first
    monkeypatch.setattr(rollout, "_draws", {})
    monkeypatch.setenv(ROLLOUT_SEED_ENV, "43")
    assert rollout.seeded_sampling_params(params, "2+2=").seed != first[0]
    greedy, own = SamplingParams(temperature=0.0, max_tokens=8), SamplingParams(temperature=1.0, seed=5, max_tokens=8)
    assert rollout.seeded_sampling_params(greedy, "2+2=") is greedy and rollout.seeded_sampling_params(own, "x") is own


#: The seeds the per-engine count gave for draws 0-5 of "2+2=" at --train.seed 42 (computed with the code of afcc530,
#: the committed runs' derivation): a run with one engine must keep drawing them, so that those runs reproduce.
SEEDS_OF_THE_COMMITTED_RUNS = [2129558632, 140126875, 1898458435, 1032226740, 837663812, 227901108]


def engine_seeds(request: dict) -> list:
    """The seeds a vLLM engine process gives a dispatched request's ``num_samples`` responses: the request's
    parameters arrive as one deserialized object shared by its responses (as over Ray), in a fresh process (no draw
    counted there before)."""
    rollout._draws.clear()
    params = pickle.loads(pickle.dumps(request["sampling_params"]))
    return [rollout.request_sampling_params(params, request["prompt"]).seed for _ in range(request["num_samples"])]


def test_a_prompt_seen_again_on_another_engine_gets_new_seeds_and_runs_agree_whatever_the_engine(monkeypatch,
                                                                                             fresh_draws):
    """Issue 49 item 7: the draw index is the run's, counted where the trainer dispatches (`DrawCounter`), not the
    engine's. Before, engine B's count for a prompt started at 0 in episode 1 and drew episode 0's seeds again."""
    from vllm import SamplingParams

    monkeypatch.setenv(ROLLOUT_SEED_ENV, "42")
    params = SamplingParams(temperature=1.0, max_tokens=8)
    G = 3

    def run(engines_by_episode):
        counter = rollout.DrawCounter()
        return [engine_seeds(counter.stamp({"prompt": "2+2=", "sampling_params": params, "num_samples": G}))
                for _ in engines_by_episode]  # each episode's request in another fresh engine process

    first = run(["engine A", "engine B"])
    assert len(set(first[0] + first[1])) == 2 * G  # episode 1 on engine B: new seeds
    assert run(["engine B", "engine A"]) == first  # another run, engines swapped: the same (episode, index) seeds
    # with one engine these are the seeds the engine's own count gave: one-engine runs made before reproduce
    assert first[0] + first[1] == SEEDS_OF_THE_COMMITTED_RUNS
    assert [rollout.seeded_sampling_params(params, "2+2=").seed for _ in range(2 * G)] == SEEDS_OF_THE_COMMITTED_RUNS
    # the stamp stays in the trainer's copy: the engine's parameters go to vLLM without it, the caller's untouched
    stamped = rollout.DrawCounter().stamp({"prompt": "2+2=", "sampling_params": params, "num_samples": G})
    assert stamped["sampling_params"].extra_args == {rollout.DRAW_KEY: 0} and params.extra_args is None
    assert rollout.request_sampling_params(stamped["sampling_params"], "2+2=").extra_args is None
    greedy = SamplingParams(temperature=0.0, max_tokens=8)  # greedy requests are neither seeded nor counted
    counter = rollout.DrawCounter()
    assert counter.stamp({"prompt": "2+2=", "sampling_params": greedy, "num_samples": G})["sampling_params"] is greedy
    assert counter.counts == {}


def test_grpo_4xgs_first_g_draws_of_a_prompt_are_grpos_own(monkeypatch, fresh_draws, load_args, tmp_path):
    """The budget control (`compare.SAMPLE_FACTOR`): a grpo_4xg run sends each prompt as one request of its 4G
    responses, seeded by the run's draw index, so at a prompt's first step its draws 0..G-1 get the seeds of GRPO's
    G draws of the same seed and its other 3G new ones. A later pass over the prompt starts at 4G, GRPO's at G: the
    runs share their first step's first G seeds only (their policies part after it anyway)."""
    from vllm import SamplingParams

    from openrlhf_copo import compare

    monkeypatch.setenv(ROLLOUT_SEED_ENV, "42")
    params = SamplingParams(temperature=1.0, max_tokens=8)
    s = compare.Setting(model="m", train=tmp_path / "train.jsonl", test=tmp_path / "test.jsonl", samples_per_prompt=6,
                        prompts_per_step=8)

    def first_two_passes(method):
        argv = compare.run_argv(s, method, 0, tmp_path, tmp_path / "train.jsonl", False)
        n = load_args(argv).rollout.n_samples_per_prompt
        counter = rollout.DrawCounter()
        return [engine_seeds(counter.stamp({"prompt": "2+2=", "sampling_params": params, "num_samples": n}))
                for _ in range(2)]

    grpo, wide = first_two_passes("grpo"), first_two_passes("grpo_4xg")
    assert len(grpo[0]) == 6 and len(wide[0]) == 24 and len(set(wide[0] + wide[1])) == 48
    assert wide[0][:6] == grpo[0] == SEEDS_OF_THE_COMMITTED_RUNS
    assert not set(wide[1]) & set(grpo[1])  # a second pass: draws 24-47 against GRPO's 6-11


def test_the_draw_counts_go_into_a_checkpoint_and_come_back_on_a_resume(monkeypatch):
    """A resumed run goes on with the run's counts (patch 4 saves them in the checkpoint's client states, patch 6
    restores them), instead of drawing the seeds of its first steps again."""
    from types import SimpleNamespace

    from vllm import SamplingParams

    monkeypatch.setenv(ROLLOUT_SEED_ENV, "42")
    trainer = SimpleNamespace(samples_generator=SimpleNamespace())
    params = SamplingParams(temperature=1.0, max_tokens=8)
    rollout.DrawCounter.of(trainer.samples_generator).stamp({"prompt": "p", "sampling_params": params,
                                                             "num_samples": 4})
    client_states = {"global_step": 3}
    rollout.DrawCounter.save(trainer, client_states)
    resumed = SimpleNamespace(samples_generator=SimpleNamespace())
    rollout.DrawCounter.restore(resumed, client_states)
    nxt = rollout.DrawCounter.of(resumed.samples_generator).stamp({"prompt": "p", "sampling_params": params,
                                                                    "num_samples": 4})
    assert nxt["sampling_params"].extra_args[rollout.DRAW_KEY] == 4
    rollout.DrawCounter.restore(resumed, {"global_step": 3})  # a checkpoint made without seeded rollouts: kept as is
    assert rollout.DrawCounter.of(resumed.samples_generator).counts == {rollout.prompt_key("p"): 8}


SAME_DRAW_WHATEVER_THE_BATCH = r"""
import json, os, sys
os.environ["OPENRLHF_COPO_ROLLOUT_SEED"] = "7"
from vllm import LLM, SamplingParams
from openrlhf_copo.openrlhf_ext.runtime_patches import rollout

# A token budget of one max-length prompt per step: the batch below (12 prompts of ~40 tokens) does not fit one step,
# which is where vLLM splits prefills (chunked prefill) and rewinds a seeded request's generator.
llm = LLM(model=sys.argv[1], dtype="float32", enforce_eager=True, max_model_len=128, max_num_batched_tokens=128,
          seed=0)
params = SamplingParams(temperature=1.0, max_tokens=12)

def run(prompts):
    rollout._draws.clear()  # a fresh run: draw 0 of each prompt
    outs = llm.generate(prompts, [rollout.seeded_sampling_params(params, p) for p in prompts], use_tqdm=False)
    return {p: list(o.outputs[0].token_ids) for p, o in zip(prompts, outs)}

alone = run(["12+7="])
batched = run([f"Question {i}: what is {i} times {i + 3}, added to the sum of {i} and 7? Answer:" for i in range(11)]
              + ["12+7="])
rollout._draws.clear()
draws = [list(o.outputs[0].token_ids) for o in llm.generate(["12+7="] * 2, [rollout.seeded_sampling_params(params, "12+7=")
         for _ in range(2)], use_tqdm=False)]
print("RESULT", json.dumps({"alone": alone["12+7="], "batched": batched["12+7="], "draws": draws}))
"""


@pytest.mark.heavy(group=2)  # a vLLM engine, no Ray
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

