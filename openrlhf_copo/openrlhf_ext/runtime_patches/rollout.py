"""Patches 7 and 9: what the vLLM engines get with each prompt, and what each response carries back.

7. the rollout executors' `execute` (`openrlhf.utils.agent`, in the vLLM engine actors): each response carries
   the seed of the engine that sampled it, so that the advantage step can report how many engines fed the batch
   and the weight-sync logprob gap of each engine; with `--copo.seeded_rollouts`, each sampled response gets its
   own vLLM seed (`seeded_sampling_params`), so that two methods from the same model draw the same responses.
   The seed's draw index is the run's, not the engine's: `SamplesGenerator._dispatch_prompts_to_vllm` (in the
   trainer) stamps each prompt's request with how many responses the run drew for that prompt before
   (`DrawCounter`, kept in the run's checkpoints), and the executor adds the response's place in its group
   (`request_sampling_params`);
9. `SamplesGenerator._dispatch_prompts_to_vllm`: the tokenizer that OpenRLHF sends along with every prompt
   travels as its path (`TokenizerByPath`), loaded once per vLLM engine process.

Also the pieces of a step that draws more than one round (patch 11's two rollouts: Reinforce-Ada's rounds in
`adaptive_sampling`, Knapsack RL's pilot and allocation in `knapsack`): `reward_of`, `responses_by_prompt`,
`draw_round`.
"""

from __future__ import annotations

import functools
import hashlib
import os
from collections import defaultdict
from typing import Dict, List

from openrlhf_copo.contract import ROLLOUT_ENGINE_SEED, ROLLOUT_SEED_ENV
from openrlhf_copo.openrlhf_ext.runtime_patches.versions import PATCHED_ATTR, check_symbol, check_vllm


def patch_agent(module) -> None:
    """Patch 7 into a loaded `openrlhf.utils.agent` (vLLM engine actors): every response's `extra_logs`
    gets ROLLOUT_ENGINE_SEED, the seed of the engine that sampled it (engine i has --train.seed + i)."""
    for name in ("SingleTurnAgentExecutor.execute", "MultiTurnAgentExecutor.execute"):
        check_symbol(module.__name__, name)  # the engine is read as the sixth argument when not given by keyword
    check_vllm("7")  # in the engine actor: SamplingParams.clone() and .seed, the engine arguments' seed
    for cls in (module.SingleTurnAgentExecutor, module.MultiTurnAgentExecutor):
        original = cls.__dict__["execute"]
        if getattr(original, PATCHED_ATTR, False):
            continue

        def patched(original):
            @functools.wraps(original)
            async def execute(self, *args, **kwargs):
                # OpenRLHF 0.11.2's generate_responses passes every argument by keyword
                if "sampling_params" in kwargs:
                    kwargs["sampling_params"] = request_sampling_params(kwargs["sampling_params"], kwargs.get("prompt"))
                output = await original(self, *args, **kwargs)
                engine = kwargs["llm_engine"] if "llm_engine" in kwargs else args[5]
                seed = getattr(engine, "kwargs", {}).get("seed")
                if seed is not None and isinstance(output, dict):
                    output["extra_logs"] = {**(output.get("extra_logs") or {}), ROLLOUT_ENGINE_SEED: int(seed)}
                return output

            setattr(execute, PATCHED_ATTR, True)
            return execute

        cls.execute = patched(original)


#: How many responses this process has sampled for each prompt (by hash) under `--copo.seeded_rollouts`, for a
#: request that carries no draw index (`seeded_sampling_params` called outside a run's dispatch: a probe, a test).
_draws: dict = {}

#: The key of `SamplingParams.extra_args` that carries a request's first draw index from the trainer to the engine.
DRAW_KEY = "openrlhf_copo_draw"


def prompt_key(prompt) -> str:
    """The prompt's key in the draw counts and in its seeds: 8 bytes of its sha256, as hex."""
    return hashlib.sha256(str(prompt).encode()).digest()[:8].hex()


def seeds_requests(sampling_params) -> bool:
    """Whether `--copo.seeded_rollouts` seeds a request with these parameters: on (ROLLOUT_SEED_ENV set in every
    worker), sampled (not greedy), and not seeded by the caller already."""
    return (os.environ.get(ROLLOUT_SEED_ENV) is not None and getattr(sampling_params, "seed", None) is None
            and sampling_params.temperature > 0)


