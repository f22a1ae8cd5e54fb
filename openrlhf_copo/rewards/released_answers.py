"""The answer *string* the authors' released COPO code puts into the consistency entropy (pure Python, no math-verify).

The released code (github.com/hijih/copo-code, a patched verl) scores a response in
`verl/utils/reward_score/multi-reward.py` (`accuracy_reward`, returned by `compute_score` as `extract_answer`), and
`verl/trainer/ppo/core_algos.py` (`compute_score_global`) takes the entropy of the group's answers with a Counter
over those exact strings: its sympy canonicalization (`canonicalize_expressions`) is written but its call is
commented out, so `1/2` and `2/4` are two answers there, where `copo_answer_id` makes them one. This module
rewrites, from the facts of that file, how it gets the string (`released_answer_string`), so that
`--copo.answer_buckets string` can reproduce their entropy.

The steps, each a function below, in the released code's order:

1. `answer_text`: the text after the first `\\text{Answer:}`, else after the last `Answer:` or `answer is` (any case),
   else `strip_box_dollar_units` of the whole response (its last `\\boxed{}`, or the response itself);
2. `strip_box_dollar_units` of that text (again): the content of its last balanced `\\boxed{...}`, then the text after
   its last `$` (unless that `$` ends the text), `\\text{m}` -> `\\text{}`, and `REMOVED_SUBSTRINGS` (unit words,
   `\\text{}`, `^\\circ`, ...) deleted wherever they occur, even inside words;
3. `clean_latex`, then every white space removed: `\\frac{a}{b}` -> `(a)/(b)`, `\\text{x}` / `\\boxed{x}` -> `x`,
   `\\left` `\\right` dropped, `\\cdot` `\\times` -> `*`, then `] } $ % * ,` and new lines removed;
4. if that leaves nothing, the answer is step 2 applied to the whole response, *without* step 3 (white space stays);
5. lower case; and for a wrong answer `true` -> `1`, `false` -> `0`, then every `\\` `(` `)` removed.

Verified on the two stored versions of that file (commits 9ddd4cba and c15c75f5: the same code, the second without
its Chinese comments and commented-out tail) and on `dapo-code/verl/utils/reward_score/multi-reward.py` (dfe989da:
the same string; it only normalizes Persian/Arabic digits inside the correctness check, not in the string).
`verl/utils/reward_score/reward_for_test.py` is an older, different rule (only a case-sensitive `Answer:`), not
followed here.

Where this module knowingly differs from the released code:

- "wrong" (step 5) is the caller's verdict (`score_responses` passes this project's math-verify verdict on its own
  extracted answer). The released code strips a response when its *first* check (math-verify on the cleaned string,
  label not boxed) fails, even if its second check, on the stripped string, then passes: such a response is
  correct here but stripped there, and a response the two verdicts disagree on gets the other form.
- Nothing else in `released_answer_string`. Its dead branches are left out: a `None` answer cannot occur, and the
  `(A)`-choice search runs after every parenthesis was removed, so it never matches.
- Nothing else: a response in which the released code finds no answer (`released_found_answer` False) gets what
  it gets there, the response's own text cleaned and lower-cased, or only its part after its last `$` when it has
  one that does not end it. Two rambling responses that both end in `... $x = 2$.` are then one answer (`.`), as
  there: `--copo.answer_buckets string` reproduces their entropy, quirks included; `copo_answer_id` (the default
  buckets) keeps such responses apart.
"""

from __future__ import annotations

import re
from typing import Tuple


__all__ = ["released_answer_string", "released_found_answer", "answer_text",
           "strip_box_dollar_units", "clean_latex", "REMOVED_SUBSTRINGS"]

