"""runtime.dedup: the one in-batch dedup used by the managers and the HTTP backends."""

import doctest

from rewardkit.runtime import dedup
from rewardkit.runtime.dedup import fan_out, unique_slots


def test_first_occurrence_wins_and_slots_point_back():
    unique, slots = unique_slots(["b", "a", "b", "c", "a"])
    assert unique == ["b", "a", "c"]
    assert slots == [0, 1, 0, 2, 1]
    assert [unique[s] for s in slots] == ["b", "a", "b", "c", "a"]


def test_key_and_disabled():
    items = [("x", 1), ("x", 2), ("y", 3)]
    unique, slots = unique_slots(items, key=lambda it: it[0])
    assert unique == [("x", 1), ("y", 3)] and slots == [0, 0, 1]
    assert unique_slots(items, key=lambda it: it[0], enabled=False) == (items, [0, 1, 2])


def test_empty_batch_and_unicode():
    assert unique_slots([]) == ([], [])
    assert fan_out([], [], copy=dict) == []
    assert unique_slots(["é", "é", "日本"]) == (["é", "日本"], [0, 0, 1])


def test_duplicates_get_copies_never_the_same_object():
    first = {"score": 1.0}
    out = fan_out([first], [0, 0, 0], copy=dict)
    assert out[0] is first
    assert out[1] == out[2] == first and out[1] is not first and out[2] is not out[1]


def test_module_examples_hold():
    assert doctest.testmod(dedup).failed == 0
