"""``warmfit recommend``: how many tokens each policy would pack under a memory budget."""

from __future__ import annotations

from typing import Annotated

import typer

from warmfit.commands.options import (
    SAFETY,
    ClusterOpt,
    Engine,
    EngineOpt,
    Format,
    FormatOpt,
    JobsOpt,
    PathsArg,
    PolicyOpt,
    SafetyOpt,
    budget_bytes,
    streaming,
)


def recommend_command(
    paths: PathsArg,
    budget: Annotated[
        str,
        typer.Option(
            "--budget",
            help="Memory free above the baseline when a wave is admitted, e.g. 128.8GB or 80GiB.",
            show_default=False,
            metavar="SIZE",
        ),
    ],
    policy: PolicyOpt = None,
    safety: SafetyOpt = SAFETY,
    format: FormatOpt = Format.table,
    engine: EngineOpt = Engine.auto,
    jobs: JobsOpt = None,
    cluster: ClusterOpt = None,
) -> None:
    """Show the most tokens each policy admits under a budget, beside the measured limit.

    Example: warmfit recommend traces/art-h200 --budget 128.8GB -p warm-fit -p envelope

    Per run and signature, after learning the whole trace: the largest packed-token
    count each policy prices within the budget (the smallest over the ranks), the
    largest the measured waves show would have fitted (interpolated between the
    two measured waves around the budget, never extrapolated), and the gap: the
    tokens a policy leaves unused, or, negative, admits beyond what fitted. The
    trace is replayed once, streamed (bounded memory, --jobs, --cluster).
    """
    from warmfit.report.recommend import recommend_traces, render_recommendation

    limit = budget_bytes(budget, paths)
    assert limit is not None
    with streaming(paths, jobs, cluster) as jobs:
        result = recommend_traces(
            paths, limit, policy, safety, engine.value, jobs=jobs, cluster=cluster
        )
    typer.echo(render_recommendation(result, format.value), nl=False)
