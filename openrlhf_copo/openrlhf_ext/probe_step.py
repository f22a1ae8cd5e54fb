"""The run-time side of a probe (`--copo.probe FILE`): the advantage step measures the first rollout batch and stops.

    advantage step (`advantages.py`)  --batch_record-->  raise ProbeFinished(record)  --Ray-->  driver
    (`driver.run_training`: `finished_record`)  -->  FILE, exit status 0

The probe (`openrlhf_copo.probe`, `python -m openrlhf_copo.cli.probe`) runs such a run and reports on FILE; it is a
client of this module, which imports nothing of it.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence

from openrlhf_copo.contract import ALL_CORRECT, ALL_INCORRECT, CORRECT, ENTROPY, MIXED_LOCAL_LOST, W_LOCAL, ZERO_STD


class ProbeFinished(Exception):
    """Raised by the advantage step under `--copo.probe` once it has measured the first rollout batch: the run stops
    there, before any optimizer step. Carries the batch's record (`batch_record`) back to the driver through Ray
    (which hands the driver a copy of it), so the record reaches the driver's machine whichever node ran the step."""

    def __init__(self, record: dict):
        super().__init__(f"probe: the first rollout batch ({len(record.get('groups', []))} prompts) measured")
        self.record = record

    def __reduce__(self):  # pickled by its record, not by its message
        return ProbeFinished, (self.record,)


def finished_record(error: BaseException) -> Optional[dict]:
    """The record of a `ProbeFinished`, also as Ray wraps it (a RayTaskError whose ``cause`` it is); None for any
    other error."""
    for candidate in (error, getattr(error, "cause", None)):
        if isinstance(candidate, ProbeFinished):
            return candidate.record
    return None


def answer_split(answer_ids: Sequence[int]) -> List[int]:
    """A group's answer split: how many responses gave each distinct answer, largest first ([5, 1]: five agree)."""
    counts: Dict[int, int] = {}
    for a in answer_ids:
        counts[a] = counts.get(a, 0) + 1
    return sorted(counts.values(), reverse=True)


#: The per-prompt columns of the advantage step (`contract`) that a group's record keeps (each the group's mean).
GROUP_COLUMNS = (ZERO_STD, ALL_CORRECT, ALL_INCORRECT, ENTROPY, W_LOCAL, MIXED_LOCAL_LOST)


def batch_record(columns: Dict[str, "object"], groups, rewards, correct, answer_ids, prompts: List[str],
                 labels: List[str], settings: dict, G: int) -> dict:
    """What the probe keeps of a rollout batch, from the advantage step's own flat [N] tensors and their prompt
    groups (`core.Groups`): per group its prompt, label, rewards, correctness, answer split and its columns
    (`GROUP_COLUMNS`); for the batch, every column's mean over its responses (what the step's log shows: OpenRLHF
    averages them over the responses), the run's G (--rollout.n_samples_per_prompt; a group's own size is its
    number of rewards) and the settings."""
    records = []
    for b, (start, size) in enumerate(zip(groups.starts.tolist(), groups.sizes)):
        group = slice(start, start + size)
        records.append({"prompt": prompts[b], "label": labels[b], "rewards": rewards[group].tolist(),
                        "correct": [bool(c) for c in correct[group].tolist()],
                        "split": answer_split(answer_ids[group].tolist()),
                        **{k: columns[k][group].float().mean().item() for k in GROUP_COLUMNS}})
    metrics = {k: v.float().mean().item() for k, v in columns.items()}
    metrics[CORRECT] = correct.float().mean().item()
    return {"groups": records, "metrics": metrics, "G": int(G), "settings": settings}
