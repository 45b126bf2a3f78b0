"""Build frozen dataclass instances without their per-field ``object.__setattr__`` (internal).

A frozen dataclass's ``__init__`` sets each field through ``object.__setattr__``: for the
objects the executor makes on every step (a `planexec.results.StepResult` has 20 fields,
events 5 to 9) that is most of their cost. `build` fills the instance's ``__dict__`` at
once, with the class's defaults and default factories, then runs ``__post_init__`` if the
class has one: the same object, for classes without ``__slots__`` and without
``InitVar`` or ``init=False`` fields (the callers' tests hold each class to its
constructor).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any, Generic, TypeVar, cast, overload

import planexec._fastpaths as _fastpaths

__all__ = ["build", "cached", "frozen_slots"]

T = TypeVar("T")
V = TypeVar("V")


_Fields = tuple[
    dict[str, Any], tuple[tuple[str, Callable[[], Any]], ...], frozenset[str], frozenset[str],
    bool,
]


@functools.cache
def _fields(cls: type) -> _Fields:
    """A dataclass's defaults, default factories, required and all fields, and a post-init."""
    plain: dict[str, Any] = {}
    factories: list[tuple[str, Callable[[], Any]]] = []
    required: set[str] = set()
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            plain[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            factories.append((f.name, f.default_factory))
        else:
            required.add(f.name)
    names = frozenset(f.name for f in dataclasses.fields(cls))
    if "__slots__" in vars(cls):  # its fields are slots, not in ``__dict__``
        names = frozenset()  # no field is known here: the constructor builds it
    return plain, tuple(factories), frozenset(required), names, hasattr(cls, "__post_init__")


def build(cls: type[T], fields: dict[str, Any]) -> T:
    """``cls(**fields)`` for a frozen dataclass, built at once.

    Raises:
        TypeError: a field that does not exist, or a required one missing (as the
            constructor raises it: it is then called). A class with ``__slots__`` is
            always built by its constructor.
    """
    if not _fastpaths.ON:  # the general path (`planexec._fastpaths`)
        return cls(**fields)
    plain, factories, required, names, post_init = _fields(cast(type, cls))
    if not fields.keys() <= names or not required <= fields.keys():
        return cls(**fields)
    obj = object.__new__(cls)
    data = obj.__dict__
    data.update(plain)
    for name, factory in factories:
        if name not in fields:
            data[name] = factory()
    data.update(fields)
    if post_init:
        obj.__post_init__()  # type: ignore[attr-defined]
    return obj


class cached(Generic[T, V]):  # noqa: N801 - used as a decorator, like `functools.cached_property`
    """`functools.cached_property` without its lock: computed on first use, then a field.

    Python 3.11's ``cached_property`` takes one lock per property (shared by every
    instance) on every first use; for a value computed from a frozen object's fields
    that lock buys nothing: two threads that race compute the same value, and either
    stays. Like ``cached_property`` (and as in Python 3.12), the value is stored in the
    instance's ``__dict__`` under the attribute's name, where later lookups find it
    without calling this descriptor.
    """

    def __init__(self, fn: Callable[[T], V]) -> None:
        self.fn = fn
        self.name = fn.__name__
        self.__doc__ = fn.__doc__

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> cached[T, V]: ...

    @overload
    def __get__(self, obj: T, owner: type | None = None) -> V: ...

    def __get__(self, obj: T | None, owner: type | None = None) -> V | cached[T, V]:
        if obj is None:
            return self
        value = obj.__dict__[self.name] = self.fn(obj)
        return value


def frozen_slots(cls: type[T]) -> type[T]:
    """Put under ``@dataclass(frozen=True, slots=True)``: every assignment refused alike.

    Python 3.11's frozen ``__setattr__`` and ``__delattr__`` compare ``type(self)`` with
    the class as it was before ``slots=True`` made it anew: assigning or deleting a name
    that is not a field then fails with `TypeError` (from ``super()``) instead of
    `dataclasses.FrozenInstanceError`, as it does without slots. Their ``cls`` is made
    the class that was made (nothing changes where it already is).
    """
    for name in ("__setattr__", "__delattr__"):
        fn = vars(cls)[name]
        for var, cell in zip(fn.__code__.co_freevars, fn.__closure__ or (), strict=True):
            if var == "cls":
                cell.cell_contents = cls
    return cls