#: Deleted, in this order, wherever they occur (the released file's `REMOVED_EXPRESSIONS`): unit and filler words,
#: as substrings ("issue" loses its "sue", "3cm" becomes "3"), empty `\text{}` forms, degree marks, thin spaces,
#: ellipses, quotes. The order matters: `\text{}^2` goes before `\text{}`.
REMOVED_SUBSTRINGS = (
    "tables", "pints", "miles", "square", "ways", "integers", "dollars", "mph", "inches", "hours", "km", "units",
    "\\ldots", "sue", "points", "feet", "minutes", "digits", "cents", "degrees", "cm", "gm", "pounds", "meters",
    "meals", "edges", "students", "childrentickets", "multiples",
    "\\text{s}", "\\text{.}", "\\text{\ns}", "\\text{}^2", "\\text{}^3", "\\text{\n}", "\\text{}",
    "\\mathrm{th}", "^\\circ", "^{\\circ}", "\\;", ",\\!", "{,}", '"', "\\dots",
)

# Step 1's markers: the first "\text{Answer:}" wins outright; else the last "Answer:" / "answer is".
_TEXT_ANSWER = re.compile(r"\\text\{answer:\s*\}", re.IGNORECASE)
_ANSWER_MARK = re.compile(r"answer:|answer is", re.IGNORECASE)
_BOX = "\\boxed{"
# clean_latex's patterns: enclosing $ / $$ of a one-line answer; brace-free \boxed{}, \text{} and \frac{}{};
# an inline "\( 12 \)"; a backslash (and white space) ending the text.
_ENCLOSING_DOLLARS = re.compile(r"^\s*\$\$?(.*?)\$\$?\s*$")
_FLAT_BOXED = re.compile(r"\\boxed\{([^{}]+)\}")
_FLAT_TEXT = re.compile(r"\\text\{([^{}]+)\}")
_FLAT_FRAC = re.compile(r"\\frac\{([^{}]+)\}\{([^{}]+)\}")
_INLINE_INTEGER = re.compile(r"\\\(\s*(\d+)\s*\\\)")
_TRAILING_BACKSLASH = re.compile(r"\\\s*$")
_WHITE_SPACE = re.compile(r"\s+")


def _last_box(text: str) -> Tuple[str, bool]:
    """(content of the last ``\\boxed{...}``, True), or (``text``, False) when it has none or it is unclosed.

    As the released `last_boxed_only_string` + `remove_boxed`: braces are counted from that last `\\boxed{`, every
    `{` and `}` (escaped ones too). An unclosed box leaves the text whole, unboxed only if it both starts with
    `\\boxed{` and ends with `}`."""
    start = text.rfind(_BOX)
    if start >= 0:
        depth = 0
        for i in range(start, len(text)):
            if text[i] == "{":
                depth += 1
            elif text[i] == "}":
                depth -= 1
                if depth == 0:
                    return text[start + len(_BOX): i], True
    if text.startswith(_BOX) and text.endswith("}"):
        return text[len(_BOX): -1], False
    return text, False


def _after_last_dollar(text: str) -> str:
    """As the released `last_dollar_only_string` + `remove_dollar`: the text after its last `$` (stripped) unless
    there is none or it is the last character; then a text that starts and ends with `$` loses both."""
    i = text.rfind("$")
    if 0 <= i < len(text) - 1:
        text = text[i + 1:].strip()
    if len(text) >= 2 and text.startswith("$") and text.endswith("$"):
        text = text[1:-1].strip()
    return text


def _strip_box_dollar_units(text: str) -> Tuple[str, bool]:
    """`strip_box_dollar_units`, and whether a balanced `\\boxed{}` was found."""
    text, boxed = _last_box(text)
    text = _after_last_dollar(text)
    # The released `extract_solution` loops over its SUBSTITUTIONS but rebinds the result from its unchanged input
    # each time, so only the list's last pair, `\text{m}` -> `\text{}`, takes effect ("an ", "a ", " " ... do not).
    text = text.replace("\\text{m}", "\\text{}")
    for s in REMOVED_SUBSTRINGS:
        text = text.replace(s, "")
    return text, boxed


