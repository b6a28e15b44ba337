"""The two policies of ART PR #991: every rule of SPEC §4 by example, then
the invariants the PR relies on as hypothesis properties."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.command_line import Invoke, python_env, warmfit_process
from tests.strategies import byte_counts, histories, readings, requests
from tests.test_plot import worked
from warmfit.errors import PolicyError
from warmfit.policies import (
    MaxMerge,
    Policy,
    PriceRequest,
    Reading,
    WarmAffine,
    WarmFit,
    get_policy,
    policy_names,
    register,
)
from warmfit.replay import estimate_bytes, replay

KB = 1000


def whole(n: int, delta: int, m: int | None = None, o: int = 0) -> Reading:
    return Reading(n, m or n, delta, o, whole=True)


def forward(n: int, delta: int, m: int | None = None, kind: str = "flat") -> Reading:
    return Reading(n, m or n, delta, 0, whole=False, phase="forward", kind=kind)


def req(n: int, m: int | None = None) -> PriceRequest:
    return PriceRequest(n, m or n)


def fed(cls: type[Policy], *history: Reading) -> Policy:
    profile = cls()
    for reading in history:
        profile.observe(reading)
    return profile


# ----------------------------------------------------------------- worked examples


def test_rate_and_sharing_of_a_reading() -> None:
    # rate = max(0, delta - o) / n = (10_000 - 2_000) / 100 = 80 B/token; sharing = 300/100
    r = Reading(100, 300, 10_000, 2_000)
    assert r.rate == 80.0
    assert r.sharing == 3.0
    # outputs larger than the delta give rate 0, never negative
    assert Reading(100, 100, 1_000, 5_000).rate == 0.0


def test_a_reading_and_a_request_given_only_tokens_take_the_documented_defaults() -> None:
    # What a policy of one's own sees when a caller gives tokens and bytes only: no
    # outputs, not whole, the caller phase, a flat wave, no floor (base.py's defaults).
    r = Reading(100, 200, 5_000)
    assert (r.output_bytes, r.whole, r.phase, r.kind, r.static_floor_bytes) == (
        0,
        False,
        "caller",
        "flat",
        None,
    )
    assert r.rate == 50.0  # every one of the 5_000 bytes is above the (no) outputs
    q = PriceRequest(100, 200)
    assert (q.output_bytes, q.kind, q.static_floor_bytes) == (0, "flat", None)


@pytest.mark.parametrize("cls", [MaxMerge, WarmFit, WarmAffine])
def test_no_profile_before_any_reading(cls: type[Policy]) -> None:
    assert cls().price(req(1_000)) is None


def test_max_merge_keeps_the_highest_rate_and_sharing() -> None:
    # rates 275, 206, 247 KB/token -> 275 KB/token; sharing 1.0, 2.0, 1.5 -> 2.0
    p = fed(
        MaxMerge,
        whole(15_600, 275 * KB * 15_600),
        whole(30_000, 206 * KB * 30_000, m=60_000),
        whole(20_000, 247 * KB * 20_000, m=30_000),
    )
    assert p.rate_max == 275 * KB
    assert p.sharing_max == 2.0
    # 40k packed, 60k logical: max(40_000, 60_000 / 2.0) = 40_000 -> 275_000 * 40_000
    assert p.price(req(40_000, 60_000)) == 275_000 * 40_000
    # 10k packed, 100k logical: deeper sharing than seen scales up: 100_000 / 2.0 = 50_000
    assert p.price(req(10_000, 100_000)) == 275_000 * 50_000


def test_max_merge_sharing_never_below_one() -> None:
    p = fed(MaxMerge, whole(100, 1_000))
    assert p.sharing_max == 1.0


def test_seed_touches_only_max_merge_fields() -> None:
    # The first whole reading is the seed: it pays one-time costs and never enters the fit.
    p = fed(WarmFit, whole(15_600, 275 * KB * 15_600))
    assert p.wholes == 1 and p.warm_tokens is None and p.warm_rate == 0.0
    # without a warm fit, warm-fit prices exactly as max-merge
    assert p.price(req(30_000)) == fed(MaxMerge, whole(15_600, 275 * KB * 15_600)).price(
        req(30_000)
    )


def test_readings_before_the_seed_touch_only_max_merge_fields() -> None:
    # forward readings come before the first whole one: no pending rate from them
    p = fed(WarmFit, forward(1_000, 900_000), forward(2_000, 100_000))
    assert p.wholes == 0 and p.warm_rate == 0.0 and p.rate_max == 900.0


def test_warm_fit_after_the_seed_prices_below_max_merge() -> None:
    # seed 275 KB/token at 15.6k tokens; warm wave 220 KB/token at 20k tokens
    p = fed(WarmFit, whole(15_600, 275 * KB * 15_600), whole(20_000, 220 * KB * 20_000))
    assert (p.warm_rate, p.warm_tokens, p.warm_sharing) == (220 * KB, 20_000, 1.0)
    # a 30k wave: min(275_000 * 30_000, 220_000 * max(20_000, 30_000)) = 6.6 GB
    assert p.price(req(30_000)) == 220_000 * 30_000


def test_pending_rate_is_inert_until_a_whole_reading() -> None:
    seed = whole(15_600, 275 * KB * 15_600)
    # a split child after the seed runs 260 KB/token: it raises the pending warm rate ...
    p = fed(WarmFit, seed, forward(10_000, 260 * KB * 10_000, kind="split_child"))
    assert p.warm_rate == 260 * KB and p.warm_tokens is None
    # ... which prices nothing yet: still max-merge
    assert p.price(req(30_000)) == 275_000 * 30_000
    # a whole warm wave at 220 KB/token creates the fit; the pending 260 is kept, not dropped
    p.observe(whole(20_000, 220 * KB * 20_000))
    assert p.warm_rate == 260 * KB
    assert p.price(req(30_000)) == 260_000 * 30_000


def test_non_whole_caller_reading_cannot_set_the_extent() -> None:
    # an interrupted caller phase (nested wave in its yield) is not whole
    interrupted = Reading(5_000, 5_000, 200 * KB * 5_000, whole=False, phase="caller")
    p = fed(
        WarmFit, whole(15_600, 275 * KB * 15_600), interrupted, whole(20_000, 210 * KB * 20_000)
    )
    assert p.warm_tokens == 20_000  # not 5_000
    assert p.warm_rate == 210 * KB


def test_extent_grows_down_and_small_waves_price_as_the_smallest_warm_wave() -> None:
    p = fed(WarmFit, whole(15_600, 275 * KB * 15_600), whole(30_000, 210 * KB * 30_000))
    # a 10k wave is priced as if it were 30k: 210_000 * 30_000, capped by max-merge 275_000 * 10_000
    assert p.price(req(10_000)) == min(275_000 * 10_000, 210_000 * 30_000)
    assert p.price(req(25_000)) == 210_000 * 30_000
    # a smaller whole wave lowers the extent to 20k (and raises the rate)
    p.observe(whole(20_000, 230 * KB * 20_000))
    assert (p.warm_tokens, p.warm_rate) == (20_000, 230 * KB)
    assert p.price(req(25_000)) == 230_000 * 25_000
    # a larger one never raises the extent back
    p.observe(whole(40_000, 200 * KB * 40_000))
    assert p.warm_tokens == 20_000


def test_warm_sharing_scales_a_rate_learned_under_lighter_sharing() -> None:
    p = fed(
        WarmFit,
        whole(15_600, 275 * KB * 15_600, m=18_720),  # seed, sharing 1.2 (max-merge only)
        whole(20_000, 220 * KB * 20_000, m=30_000),  # warm, sharing 1.5
    )
    assert p.warm_sharing == 1.5 and p.sharing_max == 1.5
    # 30k packed, 90k logical (sharing 3): priced as 90_000 / 1.5 = 60_000 tokens.
    # warm 220_000 * 60_000 = 13.2 GB; max-merge 275_000 * 60_000 = 16.5 GB; the lower wins
    assert p.price(req(30_000, 90_000)) == 220_000 * 60_000
    # at sharing 1.5 or lighter the packed count rules: 220_000 * 30_000
    assert p.price(req(30_000, 45_000)) == 220_000 * 30_000


def test_price_changes_nothing() -> None:
    p = fed(WarmFit, whole(100, 27_500), whole(200, 44_000))
    before = dict(vars(p))
    p.price(req(5_000, 9_000))
    assert vars(p) == before


def test_estimate_arithmetic_follows_the_spec_to_the_byte() -> None:
    # p = 6_600_000_000.9 -> int 6_600_000_000; o = 240_000; f = 1.1
    # (240_000 + 6_600_000_000) * 1.1 = 7_260_264_000.000001 -> 7_260_264_000
    assert estimate_bytes(6_600_000_000.9, 240_000, None, 1.1) == (7_260_264_000, "profile")
    # a floor of 7e9 above int(p) sets it: (240_000 + 7e9) * 1.1
    assert estimate_bytes(6_600_000_000.9, 240_000, 7_000_000_000, 1.1) == (
        int((240_000 + 7_000_000_000) * 1.1),
        "floor",
    )
    # equal: int(p) >= s means the profile set it
    assert estimate_bytes(100.5, 0, 100, 1.0) == (100, "profile")
    # a floor of 0 is a floor: no profile -> priced by it
    assert estimate_bytes(None, 10, 0, 1.5) == (15, "floor")


# ----------------------------------------------------------------- registry


def test_registry_lists_builtins_and_rejects_unknown_names() -> None:
    assert policy_names()[:2] == ["max-merge", "warm-fit"]
    assert get_policy("warm-fit") is WarmFit
    with pytest.raises(PolicyError, match="unknown policy 'nope'"):
        get_policy("nope")
    with pytest.raises(PolicyError, match="cannot load policy"):
        get_policy("no.such.module:Thing")
    with pytest.raises(PolicyError, match="not a subclass"):
        get_policy("warmfit.policies:register")


def test_registering_a_second_policy_under_a_taken_name_fails() -> None:
    class Impostor(MaxMerge):
        name = "max-merge"

    with pytest.raises(PolicyError, match="two policies are named 'max-merge'"):
        register(Impostor)


@pytest.mark.parametrize("name", [None, "", 7], ids=["unset", "empty", "not-a-string"])
def test_a_policy_class_without_a_usable_name_is_refused(name: object) -> None:
    """A concrete policy class must name itself (its ``--policy`` name): unset, empty or
    not a string is refused before anything is registered."""

    class Nameless(MaxMerge):
        pass

    if name is None:
        Nameless.name = None  # type: ignore[assignment]  # as if no class above had set one
    else:
        Nameless.name = name  # type: ignore[assignment]
    with pytest.raises(
        PolicyError, match=r"^policy class .*Nameless has no 'name': give it one\.$"
    ):
        register(Nameless)
    assert Nameless not in [get_policy(n) for n in policy_names()]


def test_register_gives_back_the_class_and_refuses_an_abstract_one() -> None:
    """Usable as a decorator (the class is given back); a named class that leaves
    abstract methods is named with what it lacks."""

    class Half(Policy):
        name = "half"

    with pytest.raises(
        PolicyError, match=r"^policy class .*Half does not implement observe, price\.$"
    ):
        register(Half)
    assert register(MaxMerge) is MaxMerge


def test_an_unknown_name_with_nothing_close_gets_no_suggestion() -> None:
    with pytest.raises(PolicyError) as caught:
        get_policy("zzzz")
    assert str(caught.value) == (
        "unknown policy 'zzzz'; registered policies: max-merge, warm-fit, warm-affine, "
        "envelope. Run 'warmfit policies' to list them, or give 'module:Class'."
    )


def test_a_module_that_cannot_be_imported_gets_no_file_hint() -> None:
    with pytest.raises(PolicyError) as caught:
        get_policy("no_such_module_here:Thing")
    assert str(caught.value).startswith(
        "cannot load policy 'no_such_module_here:Thing': ModuleNotFoundError: No module named "
        "'no_such_module_here'. Give a registered name"
    )


POLICY_HERE = "from warmfit.policies import MaxMerge\n\nclass Here(MaxMerge):\n    name = 'here'\n"


@pytest.mark.parametrize(
    "path_has", ["nothing", "the folder", "an empty entry"], ids=["neither", "cwd", "empty"]
)
def test_a_module_in_the_current_folder_is_found_as_python_m_finds_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path_has: str
) -> None:
    """``-p here_policy:Here`` from the folder that holds ``here_policy.py``: the folder
    is put on sys.path once, and only when neither it nor ``""`` (the current folder,
    as ``python -m`` gives it) is there already."""
    (tmp_path / "here_policy.py").write_text(POLICY_HERE)
    monkeypatch.chdir(tmp_path)
    start = [p for p in sys.path if p not in ("", str(tmp_path))]
    start += {"nothing": [], "the folder": [str(tmp_path)], "an empty entry": [""]}[path_has]
    monkeypatch.setattr(sys, "path", list(start))
    monkeypatch.delitem(sys.modules, "here_policy", raising=False)
    try:
        assert get_policy("here_policy:Here").name == "here"
        added = [str(tmp_path)] if path_has == "nothing" else []
        assert sys.path == start + added
    finally:
        sys.modules.pop("here_policy", None)


# ----------------------------------------------------------------- properties

POLICIES = [MaxMerge, WarmFit, WarmAffine]


@pytest.mark.parametrize("cls", POLICIES)
@given(history=histories, r=requests(), extra=st.integers(0, 100_000))
def test_price_never_shrinks_as_packed_tokens_grow_at_fixed_logical(
    cls: type[Policy], history: list[Reading], r: PriceRequest, extra: int
) -> None:
    p = fed(cls, *history)
    small = PriceRequest(r.packed_tokens, r.logical_tokens + extra)
    big = PriceRequest(min(r.packed_tokens + extra, small.logical_tokens), small.logical_tokens)
    assert _estimate(p, big, r) >= _estimate(p, small, r)


@pytest.mark.parametrize("cls", POLICIES)
@given(history=histories, r=requests(), extra=st.integers(0, 100_000))
def test_price_never_shrinks_as_waves_grow_without_sharing(
    cls: type[Policy], history: list[Reading], r: PriceRequest, extra: int
) -> None:
    p = fed(cls, *history)
    n = r.packed_tokens
    assert _estimate(p, req(n + extra), r) >= _estimate(p, req(n), r)


@pytest.mark.parametrize("cls", POLICIES)
@given(history=histories, r=requests(), extra=st.integers(0, 100_000))
def test_price_never_shrinks_as_logical_tokens_grow(
    cls: type[Policy], history: list[Reading], r: PriceRequest, extra: int
) -> None:
    p = fed(cls, *history)
    deeper = PriceRequest(r.packed_tokens, r.logical_tokens + extra)
    assert _estimate(p, deeper, r) >= _estimate(p, r, r)


def _estimate(profile: Policy, wave: PriceRequest, context: PriceRequest) -> int:
    """The full estimate (floor, outputs, f=1.1) for ``wave`` with ``context``'s o and s;
    -1 for an unpriced wave so that comparisons stay total."""
    est, _ = estimate_bytes(
        profile.price(wave), context.output_bytes, context.static_floor_bytes, 1.1
    )
    return -1 if est is None else est


@given(history=histories, r=requests())
def test_warm_fit_never_prices_above_max_merge(history: list[Reading], r: PriceRequest) -> None:
    mm, wf = fed(MaxMerge, *history).price(r), fed(WarmFit, *history).price(r)
    assert (mm is None) == (wf is None)
    if mm is not None and wf is not None:
        assert wf <= mm


@given(history=histories, r=requests())
def test_warm_affine_never_prices_above_warm_fit(history: list[Reading], r: PriceRequest) -> None:
    wf, wa = fed(WarmFit, *history).price(r), fed(WarmAffine, *history).price(r)
    assert (wf is None) == (wa is None)
    if wf is not None and wa is not None:
        assert wa <= wf


@given(history=histories)
def test_warm_affine_never_prices_an_observed_warm_whole_wave_below_its_compute(
    history: list[Reading],
) -> None:
    seeds = [i for i, h in enumerate(history) if h.whole]
    profile = fed(WarmAffine, *history)
    for reading in history[seeds[0] + 1 :] if seeds else []:
        if not reading.whole:
            continue
        p = profile.price(PriceRequest(reading.packed_tokens, reading.logical_tokens))
        assert p is not None
        compute = max(0, reading.delta_bytes - reading.output_bytes)
        assert p >= compute * (1 - 1e-12)  # one rounding of slope * tokens


@pytest.mark.parametrize("cls", POLICIES)
@given(history=histories, r=requests(), floor=byte_counts, f=st.floats(1.0, 2.0))
def test_no_estimate_below_outputs_plus_floor(
    cls: type[Policy], history: list[Reading], r: PriceRequest, floor: int, f: float
) -> None:
    # The floor is drawn, not filtered for: half the requests have none, and an assume()
    # threw away half the examples, whose drawing counts towards the too_slow health check.
    est, _ = estimate_bytes(fed(cls, *history).price(r), r.output_bytes, floor, f)
    assert est is not None
    assert est >= int((r.output_bytes + floor) * f)


@st.composite
def linear_histories(draw: st.DrawFn) -> tuple[int, int, list[Reading]]:
    """Histories whose whole readings follow memory = fixed + per_token * n.

    The seed (first whole reading) may pay any extra one-time cost; readings
    that are not whole may be anything (they can only raise a rate).
    """
    fixed = draw(st.integers(0, 2**32))
    per_token = draw(st.integers(1, 2**20))
    history = []
    seeded = False
    count = draw(st.integers(1, 10))
    surely_whole = draw(st.integers(0, count - 1))  # at least one whole reading
    for i in range(count):
        r = draw(readings(whole=True if i == surely_whole else None))
        if r.whole:
            cold = 0 if seeded else draw(st.integers(0, 2**33))
            seeded = True
            delta = r.output_bytes + fixed + per_token * r.packed_tokens + cold
            r = Reading(r.packed_tokens, r.logical_tokens, delta, r.output_bytes, whole=True)
        history.append(r)
    return fixed, per_token, history


@pytest.mark.parametrize("cls", [WarmFit, WarmAffine])
@given(case=linear_histories(), r=requests())
def test_never_prices_below_true_compute_within_the_seen_extent(
    cls: type[Policy], case: tuple[int, int, list[Reading]], r: PriceRequest
) -> None:
    fixed, per_token, history = case
    smallest = min(h.packed_tokens for h in history if h.whole)
    # Within the extent the profile has seen (waves at least as large as its smallest
    # whole wave) both fits cover fixed + per_token * n; see docs/explanation/spec-notes.md.
    # warm-affine's line is exact there, from the smallest warm wave up. The wave is
    # moved into that extent rather than filtered for: an assume() threw away more than
    # half the examples, whose drawing counts towards the too_slow health check.
    shift = smallest - 1
    r = replace(r, packed_tokens=r.packed_tokens + shift, logical_tokens=r.logical_tokens + shift)
    p = fed(cls, *history).price(r)
    assert p is not None
    true_compute = fixed + per_token * r.packed_tokens
    assert p >= true_compute * (1 - 1e-12)  # one rounding of rate * n


def test_below_every_whole_wave_warm_fit_inherits_max_merge_underpricing() -> None:
    # memory = 1 GB + 100 KB/token. Seed at 40k tokens, warm wave at 50k. A 1k-token wave
    # costs 1.1 GB, but max-merge prices 1k * 125 KB = 0.125 GB and warm-fit takes the lower.
    fixed, per_token = 10**9, 100 * KB
    p = fed(
        WarmFit,
        whole(40_000, fixed + per_token * 40_000),
        whole(50_000, fixed + per_token * 50_000),
    )
    price = p.price(req(1_000))
    assert price is not None and price < fixed + per_token * 1_000


REPO = Path(__file__).resolve().parent.parent


# --------------------------------------------------------------------------- 4. defaults


def test_replay_and_check_default_to_max_merge_warm_fit_and_envelope(
    tmp_path: Path, invoke: Invoke
) -> None:
    """SPEC §9: without -p, the PR's two and the policy the README recommends, in order."""
    assert replay(worked(), engine="scalar").policies == ("max-merge", "warm-fit", "envelope")
    code, out, _ = invoke("replay", str(REPO / "traces" / "pr991"), "--format", "csv")
    assert code == 0
    policies = [line.split(",")[1] for line in out.splitlines()[1:]]
    assert policies == ["max-merge", "warm-fit", "envelope"] * 2
    expect = tmp_path / "e.toml"
    code, out, _ = invoke("check", str(REPO / "traces" / "pr991"), "--write-expect", str(expect))
    assert code == 0 and "(max-merge, warm-fit, envelope)" in out
    assert "[runs.EP1.envelope]" in expect.read_text()