def seeded_sampling_params(sampling_params, prompt, draw=None):
    """With `--copo.seeded_rollouts` (ROLLOUT_SEED_ENV set in every worker): a copy of ``sampling_params`` whose
    seed is a hash of the run's seed, the prompt and ``draw``, the number of responses the run sampled for that
    prompt before this one; ``sampling_params`` itself when the option is off, the sampling is greedy, or it has a
    seed already. Without ``draw`` (a caller outside a run's dispatch), this process's own count for the prompt.

    Why: vLLM samples a batch from one generator per engine, so the response a request gets depends on what else
    is in the batch and when it arrived, and OpenRLHF sends each of the G samples of a prompt as its own
    asynchronous request: two runs from the same model with the same --train.seed draw different first rollout
    batches. With a seed per request, the i-th response to a prompt is the same in both (up to floating-point
    differences between batch shapes), which is what a paired comparison of methods needs. The draw index is the
    run's (`DrawCounter`): an engine's own count would start again at 0 when a prompt reaches another engine in a
    later episode, and draw the same responses again."""
    if not seeds_requests(sampling_params):
        return sampling_params
    key = prompt_key(prompt)
    if draw is None:
        draw = _draws.get(key, 0)
        _draws[key] = draw + 1
    params = sampling_params.clone()
    run_seed = os.environ[ROLLOUT_SEED_ENV]
    params.seed = int.from_bytes(hashlib.sha256(f"{run_seed}:{draw}:".encode() + bytes.fromhex(key)).digest()[:4],
                                 "little") >> 1
    extra = {k: v for k, v in (params.extra_args or {}).items() if k != DRAW_KEY}
    params.extra_args = extra or None
    return params


def request_sampling_params(sampling_params, prompt):
    """In the engine, for one of the responses of one prompt's request (patch 7's `execute`): its seeded parameters,
    with the draw index the trainer stamped on the request (`DrawCounter.stamp`) plus the response's place among
    the request's responses. OpenRLHF 0.11.2's `generate_responses` hands the same parameters to each of its
    ``num_samples`` `execute` calls, started in order on one event loop, so the stamp is read and advanced here,
    before the first `await`."""
    extra = getattr(sampling_params, "extra_args", None) or {}
    draw = extra.get(DRAW_KEY)
    if draw is not None:
        extra[DRAW_KEY] = draw + 1
    return seeded_sampling_params(sampling_params, prompt, draw)


class DrawCounter:
    """How many responses the run has sampled for each prompt (by `prompt_key`), counted in the trainer's
    `SamplesGenerator` where every request is dispatched, whichever engine serves it. Saved with each checkpoint
    and restored from it (`CLIENT_STATE`), so a resumed run draws as the uninterrupted run would have.

    With one engine, the counts are those each engine kept before (the same seeds, so runs made then reproduce);
    with several, a prompt sent to another engine in a later episode now goes on from its own count instead of
    starting again at 0."""

    #: The key of the checkpoint's client states that holds the counts.
    CLIENT_STATE = "openrlhf_copo_draws"

    def __init__(self, counts: dict = None):
        self.counts = dict(counts or {})

    @classmethod
    def save(cls, trainer, client_states) -> None:
        """Into a checkpoint's client states (patch 4, before OpenRLHF saves them): the counts so far, if the
        trainer's generator has drawn seeded requests."""
        counter = getattr(getattr(trainer, "samples_generator", None), "_copo_draw_counter", None)
        if counter is not None and client_states is not None:
            client_states[cls.CLIENT_STATE] = dict(counter.counts)

    @classmethod
    def restore(cls, trainer, states) -> None:
        """From the checkpoint states a run resumes with (patch 6): the counts saved there, if any."""
        generator = getattr(trainer, "samples_generator", None)
        if generator is not None and (states or {}).get(cls.CLIENT_STATE):
            generator._copo_draw_counter = cls(states[cls.CLIENT_STATE])

    @classmethod
    def find(cls, generator) -> "DrawCounter | None":
        """The counter of a `SamplesGenerator` when it has one (its run seeds its rollouts), else None."""
        return getattr(generator, "_copo_draw_counter", None)

    @classmethod
    def of(cls, generator) -> "DrawCounter":
        """The counter of a `SamplesGenerator`, made on first use."""
        if getattr(generator, "_copo_draw_counter", None) is None:
            generator._copo_draw_counter = cls()
        return generator._copo_draw_counter

    def stamp(self, request: dict) -> dict:
        """A `generate_responses` call's keyword arguments with its sampling parameters copied and stamped with the
        prompt's next draw index (`DRAW_KEY`); its ``num_samples`` responses are counted. Unchanged when the request
        is not seeded (`seeds_requests`)."""
        params = request.get("sampling_params")
        if params is None or not seeds_requests(params):
            return request
        key = prompt_key(request["prompt"])
        draw = self.counts.get(key, 0)
        self.counts[key] = draw + int(request.get("num_samples", 1))
        stamped = params.clone()
        stamped.extra_args = {**(stamped.extra_args or {}), DRAW_KEY: draw}
        return {**request, "sampling_params": stamped}


