"""Turn the paper's math data sets into OpenRLHF prompt/label jsonl.

Each written line is one prompt row::

    {"prompt": [{"role": "user", "content": "<templated question>"}], "label": "<answer>",
     "datasource": "<source>", "id": <the data set's own id, or the row index>}

read by training with ``--data.input_key prompt --data.label_key label --data.apply_chat_template``
(``datasource`` is the key by which OpenRLHF's in-training evaluation splits its metrics)
and by `openrlhf_copo.evaluation.evaluate.load_rows`.

Input (column names are matched case-insensitively): `.parquet`, `.json` (a list of objects, ``{"data": [...]}``
or JSON lines, as `datasets.Dataset.to_json` writes them), `.jsonl`, several files one after the other, or a Hugging
Face data set via `datasets.load_dataset` (several configurations one after the other). Rows are read one at a time,
never a file whole. The layout (question, answer and id columns) is the first row's; a row without one of its columns
stops the conversion with an error naming the row ("FILE:LINE" or "FILE row N").

- ``dapo_math_17k`` (BytedTsinghua-SIA/DAPO-Math-17k, parquet): ``prompt`` is a one-turn chat
  ``[{"content": ..., "role": "user"}]`` whose content is the problem wrapped in DAPO's
  instruction (`DAPO_PREFIX` + problem + `DAPO_SUFFIX`); ``reward_model`` is
  ``{"ground_truth": ..., "style": ...}``; ``extra_info`` is ``{"index": <uuid>}``. The problem
  is recovered by stripping the wrapper, so either template can be applied. The published file
  repeats each problem many times (about 1.79M rows): rows with the same (question, label) are written once.
- ``math500`` (HuggingFaceH4/MATH-500): ``problem``, ``answer`` (LaTeX, kept as is), ``unique_id``.
- ``aime24``: Maxwell-Jia/AIME_2024 (``ID``, ``Problem``, ``Answer`` as int), HuggingFaceH4/aime_2024 (``id``,
  ``problem``, ``answer`` as str), math-ai/aime24 (``id``, ``problem``, the answer only as ``\\boxed{N}`` inside
  ``solution``) or BytedTsinghua-SIA/AIME-2024 (DAPO-Math-17k's layout, each problem 32 times: written once).
- ``aime25``: opencompass/AIME2025 (``question``, ``answer``; two configurations, AIME2025-I and AIME2025-II, 15
  problems each: pass both) or ``problem``/``answer``, or any ``aime24`` layout.
  AIME answers become plain integer strings ("033" and 33 -> "33").
- ``gsm8k`` (openai/gsm8k): ``question``, ``answer`` = worked solution ending in ``#### 72``;
  the label is the text after the last ``####`` with thousands commas removed ("1,000" -> "1000").

Templates: one pair, used identically for training and evaluation prompts, as in the paper:
``boxed`` (default) appends the embedded demo's `INSTRUCTION` ("Please reason step by step, and
put your final answer within \\boxed{}."), which the reward's boxed-answer extraction reads;
``dapo`` wraps the question in DAPO-Math's own "Answer: $Answer" instruction.

Every label is checked with the reward's own test (`verifier.label_parses`: math-verify
turns it into a mathematical object). A row without a usable question or label is not written (it could only score
0) but listed in ``OUT.rejected.jsonl`` with where it is and why; the summary counts each reason (`REASONS`) and names
the first rows of each by file and line. Input that does not fit (unknown extension, no question / answer column, no
rows, a data set the hub cannot give) raises `DataPrepError` with a one-line reason naming the file or data set
(and the row), before anything is written; the output is replaced atomically.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Iterator, List, NamedTuple, Optional, Sequence, Tuple

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
    """Input that cannot be converted; the message is one line naming the file (and row or column)."""


class RowError(ValueError):
    """One row without a usable question or label: reported in OUT.rejected.jsonl, not fatal. ``kind`` is the
    reason the summary counts (`REASONS`); the message is the detail written beside the row."""

    def __init__(self, kind: str, detail: Optional[str] = None):
        super().__init__(detail or kind)
        self.kind = kind


#: Why a row is skipped, as the summary words it.
REASONS = {
    "empty question": "an empty or missing question",
    "no user turn": "a prompt without a user turn",
    "empty answer": "an empty or null answer",
    "no ####": "a GSM8K solution without '#### <answer>'",
    "no final answer": "a solution without a final answer (\\boxed{})",
    "unparseable": "a label math-verify cannot parse",
}


# ---------------------------------------------------------------------------------------------
# Per-source extractors: raw cell value -> question text / label string.


def _text(value: Any) -> str:
    if value is None or (isinstance(value, str) and not value.strip()):
        raise RowError("empty", "empty")
    return str(value).strip()


def dapo_question(value: Any) -> str:
    """The problem inside a DAPO prompt (a chat list or a string), without DAPO's instruction."""
    if isinstance(value, (list, tuple)):
        turns = [t for t in value if isinstance(t, dict) and t.get("role", "user") == "user"]
        if not turns:
            raise RowError("no user turn", "prompt has no user turn")
        value = turns[-1].get("content")
    text = _text(value)
    text = text[len(DAPO_PREFIX.strip()):] if text.startswith(DAPO_PREFIX.strip()) else text
    text = text[:-len(DAPO_SUFFIX.strip())] if text.endswith(DAPO_SUFFIX.strip()) else text
    return _text(text)


