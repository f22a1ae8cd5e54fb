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
from typing import List, Optional, Tuple

__all__ = ["extract_answer", "answer_value", "stable_id", "response_text", "model_text", "STOP_TOKENS_ENV"]

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
# 2. Its final answer: the last final-answer statement.
#
# A model states its final answer last: "... so 41.\nAnswer: 41" after an intermediate "$\boxed{42}$" means 41,
# and Minerva's "Final Answer: The final answer is $10,455$. I hope it is correct." after a "\boxed{255}" of a
# sub-step means 10,455. So every statement form is a candidate, and the one that starts last wins (verl's DAPO
# reward lets any \boxed beat any "Answer:", which rewards the intermediate 42).

_BOX_TAG = re.compile(r"\\(?:boxed|fbox)")
# "Answer: 42" (the DAPO-Math prompt's last line), in markdown too: "**Answer:** 12", "**Final Answer**: 12".
_ANSWER_COLON = re.compile(r"answer\s*(?:\*\*|__)?\s*[:\uff1a]", re.IGNORECASE)
# "the answer is 5", "The final answer is $7.78$. I hope it is correct." (Minerva), "my final answer is: 5".
_ANSWER_IS = re.compile(r"\b(?:(?:the|my|our)\s+(?:final\s+)?|final\s+)answer\s+is\s*[:\uff1a]?", re.IGNORECASE)
# The "final number" rule (lm-eval's flexible extract), an option for models that follow no answer format:
# the last number written, with thousands separators, decimals or a fraction.
_NUMBER = re.compile(r"-?\d+(?:,\d{3})*(?:\.\d+)?(?:\s*/\s*\d+)?")
# What may stand between the boxes (or $...$ pieces) of one answer: "\boxed{1}, \boxed{2} and \boxed{3}".
_JOINER = re.compile(r"(?:\s|\$|\\quad|\\qquad|\\[,;! ]|\\text\{\s*(?:,|and|or)?\s*\}|,|;|\band\b|\bor\b)*", re.IGNORECASE)
#: At most this many boxes form one answer (math-verify joins up to 6; a list of 12 roots is still one answer).
MAX_JOINED = 12
_MATH_OPEN = (("$$", "$$"), ("\\[", "\\]"), ("$", "$"), ("\\(", "\\)"))
# The end of the sentence that states an answer: a period followed by white space or the end ("7.78. I hope").
_SENTENCE_END = re.compile(r"\.(?=\s|$)")


def _brace_pairs(text: str) -> dict:
    """{index of "{": index of its matching "}"} for the whole text, in one linear pass."""
    closing, stack = {}, []
    for j, c in enumerate(text):
        if c == "{":
            stack.append(j)
        elif c == "}" and stack:
            closing[stack.pop()] = j
    return closing


def _boxes(text: str) -> List[Tuple[int, int, str]]:
    """Every `\\boxed{...}` / `\\fbox{...}` (or `\\boxed 5`) as (start, end, content), in order. Linear time,
    even on thousands of unbalanced boxes; an unclosed box is skipped."""
    tags = list(_BOX_TAG.finditer(text))
    if not tags:
        return []
    closing = _brace_pairs(text)
    found = []
    for tag in tags:
        rest = text[tag.end():]
        stripped = rest.lstrip()
        if stripped.startswith("{"):
            i = tag.end() + (len(rest) - len(stripped))
            if i in closing:
                found.append((tag.start(), closing[i] + 1, text[i + 1: closing[i]]))
        elif rest[:1].isspace():  # "\boxed 5"
            m = re.match(r"\s+([^\s$]+)", rest)
            if m:
                found.append((tag.start(), tag.end() + m.end(), m.group(1)))
    return found


def _joined(pieces: List[str]) -> str:
    """Several boxes (or math pieces) of one statement as one answer, the way math-verify reads
    "\\boxed{1}, \\boxed{2}, \\boxed{3}": the set {1, 2, 3}."""
    return pieces[0] if len(pieces) == 1 else ", ".join(p.strip() for p in pieces)


def _box_statement(text: str, boxes: List[Tuple[int, int, str]], k: int) -> str:
    """The answer of box ``k`` with the boxes just before it that belong to the same statement."""
    pieces = [boxes[k][2]]
    while k > 0 and len(pieces) < MAX_JOINED:
        gap = text[boxes[k - 1][1]: boxes[k][0]]
        if not gap or _JOINER.fullmatch(gap) is None or not re.search(r"[,;]|and|or", gap, re.IGNORECASE):
            break
        k -= 1
        pieces.insert(0, boxes[k][2])
    return _joined(pieces)