class _StampingEngine:
    """A vLLM engine's actor handle whose `generate_responses.remote(...)` stamps the request's draw index first
    (`DrawCounter.stamp`); everything else is the handle's."""

    def __init__(self, engine, counter: DrawCounter):
        self._engine, self._counter = engine, counter

    def __getattr__(self, name):
        return getattr(self._engine, name)

    @property
    def generate_responses(self):
        method, counter = self._engine.generate_responses, self._counter

        class _Stamped:
            @staticmethod
            def remote(*args, **kwargs):
                return method.remote(*args, **counter.stamp(kwargs))

        return _Stamped


#: Marks the dispatch wrapper of `apply_seeded_dispatch` (patch 9 marks its own with PATCHED_ATTR).
_SEEDED_ATTR = "__openrlhf_copo_seeded__"


def apply_seeded_dispatch() -> None:
    """Patch 7's trainer side, in Ray workers only, under `--copo.seeded_rollouts`: `_dispatch_prompts_to_vllm` sends
    each prompt's request through `_StampingEngine`, so it carries the run's draw index for that prompt."""
    _around_dispatch(_SEEDED_ATTR, "vllm_engines",
                     lambda generator, engines: [_StampingEngine(e, DrawCounter.of(generator)) for e in engines])


def _around_dispatch(marker: str, attribute: str, replace) -> None:
    """`SamplesGenerator._dispatch_prompts_to_vllm` run with the generator's ``attribute`` replaced by
    ``replace(generator, value)`` for the call (patches 7 and 9: what OpenRLHF's dispatch reads of it), once per
    ``marker``."""
    from openrlhf.trainer.ppo_utils.samples_generator import SamplesGenerator

    original = SamplesGenerator._dispatch_prompts_to_vllm
    if getattr(original, marker, False):
        return
    check_symbol("openrlhf.trainer.ppo_utils.samples_generator", "SamplesGenerator._dispatch_prompts_to_vllm")

    @functools.wraps(original)
    def _dispatch_prompts_to_vllm(self, *args, **kwargs):
        kept = getattr(self, attribute)
        setattr(self, attribute, replace(self, kept))
        try:
            return original(self, *args, **kwargs)
        finally:
            setattr(self, attribute, kept)

    setattr(_dispatch_prompts_to_vllm, marker, True)
    SamplesGenerator._dispatch_prompts_to_vllm = _dispatch_prompts_to_vllm


class TokenizerByPath:
    """Stands in for a Hugging Face tokenizer in a Ray call's arguments: it pickles as the tokenizer's path and
    settings, and unpickles as the tokenizer loaded from that path, once per process (`_tokenizer_at`).

    Why: OpenRLHF 0.11.2 passes `hf_tokenizer=self.tokenizer` in every prompt's `generate_responses` call. The
    engine actor unpickles it each time, on the one thread that deserializes its calls: SmolLM2's 1.5 MB
    tokenizer takes 0.1 s on an idle core, and py-spy found the engine actor spending 86% of its time there
    during a 480-prompt evaluation on 2 cores. The executor only encodes the prompt and decodes the response,
    which the tokenizer loaded from the same path does identically; the vLLM engine loads its model from a path
    on the same node anyway."""

    def __init__(self, tokenizer):
        self.path = tokenizer.name_or_path
        self.settings = {"use_fast": bool(getattr(tokenizer, "is_fast", True)),
                         "padding_side": tokenizer.padding_side, "pad_token": tokenizer.pad_token,
                         "size": len(tokenizer)}

    @classmethod
    def of(cls, tokenizer):
        """The stand-in, or the tokenizer itself when it was not loaded from a local folder (nothing to load)."""
        return cls(tokenizer) if os.path.isdir(str(getattr(tokenizer, "name_or_path", ""))) else tokenizer

    def __reduce__(self):
        return _tokenizer_at, (self.path, tuple(sorted(self.settings.items())))