def strip_box_dollar_units(text: str) -> str:
    """The released `extract_solution`: last `\\boxed{}` content, text after the last `$`, `REMOVED_SUBSTRINGS` out."""
    return _strip_box_dollar_units(text)[0]


def _answer_text(response: str) -> Tuple[str, bool]:
    """`answer_text`, and whether the released code found an answer marker or a balanced `\\boxed{}`."""
    m = _TEXT_ANSWER.search(response)
    if m is None:
        marks = list(_ANSWER_MARK.finditer(response))
        m = marks[-1] if marks else None
    if m is not None:
        return response[m.end():].strip(), True
    return _strip_box_dollar_units(response)


def answer_text(response: str) -> str:
    """The released `extract_last_answer_block`: the text after the first `\\text{Answer:}` (any case, white space
    before its `}`), else after the last `Answer:` or `answer is` (any case, also inside "The final answer is"), both
    stripped; else `strip_box_dollar_units(response)`."""
    return _answer_text(response)[0]


def clean_latex(text: str) -> str:
    """The released `preprocess_latex`, step by step (white space inside the text stays; the caller removes it)."""
    text = text.strip()
    for filler in ("(without quotes)", "(without the quotes)", "without the quotes", "without quotes"):
        text = text.replace(filler, "")
    text = _ENCLOSING_DOLLARS.sub(r"\1", text)
    text = _FLAT_BOXED.sub(r"\1", text)
    text = _FLAT_TEXT.sub(r"\1", text)
    text = text.replace("\\left", "").replace("\\right", "")  # also inside \rightarrow, as there
    text = _FLAT_FRAC.sub(r"(\1)/(\2)", text)  # not \dfrac / \tfrac: their "frac" has no backslash before it
    text = text.replace("\\cdot", "*").replace("\\times", "*")
    text = text.replace("\\\\", "\\")
    # Closing brackets and braces go, opening ones stay: "\sqrt{2}" -> "\sqrt{2".
    for s in ("]", "}", "\n", "$", "\\%", "%", "*", ","):
        text = text.replace(s, "")
    inline = _INLINE_INTEGER.findall(text)
    if inline:
        text = inline[-1]
    text = _TRAILING_BACKSLASH.sub("", text)
    return text.strip()


def _released_answer(response: str) -> Tuple[str, bool]:
    """(the answer string before the correctness step, whether the released code found an answer)."""
    text, marked = _answer_text(response)
    text, _ = _strip_box_dollar_units(text)
    answer = _WHITE_SPACE.sub("", clean_latex(text))
    if answer:
        return answer.lower().strip(), marked
    # Nothing left: the released code starts again from the whole response, and skips the LaTeX clean-up.
    return strip_box_dollar_units(response).lower().strip(), False


def _as_wrong(answer: str) -> str:
    """The released code's second try on a wrong answer: `true`/`false` as `1`/`0`, no `\\`, `(` or `)`."""
    answer = {"true": "1", "false": "0"}.get(answer, answer).lower().strip()
    return answer.replace("\\", "").replace("(", "").replace(")", "")


def released_answer_string(response: str, correct: bool) -> str:
    """The string the released code returns as the response's `extract_answer`, the consistency entropy's input.

    ``correct``: the response's verdict, standing for the released code's first math-verify check (see the module
    docstring: the one place this knowingly differs). E.g. "The answer is \\frac{1}{2}" -> "(1)/(2)" if correct,
    "1/2" if wrong; "\\boxed{3 \\text{ cm}}" -> "3"."""
    answer, _ = _released_answer(response)
    return answer if correct else _as_wrong(answer)


def released_found_answer(response: str) -> bool:
    """Whether the released code reads an answer in ``response``: it has a `\\text{Answer:}` / `Answer:` /
    `answer is` marker or a balanced `\\boxed{}`, and what that gives is not empty once cleaned. Otherwise its string
    comes from the response's own text (its tail after the last `$`, or all of it)."""
    return _released_answer(response)[1]
