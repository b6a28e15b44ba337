"""Which policies and which engine a replay runs (shared by every way to replay)."""

from __future__ import annotations

from collections.abc import Sequence

from warmfit.errors import UsageError
from warmfit.policies import Policy, checked_class, get_policy
from warmfit.policies.rule import is_declared

DEFAULT_POLICIES = ("max-merge", "warm-fit")
ENGINES = ("auto", "scalar", "vectorized")


def resolve_policies(names: Sequence[str | type[Policy]] | None) -> list[type[Policy]]:
    """Policy classes for names, ``module:Class`` specs or classes; defaults when empty."""
    chosen = list(names) if names else list(DEFAULT_POLICIES)
    classes = [checked_class(p, repr(p)) if isinstance(p, type) else get_policy(p) for p in chosen]
    seen: set[str] = set()
    for cls in classes:
        if cls.name in seen:
            raise UsageError(f"policy {cls.name!r} is named twice; name each policy once.")
        seen.add(cls.name)
    return classes


def choose_engine(engine: str, classes: Sequence[type[Policy]]) -> str:
    """The engine that runs ``classes``: ``scalar`` or ``vectorized`` (``auto`` picks)."""
    if engine not in ENGINES:
        raise UsageError(f"must be one of {', '.join(ENGINES)}; got {engine!r}.", argument="engine")
    if engine == "scalar":
        return "scalar"
    vectorizable = all(is_declared(cls) for cls in classes)
    if engine == "vectorized" and not vectorizable:
        names = ", ".join(cls.name for cls in classes)
        raise UsageError(
            f"the vectorized engine: not every policy ({names}) is declared "
            "(warmfit.policies.rule.DeclaredPolicy), and only declared policies run on the "
            "vectorized engine; use the scalar or auto engine."
        )
    return "vectorized" if vectorizable else "scalar"
