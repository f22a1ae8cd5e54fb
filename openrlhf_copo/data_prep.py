"""Turn the paper's math data sets into OpenRLHF prompt/label jsonl.

Each written line is one prompt row::

    {"prompt": [{"role": "user", "content": "<templated question>"}], "label": "<answer>",
     "datasource": "<source>", "id": <the data set's own id, or the row index>}

read by training with ``--data.input_key prompt --data.label_key label --data.apply_chat_template``
(``datasource`` is the key by which OpenRLHF's in-training evaluation splits its metrics)
and by `openrlhf_copo.evaluation.evaluate.load_rows`.

Input layouts (column names are matched case-insensitively; `.parquet`, `.json` (a list of
objects or ``{"data": [...]}``), `.jsonl`, or a Hugging Face data set via `datasets.load_dataset`):

- ``dapo_math_17k`` (BytedTsinghua-SIA/DAPO-Math-17k, parquet): ``prompt`` is a one-turn chat
  ``[{"content": ..., "role": "user"}]`` whose content is the problem wrapped in DAPO's
  instruction (`DAPO_PREFIX` + problem + `DAPO_SUFFIX`); ``reward_model`` is
  ``{"ground_truth": ..., "style": ...}``; ``extra_info`` is ``{"index": <uuid>}``. The problem
  is recovered by stripping the wrapper, so either template can be applied. The published file
  repeats each problem many times: rows with the same (question, label) are written once.
- ``math500`` (HuggingFaceH4/MATH-500): ``problem``, ``answer`` (LaTeX, kept as is), ``unique_id``.
- ``aime24``: Maxwell-Jia/AIME_2024 (``ID``, ``Problem``, ``Answer`` as int) or
  HuggingFaceH4/aime_2024 (``id``, ``problem``, ``answer`` as str).
- ``aime25``: opencompass/AIME2025 (``question``, ``answer``) or ``problem``/``answer``.
  AIME answers become plain integer strings ("033" and 33 -> "33").
- ``gsm8k`` (openai/gsm8k): ``question``, ``answer`` = worked solution ending in ``#### 72``;
  the label is the text after the last ``####`` with thousands commas removed ("1,000" -> "1000").

Templates: one pair, used identically for training and evaluation prompts, as in the paper:
``boxed`` (default) appends the embedded demo's `INSTRUCTION` ("Please reason step by step, and
put your final answer within \\boxed{}."), which the reward's boxed-answer extraction reads;
``dapo`` wraps the question in DAPO-Math's own "Answer: $Answer" instruction.

Every label is checked with the reward's own test (`verifier.label_parses`: math-verify
turns it into a mathematical object). A row that fails is not written (it could only score 0)
but listed in ``OUT.rejected.jsonl`` with the reason. Input that does not fit (unknown
extension, no question / answer column, no rows) raises `DataPrepError` with a one-line reason
naming the file, before anything is written; the output is replaced atomically.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

from openrlhf_copo.files import atomic_path, jsonl_rows
from openrlhf_copo.cpu_demo.data import INSTRUCTION
from openrlhf_copo.rewards.verifier import label_parses

__all__ = ["DAPO_PREFIX", "DAPO_SUFFIX", "TEMPLATES", "SOURCES", "DataPrepError", "Report", "load_records",
           "prepare", "dapo_question"]

DAPO_PREFIX = ("Solve the following math problem step by step. The last line of your response should be of the "
               "form Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n")
DAPO_SUFFIX = '\n\nRemember to put your answer on its own line after "Answer:".'

TEMPLATES: Dict[str, Callable[[str], str]] = {
    "boxed": lambda q: f"{q}\n\n{INSTRUCTION}",
    "dapo": lambda q: f"{DAPO_PREFIX}{q}{DAPO_SUFFIX}",
}


class DataPrepError(ValueError):
    """Input that cannot be converted; the message is one line naming the file (and column)."""


class RowError(ValueError):
    """One row without a usable question or label: reported in OUT.rejected.jsonl, not fatal."""


# ---------------------------------------------------------------------------------------------
# Per-source extractors: raw cell value -> question text / label string.


def _text(value: Any) -> str:
    if value is None or (isinstance(value, str) and not value.strip()):
        raise RowError("empty")
    return str(value).strip()


def dapo_question(value: Any) -> str:
    """The problem inside a DAPO prompt (a chat list or a string), without DAPO's instruction."""
    if isinstance(value, (list, tuple)):
        turns = [t for t in value if isinstance(t, dict) and t.get("role", "user") == "user"]
        if not turns:
            raise RowError("prompt has no user turn")
        value = turns[-1].get("content")
    text = _text(value)
    text = text[len(DAPO_PREFIX.strip()):] if text.startswith(DAPO_PREFIX.strip()) else text
    text = text[:-len(DAPO_SUFFIX.strip())] if text.endswith(DAPO_SUFFIX.strip()) else text
    return _text(text)