# --------------------------------------------------------------------------- 8. smaller


def test_did_you_mean_is_not_capitalised_mid_sentence() -> None:
    with pytest.raises(PolicyError) as caught:
        get_policy("warmfit")
    assert str(caught.value).startswith(
        "unknown policy 'warmfit' (did you mean 'warm-fit'?); registered policies: "
    )
    assert "Did you" not in str(caught.value)


def test_a_misspelt_policy_gets_a_suggestion() -> None:
    from warmfit.policies import get_policy

    with pytest.raises(PolicyError, match=r"\(did you mean 'warm-fit'\?\); registered"):
        get_policy("warmfit")
    with pytest.raises(PolicyError, match="not its file: mypol:MeanWhole"):
        get_policy("mypol.py:MeanWhole")


# --------------------------------------------------------------------------- plugins

#: A policy package as pip would install it: a module and its ``.dist-info`` whose
#: ``entry_points.txt`` declares the module's class in the ``warmfit.policies`` group.
PLUGIN_MODULE = '''
from warmfit.policies import MaxMerge


class Copied(MaxMerge):
    """max-merge under another name: its rows must equal max-merge's."""

    name = "copied-max-merge"
    summary = "max-merge, installed as a plugin"
'''


def install_plugin(site: Path, entries: str, module: str = PLUGIN_MODULE) -> Path:
    """Write the plugin module and a dist-info declaring ``entries`` under ``site``."""
    info = site / "copied_plugin-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: copied-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[warmfit.policies]\n{entries}\n")
    (site / "copied_plugin.py").write_text(module)
    return site


