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

import hashlib
import re
from typing import Optional

__all__ = ["extract_answer", "stable_id", "response_text", "NO_ANSWER_PREFIX"]

NO_ANSWER_PREFIX = "noanswer:"

# "Answer: 42" on its own line: the DAPO-Math prompt asks for "The last line of your response
# should be of the form Answer: $Answer". Also accepts "The answer is 42".
_ANSWER_LINE = re.compile(r"(?:^|\n)[ \t*#>]*(?:final\s+)?answer\s*[:：]\s*([^\n]+)", re.IGNORECASE)
_ANSWER_IS = re.compile(r"\bthe\s+(?:final\s+)?answer\s+is\s*[:：]?\s*([^\n]+)", re.IGNORECASE)
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


def _clean(ans: str) -> str:
    ans = ans.strip()
    # "$42$." / "42." -> "42"
    ans = ans.strip().rstrip(".").strip()
    if len(ans) >= 2 and ans.startswith("$") and ans.endswith("$"):
        ans = ans.strip("$").strip()
    return ans


def extract_answer(response: str) -> Optional[str]:
    """The final answer of a response, or None when it has none.

    Order: the last `\\boxed{}` (or `\\fbox{}`), else the last "Answer: ..." line (the
    DAPO-Math prompt's form), else the last "the answer is ...". Empty or over-long
    (> MAX_ANSWER_CHARS) candidates count as no answer.
    """
    if not response:
        return None
    candidate = _last_boxed(response)
    if candidate is None:
        lines = _ANSWER_LINE.findall(response)
        if lines:
            candidate = lines[-1]
            inner = _last_boxed(candidate)
            candidate = inner if inner is not None else candidate
    if candidate is None:
        said = _ANSWER_IS.findall(response)
        if said:
            candidate = said[-1]
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