def dapo_label(value: Any) -> str:
    if isinstance(value, dict):
        value = value.get("ground_truth")
    return _text(value)


def aime_label(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    text = _text(value)
    return str(int(text)) if re.fullmatch(r"[+-]?\d+", text) else text


def gsm8k_label(value: Any) -> str:
    text = _text(value)
    if "####" not in text:
        raise RowError("no '#### <answer>' line in the solution")
    return _text(text.rsplit("####", 1)[1].replace(",", ""))


class Source(NamedTuple):
    questions: Tuple[str, ...]  # candidate columns, first match wins (case-insensitive)
    question: Callable[[Any], str]
    answers: Tuple[str, ...]
    label: Callable[[Any], str]
    ids: Tuple[str, ...] = ()


SOURCES: Dict[str, Source] = {
    "dapo_math_17k": Source(("prompt", "problem", "question"), dapo_question,
                            ("reward_model", "answer", "solution"), dapo_label, ("extra_info", "index", "id")),
    "math500": Source(("problem",), _text, ("answer",), _text, ("unique_id", "id")),
    "aime24": Source(("problem", "question"), _text, ("answer",), aime_label, ("id",)),
    "aime25": Source(("question", "problem"), _text, ("answer",), aime_label, ("id",)),
    "gsm8k": Source(("question",), _text, ("answer",), gsm8k_label),
}


def _row_id(value: Any, index: int) -> Any:
    if isinstance(value, dict):  # DAPO's extra_info
        value = value.get("index", value.get("id"))
    if isinstance(value, (int, str)) and not isinstance(value, bool) and str(value).strip():
        return value
    return index


# ---------------------------------------------------------------------------------------------
# Loading.


def load_records(path: Optional[Path] = None, hf_name: Optional[str] = None, split: Optional[str] = None,
                 hf_config: Optional[str] = None) -> Tuple[str, List[dict]]:
    """(name for messages, rows as dicts) from a local file or a Hugging Face data set."""
    if hf_name is not None:
        import datasets

        ds = datasets.load_dataset(hf_name, hf_config, split=split)
        if isinstance(ds, datasets.DatasetDict):
            if len(ds) != 1:
                raise DataPrepError(f"{hf_name} has splits {sorted(ds)}: pick one with --split")
            ds = next(iter(ds.values()))
        name, rows = f"{hf_name}[{split or 'default split'}]", ds.to_list()
    else:
        path = Path(path)
        name = str(path)
        if not path.is_file():
            raise DataPrepError(f"{path} does not exist")
        suffix = path.suffix.lower()
        try:
            if suffix == ".parquet":
                import pyarrow.parquet as pq

                rows = pq.read_table(path).to_pylist()
            elif suffix == ".json":
                data = json.loads(path.read_text(encoding="utf-8"))
                rows = data.get("data") if isinstance(data, dict) else data
                if not isinstance(rows, list):
                    raise DataPrepError(f'{path}: expected a list of objects or {{"data": [...]}}')
            elif suffix == ".jsonl":
                rows = [row for _, row in jsonl_rows(path, DataPrepError)]
            else:
                raise DataPrepError(f"{path}: unknown file extension {suffix!r} (expected .parquet, .json or .jsonl)")
        except DataPrepError:
            raise
        except Exception as e:  # a corrupt parquet / json file
            reason = f"{type(e).__name__}: {e}".splitlines()[0]
            raise DataPrepError(f"{path}: cannot read as {suffix[1:]} ({reason})") from None
    if not rows:
        raise DataPrepError(f"{name} has no rows")
    if not all(isinstance(r, dict) for r in rows):
        raise DataPrepError(f"{name}: rows must be JSON objects (one per question)")
    return name, rows


def _find_column(columns: Sequence[str], candidates: Sequence[str]) -> Optional[str]:
    lower = {c.lower(): c for c in columns}
    return next((lower[c.lower()] for c in candidates if c.lower() in lower), None)


# ---------------------------------------------------------------------------------------------
# Conversion.


@dataclass
class Report:
    out: Path
    written: int = 0
    duplicates: int = 0
    rejected: List[dict] = field(default_factory=list)

    @property
    def rejected_path(self) -> Path:
        return self.out.with_name(self.out.name + ".rejected.jsonl")

    def summary(self) -> str:
        line = f"wrote {self.written} rows to {self.out}"
        if self.duplicates:
            line += f"; dropped {self.duplicates} duplicate rows"
        if self.rejected:
            ids = [str(r["id"]) for r in self.rejected]
            shown = ", ".join(ids[:10]) + (f", ... (+{len(ids) - 10} more)" if len(ids) > 10 else "")
            line += (f"; skipped {len(ids)} rows whose label math-verify cannot parse: ids {shown} "
                     f"(reasons in {self.rejected_path})")
        return line


def convert(source: str, name: str, rows: List[dict], template: str = "boxed",
            limit: Optional[int] = None) -> Tuple[List[dict], List[dict], int]:
    """(written rows, rejected rows, duplicates dropped); raises DataPrepError for a layout that does not fit."""
    if source not in SOURCES:
        raise DataPrepError(f"unknown source {source!r} (one of {', '.join(SOURCES)})")
    if template not in TEMPLATES:
        raise DataPrepError(f"unknown template {template!r} (one of {', '.join(TEMPLATES)})")
    spec, columns = SOURCES[source], list(rows[0])
    q_col = _find_column(columns, spec.questions)
    if q_col is None:
        raise DataPrepError(f"{name}: no column for the question (looked for {', '.join(spec.questions)}; "
                            f"found {', '.join(columns)})")
    a_col = _find_column(columns, spec.answers)
    if a_col is None:
        raise DataPrepError(f"{name}: no column for the answer (looked for {', '.join(spec.answers)}; "
                            f"found {', '.join(columns)})")
    id_col = _find_column(columns, spec.ids)

    out, rejected, seen, duplicates = [], [], set(), 0
    for index, row in enumerate(rows):
        if limit is not None and len(out) >= limit:
            break
        row_id = _row_id(row.get(id_col) if id_col else None, index)
        raw_label = row.get(a_col)
        try:
            try:
                question = spec.question(row.get(q_col))
            except RowError as e:
                raise RowError(f"question ({q_col}): {e}") from None
            try:
                label = spec.label(raw_label)
            except RowError as e:
                raise RowError(f"answer ({a_col}): {e}") from None
            if (question, label) in seen:
                duplicates += 1
                continue
            seen.add((question, label))
            if not label_parses(label):
                raise RowError(f"math-verify cannot parse the label {label!r}")
        except RowError as e:
            rejected.append({"id": row_id, "datasource": source, "label": None if raw_label is None else str(raw_label),
                             "reason": str(e)})
            continue
        out.append({"prompt": [{"role": "user", "content": TEMPLATES[template](question)}], "label": label,
                    "datasource": source, "id": row_id})
    return out, rejected, duplicates


def _write_jsonl(path: Path, rows: Sequence[dict]) -> None:
    with atomic_path(path) as tmp:
        with open(tmp, "w", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")


def prepare(source: str, out: Path, input_path: Optional[Path] = None, hf_name: Optional[str] = None,
            split: Optional[str] = None, hf_config: Optional[str] = None, template: str = "boxed",
            limit: Optional[int] = None) -> Report:
    """Convert one data set to `out` (and `out`.rejected.jsonl when rows were skipped); see the module doc."""
    if (input_path is None) == (hf_name is None):
        raise DataPrepError("give exactly one of an input file and a Hugging Face data set name")
    if source not in SOURCES:  # before loading anything
        raise DataPrepError(f"unknown source {source!r} (one of {', '.join(SOURCES)})")
    name, rows = load_records(input_path, hf_name, split, hf_config)
    kept, rejected, duplicates = convert(source, name, rows, template, limit)
    report = Report(Path(out), len(kept), duplicates, rejected)
    _write_jsonl(report.out, kept)
    if rejected:
        _write_jsonl(report.rejected_path, rejected)
    else:
        report.rejected_path.unlink(missing_ok=True)  # a stale list from an earlier run of this output
    return report
