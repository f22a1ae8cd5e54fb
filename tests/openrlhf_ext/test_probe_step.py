"""The run's side of a probe (`openrlhf_ext/probe_step.py`): the record the advantage step stops with, and how it
reaches the driver. The advantage step that raises it: tests/openrlhf_ext/test_advantages.py; the driver that writes
it: tests/cli/test_probe.py."""

import pickle

from openrlhf_copo.openrlhf_ext.probe_step import ProbeFinished, answer_split, finished_record


def test_answer_split_counts_equal_answers_largest_first():
    assert answer_split([9, 3, 9, 9, 4, 9]) == [4, 1, 1]
    assert answer_split([2, 2, 2]) == [3]


def test_probe_finished_travels_pickled_with_its_record():
    error = pickle.loads(pickle.dumps(ProbeFinished({"groups": [1, 2, 3]})))
    assert finished_record(error) == {"groups": [1, 2, 3]}

    class Wrapped(Exception):  # as Ray hands the driver an actor's error: the original as its ``cause``
        cause = error

    assert finished_record(Wrapped()) == {"groups": [1, 2, 3]}
    assert finished_record(RuntimeError("other")) is None