@pytest.fixture
def fresh_registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The registry as if no entry point had been read yet; restored afterwards."""
    import warmfit.policies as registry

    monkeypatch.setattr(registry, "_ENTRY_POINTS_LOADED", False)
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    yield
    sys.modules.pop("copied_plugin", None)


def test_a_policy_installed_as_a_plugin_is_listed_and_replays(tmp_path: Path) -> None:
    """The ``warmfit.policies`` entry-point group, end to end in a process of its own:
    the plugin is listed after the built-ins, and prices a stored trace by its name
    exactly as the class it copies does."""
    site = install_plugin(tmp_path / "site", "copied = copied_plugin:Copied")
    env = python_env(site)
    listed = warmfit_process("policies", env=env)
    assert listed.returncode == 0, listed.stderr
    names = [line.split()[0] for line in listed.stdout.splitlines()]
    assert names == ["max-merge", "warm-fit", "warm-affine", "envelope", "copied-max-merge"]
    assert "max-merge, installed as a plugin" in listed.stdout
    trace = str(REPO / "traces" / "pr991")
    run = warmfit_process("replay", trace, "-p", "max-merge", "-p", "copied-max-merge",
                          "--format", "csv", env=env)  # fmt: skip
    assert run.returncode == 0, run.stderr
    rows = [line.split(",") for line in run.stdout.splitlines()[1:]]
    assert [r[1] for r in rows] == ["max-merge", "copied-max-merge"] * 2
    for ours, theirs in zip(rows[::2], rows[1::2], strict=True):
        assert ours[:1] + ours[2:] == theirs[:1] + theirs[2:]


def test_plugins_are_read_once_and_only_when_a_name_is_looked_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_registry: None
) -> None:
    import warmfit.policies as registry

    monkeypatch.syspath_prepend(str(install_plugin(tmp_path, "copied = copied_plugin:Copied")))
    assert "copied-max-merge" not in registry._REGISTRY  # nothing read at import
    assert get_policy("copied-max-merge").name == "copied-max-merge"
    assert policy_names()[-1] == "copied-max-merge"
    # once read, the group is not read again: a plugin removed since stays registered
    del registry._REGISTRY["copied-max-merge"]
    assert "copied-max-merge" not in policy_names()


def test_as_imported_the_registry_has_read_no_plugin_yet(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second, fresh instance of the module (its own registry, as a new process
    imports it): the built-ins only, then the plugins at the first lookup."""
    import importlib.util

    import warmfit.policies as registry

    monkeypatch.syspath_prepend(str(install_plugin(tmp_path, "copied = copied_plugin:Copied")))
    spec = importlib.util.spec_from_file_location("fresh_policies", registry.__file__)
    assert spec is not None and spec.loader is not None
    fresh = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fresh)
    try:
        assert list(fresh._REGISTRY) == ["max-merge", "warm-fit", "warm-affine", "envelope"]
        assert fresh.policy_names()[-1] == "copied-max-merge"
    finally:
        sys.modules.pop("copied_plugin", None)