_TOKENIZERS: dict = {}


def _tokenizer_at(path: str, settings: tuple):
    """The tokenizer at ``path`` with the sender's settings, loaded once per process."""
    key = (path, settings)
    if key not in _TOKENIZERS:
        from transformers import AutoTokenizer

        wanted = dict(settings)
        tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=True, use_fast=wanted["use_fast"])
        tokenizer.padding_side = wanted["padding_side"]
        if wanted["pad_token"] is not None:
            tokenizer.pad_token = wanted["pad_token"]
        if len(tokenizer) != wanted["size"]:
            raise RuntimeError(f"openrlhf_copo: the tokenizer loaded from {path} has {len(tokenizer)} tokens, the "
                               f"trainer's has {wanted['size']}: the rollout would tokenize differently")
        _TOKENIZERS[key] = tokenizer
    return _TOKENIZERS[key]


def apply_tokenizer_by_path() -> None:
    """Patch 9, in Ray workers only: `SamplesGenerator._dispatch_prompts_to_vllm` sends `TokenizerByPath` where
    OpenRLHF sends the tokenizer itself with every prompt (read by the original's `.remote(hf_tokenizer=...)` only)."""
    _around_dispatch(PATCHED_ATTR, "tokenizer", lambda generator, tokenizer: TokenizerByPath.of(tokenizer))


# ---------------------------------------------------------------------------------------------
# Drawing more than one round in a step (patch 11: Reinforce-Ada's rounds, `adaptive_sampling`; Knapsack RL's
# pilot and allocation, `knapsack`).

def reward_of(experience) -> float:
    """A response's reward, scored in the engine as it was sampled."""
    if experience.rewards is None:
        raise RuntimeError("reinforce_ada and knapsack need each response's reward when it is sampled (a reward "
                           "function, --reward.remote_url), not a reward model scored after the rollout")
    return float(experience.rewards.reshape(-1)[0])


def responses_by_prompt(experiences: List, n: int, what: str = "reinforce_ada: the first round") -> List[List]:
    """A round's responses as one run of n per prompt: OpenRLHF's `_generate_vllm` appends each prompt's n responses
    together (one engine call per prompt), so they come in runs of n that share a prompt. ``what`` names the round in
    the errors."""
    if len(experiences) % n:
        raise RuntimeError(f"{what}: {len(experiences)} responses, not a multiple of G = {n}")
    runs = [experiences[k:k + n] for k in range(0, len(experiences), n)]
    for k, run in enumerate(runs):
        if len({(e.prompts[0], e.labels[0]) for e in run}) != 1:
            raise RuntimeError(f"{what}: group {k} holds responses to different prompts")
    return runs


def draw_round(generator, pools: List, wanted: Dict[int, int], generate_kwargs) -> None:
    """One more round: ``wanted[k]`` responses for pool k, through OpenRLHF's dispatch (one call per round size, so
    the engines get every request of the round at once), added to each pool in draw order. A pool is anything with
    the ``prompt``, ``label`` and ``image`` to send and an ``add(experience)``: a `Pool`, or a group of Knapsack RL's
    (`knapsack.Group`)."""
    import ray

    by_size = defaultdict(list)
    for k, size in wanted.items():
        by_size[size].append(k)
    calls = []
    for size, ks in by_size.items():
        refs = generator._dispatch_prompts_to_vllm([pools[k].prompt for k in ks], [pools[k].label for k in ks],
                                                   images=[pools[k].image for k in ks],
                                                   **{**generate_kwargs, "n_samples_per_prompt": size})
        calls.append((ks, refs))
    for ks, refs in calls:
        for k, responses in zip(ks, ray.get(refs)):
            for r in responses:
                pools[k].add(generator._process_response_into_experience(r, **generate_kwargs))
