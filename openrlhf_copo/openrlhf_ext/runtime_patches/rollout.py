"""Patches 7 and 9: what the vLLM engines get with each prompt, and what each response carries back.

7. the rollout executors' `execute` (`openrlhf.utils.agent`, in the vLLM engine actors): each response carries
   the seed of the engine that sampled it, so that the advantage step can report how many engines fed the batch
   and the weight-sync logprob gap of each engine; with `--copo.seeded_rollouts`, each sampled response gets its
   own vLLM seed (`seeded_sampling_params`), so that two methods from the same model draw the same responses;
9. `SamplesGenerator._dispatch_prompts_to_vllm`: the tokenizer that OpenRLHF sends along with every prompt
   travels as its path (`TokenizerByPath`), loaded once per vLLM engine process.
"""

from __future__ import annotations

import functools
import hashlib
import os

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
                    kwargs["sampling_params"] = seeded_sampling_params(kwargs["sampling_params"], kwargs.get("prompt"))
                output = await original(self, *args, **kwargs)
                engine = kwargs["llm_engine"] if "llm_engine" in kwargs else args[5]
                seed = getattr(engine, "kwargs", {}).get("seed")
                if seed is not None and isinstance(output, dict):
                    output["extra_logs"] = {**(output.get("extra_logs") or {}), ROLLOUT_ENGINE_SEED: int(seed)}
                return output

            setattr(execute, PATCHED_ATTR, True)
            return execute

        cls.execute = patched(original)


#: How many responses this process has sampled for each prompt (by hash) under `--copo.seeded_rollouts`.
_draws: dict = {}


def seeded_sampling_params(sampling_params, prompt):
    """With `--copo.seeded_rollouts` (ROLLOUT_SEED_ENV set in every worker): a copy of ``sampling_params`` whose
    seed is a hash of the run's seed, the prompt and the number of responses this engine process sampled for
    that prompt before; ``sampling_params`` itself when the option is off, the sampling is greedy, or it has a
    seed already.

    Why: vLLM samples a batch from one generator per engine, so the response a request gets depends on what else
    is in the batch and when it arrived, and OpenRLHF sends each of the G samples of a prompt as its own
    asynchronous request: two runs from the same model with the same --train.seed draw different first rollout
    batches. With a seed per request, the i-th response to a prompt is the same in both (up to floating-point
    differences between batch shapes), which is what a paired comparison of methods needs."""
    run_seed = os.environ.get(ROLLOUT_SEED_ENV)
    if run_seed is None or getattr(sampling_params, "seed", None) is not None or not sampling_params.temperature > 0:
        return sampling_params
    key = hashlib.sha256(str(prompt).encode()).digest()[:8]
    draw = _draws.get(key, 0)
    _draws[key] = draw + 1
    params = sampling_params.clone()
    params.seed = int.from_bytes(hashlib.sha256(f"{run_seed}:{draw}:".encode() + key).digest()[:4], "little") >> 1
    return params


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
    OpenRLHF sends the tokenizer itself with every prompt."""
    from openrlhf.trainer.ppo_utils.samples_generator import SamplesGenerator

    original = SamplesGenerator._dispatch_prompts_to_vllm
    if getattr(original, PATCHED_ATTR, False):
        return
    check_symbol("openrlhf.trainer.ppo_utils.samples_generator", "SamplesGenerator._dispatch_prompts_to_vllm")

    @functools.wraps(original)
    def _dispatch_prompts_to_vllm(self, *args, **kwargs):
        tokenizer = self.tokenizer
        self.tokenizer = TokenizerByPath.of(tokenizer)  # read by the original's `.remote(hf_tokenizer=...)` only
        try:
            return original(self, *args, **kwargs)
        finally:
            self.tokenizer = tokenizer

    setattr(_dispatch_prompts_to_vllm, PATCHED_ATTR, True)
    SamplesGenerator._dispatch_prompts_to_vllm = _dispatch_prompts_to_vllm
