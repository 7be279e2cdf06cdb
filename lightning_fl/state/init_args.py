"""Objects that remember the arguments they were built with (to check a resumed run's configuration)."""

from __future__ import annotations

import functools
import inspect
from typing import Any


class RecordsInitArgs:
    """Mixin: every instance keeps the arguments of its outermost ``__init__`` call as :attr:`init_args`.

    Subclasses need no code: ``__init_subclass__`` wraps each class's own ``__init__`` (signature and
    docstring preserved, so LightningCLI builds the same parser). Used by callbacks and datamodules so a
    checkpoint can record the aggregation's and the data's arguments and a resume can name what changed.
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        init = cls.__dict__.get("__init__")
        if init is None or getattr(init, "_records_init_args", False):
            return
        signature = inspect.signature(init)

        @functools.wraps(init)
        def __init__(self: Any, *args: Any, **kw: Any) -> None:
            if "_init_args" not in self.__dict__:  # the outermost call: a subclass's super().__init__ is not it
                try:
                    bound = signature.bind(self, *args, **kw)
                    bound.apply_defaults()
                    recorded = dict(list(bound.arguments.items())[1:])
                except TypeError:
                    recorded = {}
                self.__dict__["_init_args"] = recorded
            init(self, *args, **kw)

        __init__._records_init_args = True  # type: ignore[attr-defined]
        cls.__init__ = __init__  # type: ignore[method-assign]

    @property
    def init_args(self) -> dict[str, Any]:
        """The arguments this object was built with, by name (defaults filled in)."""
        return dict(self.__dict__.get("_init_args", {}))


def describe(value: Any) -> Any:
    """A comparable, picklable description of a configuration value (objects by class and arguments)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [describe(v) for v in value]
    if isinstance(value, dict):
        return {str(k): describe(v) for k, v in value.items()}
    if isinstance(value, RecordsInitArgs):
        return {"class": type(value).__qualname__, **{k: describe(v) for k, v in value.init_args.items()}}
    if type(value).__repr__ is not object.__repr__:  # config objects with a value repr (partitions)
        return f"{type(value).__qualname__}: {value!r}"
    return type(value).__qualname__
