"""Checks in the driver before Ray starts: bad input gets one line naming the file, not a traceback
from inside a Ray actor minutes later.

- `--actor.model_name_or_path` that looks like a local path must be a model folder (config.json);
- each local file of `--data.prompt_dataset` (and `--eval.dataset`) must exist; a local `.jsonl` / `.json`
  file must have the input key on every row and, with `--data.label_key`, a label on every row; with
  COPO, each distinct label must be one that math-verify can read (a label it cannot parse could only
  ever score 0). Hub names (`org/name` that are not on disk) are left to OpenRLHF;
- under a mode that samples adaptively (Reinforce-Ada), `--copo.ada_threshold` must lie in the range of rewards the
  reward file declares (`contract.REWARD_RANGE`); a file that declares none is checked at the first step instead
  (`runtime_patches.adaptive_sampling.check_first_step`).
"""

from __future__ import annotations

import ast
import json
import os
from typing import Iterator, List, Optional, Tuple

from openrlhf_copo.contract import REWARD_RANGE
from openrlhf_copo.openrlhf_ext.config import is_copo
from openrlhf_copo.files import jsonl_rows

#: Larger files are checked for keys but only their first rows' labels are parsed (math-verify costs ~3 ms).
MAX_LABELS_TO_PARSE = 5000
_LOCAL_EXTS = (".jsonl", ".json", ".parquet", ".csv", ".arrow")


def _looks_local(path: str) -> bool:
    return os.path.exists(path) or path.startswith((".", "/", "~")) or path.endswith(_LOCAL_EXTS)


def _json_rows(path: str) -> Iterator[Tuple[int, dict]]:
    if path.endswith(".jsonl"):
        yield from jsonl_rows(path, PreflightError)
    else:
        with open(path) as f:
            try:
                data = json.load(f)
            except ValueError as e:
                raise PreflightError(f"{path}: not JSON ({e})") from None
        rows = data.get("data", data) if isinstance(data, dict) else data
        yield from enumerate(rows if isinstance(rows, list) else [], 1)


class PreflightError(ValueError):
    """Bad input found before training; the message names the file or setting."""


def check_model(args) -> None:
    path = args.actor.model_name_or_path
    if path and _looks_local(path):
        if not os.path.isdir(os.path.expanduser(path)):
            raise PreflightError(f"--actor.model_name_or_path {path} does not exist")
        if not os.path.isfile(os.path.join(os.path.expanduser(path), "config.json")):
            raise PreflightError(f"--actor.model_name_or_path {path} is not a Hugging Face model folder (no config.json)")


def check_dataset(flag: str, spec: Optional[str], input_key: str, label_key: Optional[str], parse_labels: bool) -> None:
    for path in (spec or "").split(","):
        path = path.strip()
        if not path or not _looks_local(path):
            continue
        if not os.path.exists(os.path.expanduser(path)):
            raise PreflightError(f"{flag} {path} does not exist")
        if not path.endswith((".jsonl", ".json")):
            continue
        labels: List[Tuple[int, str]] = []
        n_rows = 0
        for n, row in _json_rows(path):
            n_rows += 1
            if not isinstance(row, dict) or input_key not in row:
                raise PreflightError(f"{path}:{n}: no '{input_key}' (--data.input_key)")
            if label_key:
                if row.get(label_key) in (None, ""):
                    raise PreflightError(f"{path}:{n}: no label in '{label_key}' (--data.label_key)")
                if len(labels) < MAX_LABELS_TO_PARSE:
                    labels.append((n, str(row[label_key])))
        if n_rows == 0:
            raise PreflightError(f"{flag} {path} has no rows")
        if parse_labels:
            _check_labels(path, labels)


def _check_labels(path: str, labels: List[Tuple[int, str]]) -> None:
    from openrlhf_copo.rewards.verifier import get_pool

    pool = get_pool()
    seen = set()
    for n, label in labels:
        if label in seen:
            continue
        seen.add(label)
        verdict = pool.verify(None, label)
        if verdict.status == "ok" and not verdict.gold_ok:
            raise PreflightError(f"{path}:{n}: label {label[:60]!r} cannot be parsed by math-verify (it would always "
                                 "score 0): fix or drop the row (prepare_data reports such rows)")


