"""What one cycle of the cache built, by key, kept for the next cycle to take over.

A :class:`Generation` holds the values of the cycle being built (:attr:`~Generation.current`) and those of the
last cycle (:attr:`~Generation.previous`). A cycle either carries the last cycle's values over whole but for the
keys that may have changed (:meth:`~Generation.carry`, in place: it costs what changed, not what there is), or
takes one over when it would be built from the same
(:meth:`Built.take_over`): from the very same source object -- an informer keeps its stored view when a new
version changes nothing the view keeps -- and equal inputs. When the build is done, :meth:`~Generation.turn`
makes its values the last cycle's.
"""

from __future__ import annotations

from collections.abc import Hashable, Set
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
In = TypeVar("In")


class Generation(Generic[K, V]):
    """Values by key of the cycle being built and of the last one."""

    __slots__ = ("current", "previous")

    def __init__(self) -> None:
        self.current: dict[K, V] = {}
        self.previous: dict[K, V] = {}

    def carry(self, but: Set[K] = frozenset()) -> None:
        """The last cycle's values, but those of the keys ``but``, are the cycle's (before it adds its own); the
        last cycle's values are left for the keys ``but`` alone (:attr:`previous`), those the cycle works out again."""
        current = self.previous
        self.previous = {key: current.pop(key) for key in but & current.keys()}
        self.current = current

    def turn(self) -> None:
        """The cycle is built: its values are the last cycle's for the next one; the older ones are dropped."""
        self.previous, self.current = self.current, {}


class Built(Generation[K, tuple[object, In, V]], Generic[K, In, V]):
    """Values built from a source object and inputs, each kept with them."""

    __slots__ = ()

    def take_over(self, key: K, source: object, inputs: In) -> V | None:
        """The last cycle's value of ``key`` when it was built from this very ``source`` and equal ``inputs``."""
        kept = self.previous.get(key)
        return kept[2] if kept is not None and kept[0] is source and kept[1] == inputs else None

    def keep(self, key: K, source: object, inputs: In, value: V) -> V:
        """``value`` of ``key``, built from ``source`` and ``inputs``, is the cycle's."""
        self.current[key] = (source, inputs, value)
        return value