@pytest.mark.parametrize(
    ("entries", "module", "expected"),
    [
        (
            "broken = copied_plugin:Copied",
            "raise ImportError('needs pricing-extras')\n",
            "the policy plugin 'broken' (copied_plugin:Copied) failed to load: needs "
            "pricing-extras. Fix or uninstall the package that provides it.",
        ),
        (
            "clash = copied_plugin:Clash",
            "from warmfit.policies import WarmFit\n\n\nclass Clash(WarmFit):\n"
            "    name = 'max-merge'\n",
            "the policy plugin 'clash' (copied_plugin:Clash) failed to load: two policies "
            "are named 'max-merge': warmfit.policies.max_merge.MaxMerge and "
            "copied_plugin.Clash. Rename one of them.",
        ),
    ],
    ids=["import-error", "name-taken"],
)
def test_a_plugin_that_cannot_be_registered_is_named_with_exit_2(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    fresh_registry: None,
    invoke: Invoke,
    entries: str,
    module: str,
    expected: str,
) -> None:
    monkeypatch.syspath_prepend(str(install_plugin(tmp_path, entries, module)))
    code, out, err = invoke("replay", str(REPO / "traces" / "pr991"), "-p", "warm-fit")
    assert (code, out) == (2, "")
    assert expected in err
    assert "Traceback" not in err