def reward_file(args) -> Optional[str]:
    """The Python reward file OpenRLHF's engines load (`--reward.remote_url` ending in .py, as its
    SingleTurnAgentExecutor tells one), or None (an HTTP reward model, an agent function)."""
    url = args.reward.remote_url
    first = (url[0] if url else None) if isinstance(url, (list, tuple)) else url
    return first if isinstance(first, str) and first.endswith(".py") else None


def declared_reward_range(path: str) -> Optional[Tuple[float, float]]:
    """The (least, greatest) reward a reward file declares at module level as ``REWARD_RANGE = (low, high)``
    (`contract.REWARD_RANGE`), read from its source without running it (the driver does not import a user's reward
    code: the engines do); None when it declares none."""
    flag = f"--reward.remote_url {path}"
    try:
        with open(os.path.expanduser(path)) as f:
            tree = ast.parse(f.read(), path)
    except OSError as e:
        raise PreflightError(f"{flag} cannot be read: {e.strerror or e}") from None
    except SyntaxError as e:
        raise PreflightError(f"{path}:{e.lineno}: not Python ({e.msg}), as {flag}") from None
    for node in tree.body:
        targets = (node.targets if isinstance(node, ast.Assign)
                   else [node.target] if isinstance(node, ast.AnnAssign) else [])
        if not any(isinstance(t, ast.Name) and t.id == REWARD_RANGE for t in targets):
            continue
        try:
            value = ast.literal_eval(node.value)
        except (ValueError, TypeError, SyntaxError):  # not a literal (a name, a call), or no value at all
            value = None
        if (not isinstance(value, (tuple, list)) or len(value) != 2
                or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
                or not value[0] < value[1]):
            raise PreflightError(f"{path}:{node.lineno}: {REWARD_RANGE} must be a literal pair of numbers (least "
                                 f"reward, greatest reward), the least below the greatest, e.g. {REWARD_RANGE} = "
                                 "(0.0, 1.0)")
        return float(value[0]), float(value[1])
    return None


def check_ada_threshold(args) -> None:
    """Under a mode that samples adaptively, `--copo.ada_threshold` within the rewards the reward file declares
    (`declared_reward_range`): a response counts as correct when its reward exceeds the threshold, so at or above the
    greatest reward none does, and below the least every one does. Either way no prompt's pool ever holds both kinds:
    its advantage is its reward less a constant (REINFORCE without a baseline), and under Reinforce-Ada's rounds every
    prompt draws the whole budget (budget / G times GRPO's tokens). A reward file that declares no range is checked at
    the first step instead."""
    from openrlhf_copo.openrlhf_ext.runtime_patches.adaptive_sampling import adaptive_mode

    mode = adaptive_mode(args)
    path = reward_file(args) if mode is not None else None
    declared = declared_reward_range(path) if path else None
    if declared is None:
        return
    low, high = declared
    threshold = args.copo.ada_threshold
    if not low <= threshold < high:
        counted = "no response" if threshold >= high else "every response"
        drew = "" if mode.random_keep else "draw the whole --copo.ada_budget and "
        raise PreflightError(
            f"--copo.ada_threshold {threshold:g} is outside the rewards of {path} ({REWARD_RANGE} {low:g} to "
            f"{high:g}): {counted} would count as correct, so every prompt would {drew}train on its reward with no "
            f"baseline; give a threshold in [{low:g}, {high:g})")


def preflight(args) -> None:
    """Raise `PreflightError` for the first bad input of this run."""
    check_model(args)
    check_ada_threshold(args)
    # labels must parse for a reward file of ours; an agent function (remote_url 'agent') scores its own way
    parse = is_copo(args) and bool(args.reward.remote_url) and not getattr(args.train, "agent_func_path", None)
    check_dataset("--data.prompt_dataset", args.data.prompt_dataset, args.data.input_key, args.data.label_key, parse)
    if getattr(args.eval, "dataset", None):
        check_dataset("--eval.dataset", args.eval.dataset, args.data.input_key, args.data.label_key, parse)