def aime_label(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    text = _text(value)
    return str(int(text)) if re.fullmatch(r"[+-]?\d+", text) else text


def gsm8k_label(value: Any) -> str:
    text = _text(value)
    if "####" not in text:
        raise RowError("no ####", "no '#### <answer>' line in the solution")
    return _text(text.rsplit("####", 1)[1].replace(",", ""))


def answer_cell(column: str, value: Any) -> Any:
    """The answer a cell holds: DAPO's ``reward_model`` {"ground_truth": ...}, the final answer of a worked
    ``solution`` (math-ai/aime24: "\\boxed{204}"), else the value itself."""
    if isinstance(value, dict):
        return value.get("ground_truth")
    if column.lower() == "solution" and isinstance(value, str) and value.strip():
        from openrlhf_copo.rewards.answers import extract_answer

        found = extract_answer(value)
        if not found:
            raise RowError("no final answer", "no final answer (\\boxed{}) in the solution")
        return found
    return value


class Source(NamedTuple):
    questions: Tuple[str, ...]  # candidate columns, first match wins (case-insensitive)
    question: Callable[[Any], str]
    answers: Tuple[str, ...]
    label: Callable[[Any], str]
    ids: Tuple[str, ...] = ()


#: DAPO's own copies (DAPO-Math-17k, BytedTsinghua-SIA/AIME-2024) keep the question in a chat ``prompt`` and the
#: answer in ``reward_model``; `dapo_question` reads a plain question string as it is.
_DAPO_COLUMNS = dict(questions=("problem", "question", "prompt"), question=dapo_question,
                     answers=("answer", "reward_model", "solution"), ids=("id", "extra_info", "index"))

SOURCES: Dict[str, Source] = {
    "dapo_math_17k": Source(label=_text, **_DAPO_COLUMNS),
    "math500": Source(("problem",), _text, ("answer",), _text, ("unique_id", "id")),
    "aime24": Source(label=aime_label, **_DAPO_COLUMNS),
    "aime25": Source(label=aime_label, **_DAPO_COLUMNS),
    "gsm8k": Source(("question",), _text, ("answer",), gsm8k_label),
}


def _row_id(value: Any, index: int) -> Any:
    if isinstance(value, dict):  # DAPO's extra_info
        value = value.get("index", value.get("id"))
    if isinstance(value, (int, str)) and not isinstance(value, bool) and str(value).strip():
        return value
    return index


# ---------------------------------------------------------------------------------------------
# Loading: rows one at a time, each with where it comes from ("FILE:LINE" or "FILE row N"), never a file whole
# (the published DAPO-Math-17k holds about 1.79M rows, mostly repeats).

Rows = Iterator[Tuple[str, Any]]


def _first_line(reason: BaseException) -> str:
    return f"{type(reason).__name__}: {reason}".splitlines()[0] if str(reason) else type(reason).__name__


def _parquet_rows(path: Path) -> Rows:
    import pyarrow.parquet as pq

    n = 0
    for batch in pq.ParquetFile(path).iter_batches(batch_size=4096):
        for row in batch.to_pylist():
            n += 1
            yield f"{path} row {n}", row


def _json_rows(path: Path) -> Rows:
    """A JSON document (a list of objects or {"data": [...]}), or JSON lines under a .json name (what
    `datasets.Dataset.to_json` writes)."""
    text = path.read_text(encoding="utf-8")
    try:
        data = json.loads(text)
    except ValueError as e:
        first = text.lstrip().split("\n", 1)[0]
        try:
            json.loads(first)
        except ValueError:
            raise DataPrepError(f"{path}: not JSON ({e})") from None
        yield from ((f"{path}:{n}", row) for n, row in jsonl_rows(path, DataPrepError))
        return
    rows = data.get("data") if isinstance(data, dict) else data
    if not isinstance(rows, list):
        raise DataPrepError(f'{path}: expected a list of objects, {{"data": [...]}} or JSON lines')
    yield from ((f"{path} row {n}", row) for n, row in enumerate(rows, 1))


def _file_rows(path: Path) -> Rows:
    readers = {".parquet": _parquet_rows, ".json": _json_rows,
               ".jsonl": lambda p: ((f"{p}:{n}", row) for n, row in jsonl_rows(p, DataPrepError))}
    suffix = path.suffix.lower()
    if suffix not in readers:
        raise DataPrepError(f"{path}: unknown file extension {suffix!r} (expected .parquet, .json or .jsonl)")
    try:
        yield from readers[suffix](path)
    except DataPrepError:
        raise
    except Exception as e:  # a corrupt parquet / json file
        raise DataPrepError(f"{path}: cannot read as {suffix[1:]} ({_first_line(e)})") from None


def _hub_rows(hf_name: str, config: Optional[str], split: Optional[str]) -> Rows:
    import datasets

    name = f"{hf_name} (config {config or 'default'}, split {split or 'default'})"
    try:
        ds = datasets.load_dataset(hf_name, config, split=split)
    except Exception as e:  # the hub unreachable, a missing config or split: whatever `datasets` raises
        raise DataPrepError(f"cannot load {name}: {_first_line(e)}") from None
    if isinstance(ds, datasets.DatasetDict):
        if len(ds) != 1:
            raise DataPrepError(f"{name} has splits {sorted(ds)}: pick one with --split")
        ds = next(iter(ds.values()))
    yield from ((f"{name} row {n}", row) for n, row in enumerate(ds, 1))


def load_records(paths: Sequence[Path] = (), hf_name: Optional[str] = None, split: Optional[str] = None,
                 hf_configs: Sequence[Optional[str]] = (None,)) -> Tuple[str, Rows]:
    """(name for messages, the rows with where each comes from) of local files or of a Hugging Face data set's
    configurations, one after the other (AIME 2025 is two: opencompass/AIME2025's AIME2025-I and AIME2025-II)."""
    if hf_name is not None:
        configs = list(hf_configs) or [None]
        name = f"{hf_name}[{', '.join(c or 'default' for c in configs)}; {split or 'default split'}]"
        return name, (row for config in configs for row in _hub_rows(hf_name, config, split))
    paths = [Path(p) for p in ([paths] if isinstance(paths, (str, Path)) else paths)]
    for path in paths:
        if not path.is_file():
            raise DataPrepError(f"{path} does not exist")
    return ", ".join(map(str, paths)), (row for path in paths for row in _file_rows(path))


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

    def summary(self, shown: int = 3) -> str:
        line = f"wrote {self.written} rows to {self.out}"
        if self.duplicates:
            line += f"; dropped {self.duplicates} duplicate rows"
        if self.rejected:
            parts = []
            for kind in dict.fromkeys(r["kind"] for r in self.rejected):
                where = [r["where"] for r in self.rejected if r["kind"] == kind]
                more = f", ... (+{len(where) - shown} more)" if len(where) > shown else ""
                parts.append(f"{len(where)} with {REASONS[kind]} ({', '.join(where[:shown])}{more})")
            line += f"; skipped {len(self.rejected)} rows: {'; '.join(parts)} (each in {self.rejected_path})"
        return line


class _Layout(NamedTuple):
    question: str
    answer: str
    id: Optional[str]
    where: str


def _layout(spec: Source, where: str, row: dict) -> _Layout:
    columns = list(row)
    for kind, candidates in (("question", spec.questions), ("answer", spec.answers)):
        if _find_column(columns, candidates) is None:
            raise DataPrepError(f"{where}: no column for the {kind} (looked for {', '.join(candidates)}; "
                                f"found {', '.join(columns)})")
    return _Layout(_find_column(columns, spec.questions), _find_column(columns, spec.answers),
                   _find_column(columns, spec.ids), where)


def convert(source: str, name: str, rows: Iterable, template: str = "boxed",
            limit: Optional[int] = None) -> Tuple[List[dict], List[dict], int]:
    """(written rows, rejected rows, duplicates dropped) of ``rows``, an iterable of (where, row) or of rows, read
    once, one at a time. The layout (question, answer, id columns) is the first row's; a later row that lacks one of
    its columns raises DataPrepError naming the row. Rows with the same (question, label) are written once."""
    if source not in SOURCES:
        raise DataPrepError(f"unknown source {source!r} (one of {', '.join(SOURCES)})")
    if template not in TEMPLATES:
        raise DataPrepError(f"unknown template {template!r} (one of {', '.join(TEMPLATES)})")
    spec, layout = SOURCES[source], None
    out, rejected, seen, duplicates, index = [], [], set(), 0, -1
    for index, item in enumerate(rows):
        if limit is not None and len(out) >= limit:
            break
        where, row = item if isinstance(item, tuple) else (f"{name} row {index + 1}", item)
        if not isinstance(row, dict):
            raise DataPrepError(f"{where}: rows must be JSON objects (one per question)")
        layout = layout or _layout(spec, where, row)
        missing = [c for c in (layout.question, layout.answer) if c not in row]
        if missing:
            raise DataPrepError(f"{where}: no column {', '.join(missing)}, which the layout of {layout.where} has "
                                f"(found {', '.join(row)})")
        row_id = _row_id(row.get(layout.id) if layout.id else None, index)
        raw_label = row.get(layout.answer)
        try:
            try:
                question = spec.question(row.get(layout.question))
            except RowError as e:
                raise RowError("empty question" if e.kind == "empty" else e.kind,
                               f"question ({layout.question}): {e}") from None
            try:
                label = spec.label(answer_cell(layout.answer, raw_label))
            except RowError as e:
                raise RowError("empty answer" if e.kind == "empty" else e.kind,
                               f"answer ({layout.answer}): {e}") from None
            if (question, label) in seen:
                duplicates += 1
                continue
            seen.add((question, label))
            if not label_parses(label):
                raise RowError("unparseable", f"math-verify cannot parse the label {label!r}")
        except RowError as e:
            rejected.append({"id": row_id, "where": where, "datasource": source, "kind": e.kind,
                             "label": None if raw_label is None else str(raw_label), "reason": str(e)})
            continue
        out.append({"prompt": [{"role": "user", "content": TEMPLATES[template](question)}], "label": label,
                    "datasource": source, "id": row_id})
    if index < 0:
        raise DataPrepError(f"{name} has no rows")
    return out, rejected, duplicates


def _write_jsonl(path: Path, rows: Sequence[dict]) -> None:
    with atomic_path(path) as tmp:
        with open(tmp, "w", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")


def prepare(source: str, out: Path, input_path=None, hf_name: Optional[str] = None,
            split: Optional[str] = None, hf_config=None, template: str = "boxed",
            limit: Optional[int] = None) -> Report:
    """Convert one data set to `out` (and `out`.rejected.jsonl when rows were skipped); see the module doc.
    ``input_path``: one file or several (read one after the other); ``hf_config``: one configuration or several."""
    if (input_path is None) == (hf_name is None):
        raise DataPrepError("give exactly one of an input file and a Hugging Face data set name")
    if source not in SOURCES:  # before loading anything
        raise DataPrepError(f"unknown source {source!r} (one of {', '.join(SOURCES)})")
    configs = hf_config if isinstance(hf_config, (list, tuple)) else [hf_config]
    name, rows = load_records(input_path if input_path is not None else (), hf_name, split, configs)
    kept, rejected, duplicates = convert(source, name, rows, template, limit)
    report = Report(Path(out), len(kept), duplicates, rejected)
    _write_jsonl(report.out, kept)
    if rejected:
        _write_jsonl(report.rejected_path, rejected)
    else:
        report.rejected_path.unlink(missing_ok=True)  # a stale list from an earlier run of this output
    return report