def _math_piece(text: str) -> Optional[Tuple[str, int]]:
    """(content, end) of the math environment ``text`` opens with ($$..$$, \\[..\\], $..$, \\(..\\)), or None."""
    for left, right in _MATH_OPEN:
        if text.startswith(left):
            j = text.find(right, len(left))
            if j > len(left) and (left in ("$$", "\\[") or "\n" not in text[len(left): j]):
                return text[len(left): j], j + len(right)
            return None
    return None


def _stated(tail: str) -> str:
    """What follows "Answer:" or "the answer is": the math it opens with (several pieces joined, across lines for
    display math), else the rest of its line up to the end of its sentence ("7.78. I hope it is correct." -> 7.78)."""
    tail = tail.lstrip(" \t*_")
    if tail.startswith("\n"):  # "Answer:\n42"
        tail = tail.lstrip()
    piece = _math_piece(tail)
    if piece is not None:
        pieces, end = [piece[0]], piece[1]
        while len(pieces) < MAX_JOINED:
            sep = re.match(r"\s*(?:,|;|\band\b|\bor\b)\s*", tail[end:], re.IGNORECASE)
            nxt = _math_piece(tail[end + sep.end():]) if sep else None
            if nxt is None:
                break
            pieces.append(nxt[0])
            end += sep.end() + nxt[1]
        return _joined(pieces)
    line = tail.split("\n", 1)[0]
    m = _SENTENCE_END.search(line)
    return line[: m.start()] if m else line


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
    2. Its final-answer statements are every `\\boxed{}` / `\\fbox{}`, every "Answer:" (also "Final Answer:",
       "**Answer:**") and every "the (final) answer is"; the one that **starts last** gives the answer
       (a box inside an "Answer:" line starts after it, so the box wins there).
       - a box: its content; boxes just before it joined by commas / "and" / "or" are one answer
         (`\\boxed{1}, \\boxed{2}` -> `1, 2`, which math-verify reads as the set {1, 2});
       - "Answer:" / "the answer is": the math it opens with (`$...$`, `\\(...\\)`, display math across lines;
         pieces joined by commas / "and" likewise), else the rest of its line up to the end of the sentence,
         so Minerva's "The final answer is 7.78. I hope it is correct." gives 7.78.
       A statement that gives nothing (an empty `\\boxed{}`, a bare "Answer:") yields to the one before it.
    3. Strip markdown emphasis, `$`/`\\(`/`\\[` delimiters and a final period. There is no length limit: a long
       final line is still the answer (the verifier's deadline bounds the work, not the line).

    With ``last_number`` (the reward option `math_last_number_reward.py`, `evaluate --answer_rule
    last_number`), a response that has none of the forms of step 2 answers with its last number.
    """
    if not response:
        return None
    response = model_text(response)
    boxes = _boxes(response)
    # (start, how to read it): boxes, "Answer:" markers and "the answer is" phrases, in one list.
    statements: List[Tuple[int, object]] = [(b[0], k) for k, b in enumerate(boxes)]
    statements += [(m.start(), m.end()) for m in _ANSWER_COLON.finditer(response)]
    statements += [(m.start(), m.end()) for m in _ANSWER_IS.finditer(response)]
    statements.sort(key=lambda s: s[0])
    box_starts = {b[0] for b in boxes}
    for start, how in reversed(statements):
        if start in box_starts and isinstance(how, int):
            candidate = _box_statement(response, boxes, how)
        else:
            candidate = _stated(response[how:])
        candidate = _clean(candidate)
        if candidate:
            return candidate
    if last_number:
        numbers = _NUMBER.findall(response)
        if numbers:
            return _clean(numbers[-1]) or None
    return None


# ---------------------------------------------------------------------------------------------
# 3. Its value: what the verdict and the id are computed from.
#
# The same text rules for the extracted answer and for the label, in pure Python, before math-verify sees either.

_TEXT_WRAPPER = re.compile(r"^\\(?:text|textbf|textrm|mathrm|mbox|mathbf)\s*\{(.*)\}$", re.DOTALL)
# A number grouped in thousands by a space, a thin space or a braced comma: "1 000", "1\,000", "1{,}000",
# "12~345". Not "0,111" (math-verify reads a decimal comma there) and not "1,5".
_THOUSANDS = re.compile(r"^([+-]?)([1-9]\d{0,2})((?:(?:\\[,;: !]|\{,\}|~|\s|,)\d{3})+)(\.\d+)?$")
_THOUSANDS_SEP = re.compile(r"\\[,;: !]|\{,\}|~|\s|,")
# A top-level "=" that is an equals sign (not "<=", ">=", "!=", ":=" or "==").
_RELATION_NEIGHBOURS = set("<>!:=")
# LaTeX commands that stand for numbers or arithmetic, allowed in a numeric side.
_NUMERIC_COMMANDS = re.compile(r"\\(?:[dt]?frac|sqrt|times|cdot|div|pi|left|right|pm|mp|%|,|!|;|quad|qquad|cdots?|ldots?)"
                               r"(?![A-Za-z])")


def _top_level(text: str):
    """(index, character) of each character of ``text`` outside (), [], {} and |..| (the brackets themselves aside)."""
    depth, bars = 0, 0
    for i, c in enumerate(text):
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth = max(0, depth - 1)
        elif c == "|":
            bars ^= 1
        elif depth == 0 and not bars:
            yield i, c


def _top_level_sides(text: str) -> List[str]:
    """``text`` split at its equals signs that are outside (), [], {} and |..|."""
    sides, start = [], 0
    for i, c in _top_level(text):
        if (c == "=" and (i == 0 or text[i - 1] not in _RELATION_NEIGHBOURS) and text[i + 1: i + 2] != "="
                and text[max(0, i - 4): i] != "\\neq"):
            sides.append(text[start:i])
            start = i + 1
    sides.append(text[start:])
    return [s.strip() for s in sides]


def _is_numeric(side: str) -> bool:
    """A side made of numbers and arithmetic only (`6 \\times 7`, `\\frac{3}{4}`, `(3, 2)`, `2\\pi`): no variable."""
    rest = _NUMERIC_COMMANDS.sub("", side)
    return bool(re.search(r"\d", side)) and not re.search(r"[A-Za-z\\]", rest)


def _is_name(side: str) -> bool:
    """A side that names the quantity asked for rather than computing it: `x`, `f(2)`, `a_{10}`, `|AB|`, `(p, q)`,
    `\\angle ABC`, `P(A)`: no arithmetic and no digit outside brackets, sub- and superscript groups."""
    if not side or not re.search(r"[A-Za-z]", side):
        return False
    if any(c in "+-*/^" or (c.isdigit() and side[i - 1: i] != "_") for i, c in _top_level(side)):
        return False
    return not re.search(r"\\(?:times|cdot|div|frac|dfrac|tfrac)(?![A-Za-z])", side)


@functools.lru_cache(maxsize=4096)  # a label's value is asked for once per response of its group
def answer_value(text: str) -> str:
    """The part of an answer (or a label) that is compared and identified:

    - an equation or chain whose final side is a number (or a tuple / set of numbers), and whose other sides name
      the quantity (`x`, `|AB|`, `(p,q)`, `f(2)`) or compute it (`6 \\times 7`): that final side, so
      `6 \\times 7 = 42` is 42 and `x = 5+5+1 = 7 = 11` is 11 (math-verify would read a sympy truth value here);
      an equation with arithmetic on its left (`x^2 + y^2 = 1`) stays an equation;
    - a whole answer in `\\text{}` (`\\textbf`, `\\mathrm`, `\\mbox`): its content, so `\\text{odd}` is `odd`;
    - a number grouped in thousands by a space, `\\,`, `{,}` or `~`: its digits (`1 000` -> `1000`).

    Math delimiters and emphasis around it go first (a label written `$(1, \\frac{9}{2})$` is `(1, \\frac{9}{2})`).
    """
    text = _clean(text)
    sides = _top_level_sides(text)
    if len(sides) > 1 and _is_numeric(sides[-1]) and all(_is_numeric(s) or (i == 0 and _is_name(s))
                                                          for i, s in enumerate(sides[:-1])):
        text = sides[-1]
    m = _TEXT_WRAPPER.match(text)
    if m and "{" not in m.group(1).replace("\\{", ""):
        text = m.group(1).strip()
    m = _THOUSANDS.match(text)
    if m:
        text = m.group(1) + m.group(2) + _THOUSANDS_SEP.sub("", m.group(3)) + (m.group(4) or "")
    return text


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
