"""Pricing policies and their registry.

Built-in policies are registered here; third-party ones register through the
``warmfit.policies`` entry-point group, or are named on the command line as
``module:Class`` (``-p mypkg.pricing:MyPolicy``).

>>> policy_names()[:3]
['max-merge', 'warm-fit', 'warm-affine']
>>> get_policy("warm-fit")().price(PriceRequest(packed_tokens=1, logical_tokens=1)) is None
True
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from importlib.metadata import entry_points

from warmfit.errors import PolicyError
from warmfit.policies.base import Policy, PriceRequest, Reading
from warmfit.policies.envelope import Envelope
from warmfit.policies.max_merge import MaxMerge
from warmfit.policies.warm_affine import WarmAffine
from warmfit.policies.warm_fit import WarmFit

__all__ = [
    "Envelope",
    "MaxMerge",
    "Policy",
    "PriceRequest",
    "Reading",
    "WarmAffine",
    "WarmFit",
    "checked_class",
    "get_policy",
    "policy_names",
    "register",
]

_REGISTRY: dict[str, type[Policy]] = {}
_ENTRY_POINTS_LOADED = False


def checked_class(obj: object, label: str) -> type[Policy]:
    """``obj`` if it is a concrete, named Policy subclass; else a PolicyError."""
    if not (isinstance(obj, type) and issubclass(obj, Policy)):
        raise PolicyError(f"{label!r} is not a subclass of warmfit.policies.Policy.")
    name = getattr(obj, "name", None)
    if not isinstance(name, str) or not name:
        raise PolicyError(f"policy class {obj.__qualname__} has no 'name': give it one.")
    if inspect.isabstract(obj):
        missing = ", ".join(sorted(getattr(obj, "__abstractmethods__", ())))
        raise PolicyError(f"policy class {obj.__qualname__} does not implement {missing}.")
    return obj


def register(cls: type[Policy]) -> type[Policy]:
    """Register a policy class under its ``name``; usable as a decorator."""
    cls = checked_class(cls, repr(cls))
    name = cls.name
    existing = _REGISTRY.get(name)
    if existing is not None and existing is not cls:
        raise PolicyError(
            f"two policies are named {name!r}: {existing.__module__}.{existing.__qualname__} "
            f"and {cls.__module__}.{cls.__qualname__}. Rename one of them."
        )
    _REGISTRY[name] = cls
    return cls


def _load_entry_points() -> None:
    global _ENTRY_POINTS_LOADED
    if _ENTRY_POINTS_LOADED:
        return
    _ENTRY_POINTS_LOADED = True
    for ep in entry_points(group="warmfit.policies"):
        try:
            register(ep.load())
        except Exception as exc:
            raise PolicyError(
                f"the policy plugin {ep.name!r} ({ep.value}) failed to load: {exc}. "
                "Fix or uninstall the package that provides it."
            ) from None


def policy_names() -> list[str]:
    """Names of every registered policy, built-ins first."""
    _load_entry_points()
    return list(_REGISTRY)


def get_policy(spec: str) -> type[Policy]:
    """The policy class for a registered name or a ``module:Class`` path."""
    if ":" in spec:
        module_name, _, attr = spec.partition(":")
        # Like `python -m`, look in the current directory too, so that a policy
        # module beside the traces works without setting PYTHONPATH.
        if os.getcwd() not in sys.path and "" not in sys.path:
            sys.path.append(os.getcwd())
        try:
            obj = getattr(importlib.import_module(module_name), attr)
        except Exception as exc:  # a user's module may fail in any way while importing
            hint = ""
            if module_name.endswith(".py"):
                hint = f" Name the module, not its file: {module_name[:-3]}:{attr}."
            raise PolicyError(
                f"cannot load policy {spec!r}: {type(exc).__name__}: {exc}.{hint} Give a "
                "registered name or an importable 'module:Class' (the module is looked for on "
                "PYTHONPATH and in the current directory)."
            ) from None
        return checked_class(obj, spec)
    _load_entry_points()
    try:
        return _REGISTRY[spec]
    except KeyError:
        import difflib

        close = difflib.get_close_matches(spec, list(_REGISTRY), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise PolicyError(
            f"unknown policy {spec!r}{hint}; registered policies: {', '.join(_REGISTRY)}. "
            "Run 'warmfit policies' to list them, or give 'module:Class'."
        ) from None


register(MaxMerge)
register(WarmFit)
register(WarmAffine)
register(Envelope)
