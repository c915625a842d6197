"""A snapshot's memo: what the kernel and the plugins work out from a snapshot as built, by typed key.

A session changes only what it journals, so a value worked out from the snapshot as built holds for every
session on it, and a snapshot that follows another finds the memo of that one in
:attr:`~kai.framework.Snapshot.memo_before`. A :class:`MemoKey` names one such value and, by its type parameter,
the value's type; keys are told apart by identity (a module-level constant each), their names are for reading.
"""

from __future__ import annotations

from typing import Generic, TypeVar, cast

T = TypeVar("T")


class MemoKey(Generic[T]):
    """The key of a value of type ``T`` in a snapshot's memo."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"MemoKey({self.name!r})"


class Memo:
    """Values by :class:`MemoKey`, each of its key's type."""

    __slots__ = ("_values",)

    def __init__(self) -> None:
        self._values: dict[object, object] = {}

    def get(self, key: MemoKey[T]) -> T | None:
        """The value kept under ``key``, None when there is none."""
        return cast("T | None", self._values.get(key))

    def pop(self, key: MemoKey[T]) -> T | None:
        """The value kept under ``key``, taken out (None when there is none)."""
        return cast("T | None", self._values.pop(key, None))

    def __contains__(self, key: MemoKey[T]) -> bool:
        return key in self._values

    def __setitem__(self, key: MemoKey[T], value: T) -> None:
        self._values[key] = value
