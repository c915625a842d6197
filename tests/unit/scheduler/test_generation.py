"""What one cycle built, taken over by the next: from the very same source and equal inputs, or carried whole."""

from __future__ import annotations

from kai.scheduler.generation import Built, Generation


def test_a_value_is_taken_over_from_the_very_same_source_with_equal_inputs_only():
    source, inputs = object(), ("job", ("g1",))
    built: Built[str, tuple[str, tuple[str, ...]], str] = Built()
    assert built.keep("p", source, inputs, "task") == "task"
    assert built.take_over("p", source, inputs) is None  # the cycle being built is not the last one yet
    built.turn()
    assert built.take_over("p", source, ("job", ("g1",))) == "task"  # equal inputs, not the same tuple
    assert built.take_over("p", object(), inputs) is None  # an equal source is not enough
    assert built.take_over("p", source, ("job", ())) is None
    assert built.take_over("q", source, inputs) is None


def test_a_turn_drops_what_the_cycle_did_not_keep_or_carry():
    generation: Generation[str, int] = Generation()
    generation.current.update(a=1, b=2, c=3)
    generation.turn()
    assert generation.previous == {"a": 1, "b": 2, "c": 3} and generation.current == {}
    generation.carry({"b", "x"})
    assert generation.current == {"a": 1, "c": 3} and generation.previous == {"b": 2}  # left to work out again
    generation.current["d"] = 4
    generation.turn()
    assert generation.previous == {"a": 1, "c": 3, "d": 4}
    generation.turn()  # a cycle that carried nothing and kept nothing
    assert generation.previous == {}
