"""``warmfit policies``: list the registered pricing policies."""

from __future__ import annotations

import typer


def policies_command() -> None:
    """List the registered pricing policies, one line each.

    Example: warmfit policies
    """
    from warmfit.policies import get_policy, policy_names

    names = policy_names()
    width = max(len(n) for n in names)
    for name in names:
        typer.echo(f"{name:<{width}}  {get_policy(name).summary}")
