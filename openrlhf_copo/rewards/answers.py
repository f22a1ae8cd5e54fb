"""Final-answer extraction and stable answer ids (pure Python, no math-verify, no torch).

The consistency entropy needs to know which responses gave *the same* answer. Two rules:

- The id of an answer is derived from its canonical mathematical form (see
  `openrlhf_copo.rewards.verifier.canonical_form`), so `\\frac{1}{2}`, `0.5` and `1/2` share one
  id. The released code clusters by exact normalized string instead; equivalence clustering is
  stricter about what "consistent" means.
- A response with no extractable answer is its own answer: its id is derived from its text,
  so G rambling responses count as G different answers (high entropy, local optimization
  dominates), not as one confident answer. This matches the released code, where the
  unparsed tail text of such a response becomes its "answer".

Ids are 63-bit integers from BLAKE2b (never Python's salted `hash()`): identical in every
process and machine, and exact through `torch.tensor([id])` (int64).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
from typing import Optional

__all__ = ["extract_answer", "stable_id", "response_text", "model_text", "STOP_TOKENS_ENV"]

# ---------------------------------------------------------------------------------------------
# 1. The response as the model wrote it.
#
# OpenRLHF hands the reward `decode(prompt + response ids, skip_special_tokens=False)`, and vLLM keeps
# the stop token in the sampled ids: a response arrives as "...Answer: -7<|endoftext|>". `evaluate`
# sees vLLM's `text`, without special tokens. Both must read the same answer, so the text is cut at
# the first end-of-turn token and any other special token is dropped.

#: End-of-turn / end-of-text tokens of the chat templates users train with: Qwen2.5 and SmolLM2
#: (ChatML), Llama 3, Phi-3, GPT-2 style, Mistral / Llama 2, Gemma, DeepSeek, gpt-oss.
END_OF_TURN_TOKENS = (
    "<|im_end|>", "<|endoftext|>", "<|end_of_text|>", "<|eot_id|>", "<|eom_id|>", "<|end|>", "<|return|>",
    "</s>", "<eos>", "<end_of_turn>", "<\uff5cend\u2581of\u2581sentence\uff5c>", "<|end\u2581of\u2581sentence|>",
)
#: The driver puts the actor tokenizer's own EOS tokens here (a JSON list), for templates not above.
STOP_TOKENS_ENV = "COPO_STOP_TOKENS"
# Other special tokens of those families (<|im_start|>, <|start_header_id|>, <|channel|>, ...): dropped,
# not cut at, since some formats (gpt-oss) put them before the final answer. Names of 3+ letters, so
# that math such as "1<|x|>0" is left alone.
_OTHER_SPECIAL = re.compile(r"<\|[A-Za-z_][A-Za-z0-9_\u2581]{2,40}\|>|<\uff5c[^\uff5c<>]{1,40}\uff5c>")


@functools.lru_cache(maxsize=8)
def _end_of_turn_pattern(extra: str) -> "re.Pattern[str]":
    tokens = set(END_OF_TURN_TOKENS)
    if extra:
        try:
            tokens.update(t for t in json.loads(extra) if isinstance(t, str) and t.strip())
        except ValueError:
            pass  # a malformed variable must not cost a reward; the built-in list still applies
    return re.compile("|".join(re.escape(t) for t in sorted(tokens, key=len, reverse=True)))


def tokenizer_stop_tokens(model_path: str) -> list:
    """The end-of-turn strings of a model: its tokenizer's EOS token and every `eos_token_id` of its
    generation config (Llama 3 Instruct stops on three), as decoded text. For `STOP_TOKENS_ENV`."""
    from transformers import AutoTokenizer, GenerationConfig

    tokenizer = AutoTokenizer.from_pretrained(model_path, trust_remote_code=True)
    ids = set()
    try:
        eos = GenerationConfig.from_pretrained(model_path).eos_token_id
        ids.update(eos if isinstance(eos, (list, tuple)) else [eos] if eos is not None else [])
    except (OSError, ValueError):
        pass  # no generation_config.json
    tokens = {tokenizer.eos_token} | {tokenizer.convert_ids_to_tokens(int(i)) for i in ids}
    return sorted(t for t in tokens if isinstance(t, str) and t)


def model_text(response: str) -> str:
    """``response`` up to its first end-of-turn token, other special tokens removed.

    The same for `decode(ids, skip_special_tokens=False)` (OpenRLHF's reward input) and vLLM's
    `text` of the same ids (what `evaluate` scores)."""
    m = _end_of_turn_pattern(os.environ.get(STOP_TOKENS_ENV, "")).search(response)
    if m:
        response = response[: m.start()]
    return _OTHER_SPECIAL.sub("", response)


# ---------------------------------------------------------------------------------------------
# 2. Its final answer.

# "Answer: 42" anywhere (the DAPO-Math prompt asks for "Answer: $Answer" on the last line, and
# DAPO's reference reward takes the last "Answer:" of the response's tail), in markdown too:
# "**Answer:** 12", "**Final Answer**: 12", "Compute: 6*7. Answer: 42".
_ANSWER_COLON = re.compile(r"answer\s*(?:\*\*|__)?\s*[:\uff1a]", re.IGNORECASE)
_ANSWER_IS = re.compile(r"\bthe\s+(?:final\s+)?answer\s+is\s*[:\uff1a]?\s*([^\n]+)", re.IGNORECASE)
# The "final number" rule (lm-eval's flexible extract), an option for models that follow no answer format:
# the last number written, with thousands separators, decimals or a fraction.
_NUMBER = re.compile(r"-?\d+(?:,\d{3})*(?:\.\d+)?(?:\s*/\s*\d+)?")
# Longest answer we consider: a longer "answer" is not a final answer, and math-verify's
# parsing time grows with length.
MAX_ANSWER_CHARS = 512


_BOX_TAG = re.compile(r"\\(?:boxed|fbox)")


def _last_boxed(text: str) -> Optional[str]:
    """Content of the last balanced `\\boxed{...}` / `\\fbox{...}` (or `\\boxed 5`), or None.

    One pass matches every brace, so even a response of thousands of unbalanced boxes costs
    linear time.
    """
    tags = [m.end() for m in _BOX_TAG.finditer(text)]
    if not tags:
        return None
    closing, stack = {}, []
    for j, c in enumerate(text):
        if c == "{":
            stack.append(j)
        elif c == "}" and stack:
            closing[stack.pop()] = j
    for end in reversed(tags):
        rest = text[end:]
        stripped = rest.lstrip()
        if stripped.startswith("{"):
            i = end + (len(rest) - len(stripped))
            if i in closing:
                return text[i + 1 : closing[i]]
        elif rest[:1].isspace():  # "\boxed 5"
            m = re.match(r"\s+([^\s$]+)", rest)
            if m:
                return m.group(1)
    return None


_EMPHASIS = re.compile(r"^(?:\*\*|__|\*|_)+|(?:\*\*|__|\*|_)+$")
_MATH_DELIMITERS = (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]"))


def _clean(ans: str) -> str:
    """Strip what surrounds an answer but is not part of it: markdown emphasis (`**42**`), math
    delimiters (`$42$`, `\\(42\\)`), a final period, and repeats of these (`**$42$**.`)."""
    before = None
    while ans != before:
        before = ans
        ans = ans.strip().rstrip(".\u3002").strip()
        ans = _EMPHASIS.sub("", ans).strip()
        for left, right in _MATH_DELIMITERS:
            if len(ans) >= len(left) + len(right) and ans.startswith(left) and ans.endswith(right):
                ans = ans[len(left) : len(ans) - len(right)]
    return ans


def extract_answer(response: str, *, last_number: bool = False) -> Optional[str]:
    """The final answer of a response, or None when it has none. THE rule, for training, in-training
    evaluation and `evaluate` alike.

    1. Read the response as the model wrote it (`model_text`: cut at the first end-of-turn token).
    2. Take the last `\\boxed{}` (or `\\fbox{}`), else the rest of the line after the last "Answer:"
       anywhere (also "Final Answer:", "**Answer:**"; a box inside it wins), else the last
       "the answer is ...".
    3. Strip markdown emphasis, `$`/`\\(`/`\\[` delimiters and a final period. Empty or over-long
       (> MAX_ANSWER_CHARS) candidates count as no answer.

    With ``last_number`` (the reward option `math_last_number_reward.py`, `evaluate --answer_rule
    last_number`), a response that has none of the forms of step 2 answers with its last number.
    """
    if not response:
        return None
    response = model_text(response)
    candidate = _last_boxed(response)
    if candidate is None:
        last = None
        for last in _ANSWER_COLON.finditer(response):
            pass
        if last is not None:  # the rest of its line (or the next line, after "Answer:\n")
            candidate = response[last.end() :].lstrip().split("\n", 1)[0]
            inner = _last_boxed(candidate)
            candidate = inner if inner is not None else candidate
    if candidate is None:
        said = _ANSWER_IS.findall(response)
        if said:
            candidate = said[-1]
    if candidate is None and last_number:
        numbers = _NUMBER.findall(response)
        if numbers:
            candidate = numbers[-1]
    if candidate is None:
        return None
    candidate = _clean(candidate)
    if not candidate or len(candidate) > MAX_ANSWER_CHARS:
        return None
    return candidate


def stable_id(text: str) -> int:
    """A 63-bit non-negative id for ``text``: same in every process, exact as int64."""
    digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "big") & ((1 << 63) - 1)


def response_text(query: str, prompt: str) -> str:
    """The response part of OpenRLHF's `query` (prompt + response, decoded with special tokens).

    The answer must come from the response only: instructions such as "put the answer in
    \\boxed{}" live in the prompt.
    """
    if prompt and query.startswith(prompt):
        return query[len(prompt) :]
    if prompt:
        # Decoding can differ from the prompt string in whitespace or special tokens; anchor
        # on the prompt's tail instead.
        tail = prompt[-64:]
        k = query.rfind(tail)
        if k != -1:
            return query[k + len(tail) :]
    return query
