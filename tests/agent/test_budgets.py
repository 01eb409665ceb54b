"""Token and cost budgets: declared as limits, reserved before a request, charged after it,
shared down the delegation tree, never exceeded (docs/budgets.md)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tubeless import (
    AgentDefinitionError,
    Limits,
    Pipeline,
    PipelineRun,
    define_agent,
    define_tool,
    load_project,
    pipeline_tool,
)
from tubeless.agent import LimitReachedError, Usage
from tubeless.agent._usage import Ledger
from tubeless.errors import (
    AGENT_INVALID_DEFINITION,
    AGENT_LIMIT_REACHED,
    BUDGET_PRICE_UNKNOWN,
)
from tubeless.testing import call, capture_trace, continue_with, finish


def _chain(exc: BaseException | None) -> Iterator[BaseException]:
    seen: set[int] = set()
    pending = [exc]
    while pending:
        current = pending.pop(0)
        while current is not None and id(current) not in seen:
            seen.add(id(current))
            yield current
            inner = getattr(current, "run", None)
            if isinstance(inner, PipelineRun):
                pending.extend(error.exception for error in inner.errors)
            current = current.__cause__ or current.__context__


def _found(run: PipelineRun, kind: type[BaseException]) -> Any:
    for error in run.errors:
        for exc in _chain(error.exception):
            if isinstance(exc, kind):
                return exc
    raise AssertionError(f"no {kind.__name__} in {[e.format() for e in run.errors]}")


# -- Limits ---------------------------------------------------------------------------------------
def test_budgets_default_to_unbounded_and_keep_the_old_dict_form() -> None:
    limits = Limits()
    assert not limits.budgeted
    assert "max_cost_usd" not in limits.to_dict()


@pytest.mark.parametrize(
    ("given", "kept"),
    [
        pytest.param(Decimal("2.50"), Decimal("2.50"), id="decimal"),
        pytest.param(3, Decimal(3), id="int"),
        pytest.param("0.10", Decimal("0.10"), id="string"),
    ],
)
def test_max_cost_usd_takes_a_decimal_an_int_or_a_decimal_string(given: Any, kept: Any) -> None:
    limits = Limits(max_cost_usd=given)
    assert limits.max_cost_usd == kept
    assert isinstance(limits.max_cost_usd, Decimal)
    assert Decimal(limits.to_dict()["max_cost_usd"]) == kept


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        pytest.param(
            {"max_cost_usd": 0.1},
            "Agent limit max_cost_usd must be a Decimal, an int or a decimal string, not float "
            '(floats are imprecise: write max_cost_usd: "0.1").',
            id="float",
        ),
        pytest.param(
            {"max_cost_usd": "two"},
            "Agent limit max_cost_usd must be a decimal number such as '2.50'.",
            id="text",
        ),
        pytest.param(
            {"max_cost_usd": "-1"},
            "Agent limit max_cost_usd must be a finite amount >= 0.",
            id="neg",
        ),
        pytest.param(
            {"max_total_tokens": -1},
            f"Agent limit max_total_tokens must be between 0 and {2**53 - 1}.",
            id="negative-tokens",
        ),
        pytest.param(
            {"max_input_tokens": True},
            "Agent limit max_input_tokens must be an integer, not bool.",
            id="bool",
        ),
    ],
)
def test_bad_budgets_are_definition_errors(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(AgentDefinitionError) as caught:
        Limits(**fields)
    assert caught.value.code == AGENT_INVALID_DEFINITION
    assert caught.value.message == message


def _agent(decide: Any, limits: Any, **extra: Any) -> Pipeline:
    return define_agent(
        id="budgeted",
        input_schema=dict[str, Any],
        result_schema=str,
        initial_state=lambda validated: {},
        decide=decide,
        limits=limits,
        **extra,
    )


def test_a_budget_joins_the_identity_and_none_leaves_it_as_it_was() -> None:
    def decide(state: Any, ctx: Any) -> Any:
        return finish("done")

    plain = _agent(decide, {}).identity.definition_id
    assert _agent(decide, {"max_turns": 20}).identity.definition_id == plain
    tokens = _agent(decide, {"max_total_tokens": 100}).identity.definition_id
    cost = _agent(decide, {"max_cost_usd": "2"}).identity.definition_id
    other_cost = _agent(decide, {"max_cost_usd": "3"}).identity.definition_id
    assert len({plain, tokens, cost, other_cost}) == 4
    # One amount, however it is written, is one identity (YAML 2.0, Python Decimal("2.00")).
    assert _agent(decide, {"max_cost_usd": Decimal("2.00")}).identity.definition_id == cost


# -- ctx.usage ------------------------------------------------------------------------------------
def _model_decide(requests: list[int], *, reserve_out: int = 10, used: tuple[int, int] = (5, 5)):
    """A decide that 'asks a model' through ctx.usage: reserve 10 in / reserve_out out, charge
    ``used``; it finishes on its fourth request."""

    def decide(state: Any, ctx: Any) -> Any:
        reservation = ctx.usage.reserve(
            input_tokens=10, output_tokens=reserve_out, provider="acme", model="m1"
        )
        requests.append(ctx.turn)
        ctx.usage.charge(reservation, input_tokens=used[0], output_tokens=used[1])
        if ctx.turn >= 4:
            return finish("done")
        return continue_with(call("noop", {}))

    return decide


_NOOP = define_tool(
    description="Nothing.", input_schema=dict, output_schema=dict, run=lambda value, ctx: {}
)


def test_a_reservation_that_does_not_fit_is_refused_before_the_request() -> None:
    requests: list[int] = []
    agent = _agent(_model_decide(requests), {"max_total_tokens": 45}, tools={"noop": _NOOP})
    run = asyncio.run(agent.run({}))
    assert run.status == "failed"
    # Each request reserves 20 and uses 10: 10 + 10 consumed, then 20 + 20 > 45.
    assert requests == [1, 2, 3]
    error = _found(run, LimitReachedError)
    assert error.code == AGENT_LIMIT_REACHED
    assert (error.limit, error.bound, error.consumed, error.requested) == (
        "max_total_tokens",
        45,
        30,
        20,
    )
    assert error.message.startswith("Agent max_total_tokens=45 exceeded (consumed=30, requested=20")


def test_on_limit_finish_asks_for_a_final_decision_that_needs_no_request() -> None:
    def decide(state: Any, ctx: Any) -> Any:
        if ctx.final:
            return finish("partial")
        reservation = ctx.usage.reserve(input_tokens=10, output_tokens=10)
        ctx.usage.charge(reservation, input_tokens=10, output_tokens=10)
        return continue_with(call("noop", {}))

    agent = _agent(decide, {"max_total_tokens": 50, "on_limit": "finish"}, tools={"noop": _NOOP})
    with capture_trace() as trace:
        run = asyncio.run(agent.run({}, trace=trace))
    assert run.status == "completed"
    assert run.value == "partial"
    attributes = [
        r["payload"].get("attributes", {}) for r in trace.records if r["name"] == "step.attempted"
    ]
    reached = [a["agent.limitReached"] for a in attributes if "agent.limitReached" in a]
    assert reached == ["max_total_tokens"]


def test_usage_above_the_reservation_is_charged_and_nothing_more_is_admitted() -> None:
    seen: list[Any] = []

    def decide(state: Any, ctx: Any) -> Any:
        reservation = ctx.usage.reserve(input_tokens=1, output_tokens=1)
        ctx.usage.charge(reservation, input_tokens=80, output_tokens=0)
        seen.append(ctx.usage.remaining["max_input_tokens"])
        return continue_with(call("noop", {}))

    run = asyncio.run(_agent(decide, {"max_input_tokens": 50}, tools={"noop": _NOOP}).run({}))
    error = _found(run, LimitReachedError)
    assert seen == [0]
    assert (error.limit, error.consumed, error.requested) == ("max_input_tokens", 80, 1)


def test_a_response_without_usage_keeps_the_whole_reservation() -> None:
    usage = Usage((Ledger("s", {"max_total_tokens": 100}),), {})
    reservation = usage.reserve(input_tokens=30, output_tokens=20)
    usage.charge(reservation, input_tokens=None, output_tokens=None)
    assert usage.remaining["max_total_tokens"] == 50
    with pytest.raises(ValueError, match="charged already"):
        usage.charge(reservation, input_tokens=1, output_tokens=1)


def test_an_unbudgeted_context_reserves_and_charges_nothing() -> None:
    remaining: list[Any] = []

    def decide(state: Any, ctx: Any) -> Any:
        assert not ctx.usage.budgeted
        reservation = ctx.usage.reserve(input_tokens=10**12, output_tokens=10**12)
        assert ctx.usage.charge(reservation, input_tokens=1, output_tokens=1) is None
        remaining.append(dict(ctx.usage.remaining))
        return finish("done")

    run = asyncio.run(_agent(decide, {}).run({}))
    assert run.status == "completed"
    assert remaining == [
        {
            "max_input_tokens": None,
            "max_output_tokens": None,
            "max_total_tokens": None,
            "max_cost_usd": None,
        }
    ]


# -- prices ---------------------------------------------------------------------------------------
def test_an_unknown_price_with_a_cost_budget_fails_before_any_request() -> None:
    sent: list[int] = []

    def decide(state: Any, ctx: Any) -> Any:
        ctx.usage.reserve(input_tokens=10, output_tokens=10, provider="acme", model="m1")
        sent.append(1)
        return finish("done")

    run = asyncio.run(_agent(decide, {"max_cost_usd": "1"}).run({}))
    error = _found(run, Exception)
    codes = {getattr(e, "code", None) for e in _chain(error)}
    assert BUDGET_PRICE_UNKNOWN in codes
    assert sent == []
    priced = _agent(
        decide,
        {"max_cost_usd": "1"},
        pricing={"acme:m1": {"input_per_mtok": "1", "output_per_mtok": 2}},
    )
    assert asyncio.run(priced.run({})).status == "completed"
    assert sent == [1]


def test_the_cost_budget_refuses_the_request_its_price_would_overrun() -> None:
    requests: list[int] = []
    # 10 in at $1/M + 10 out at $2/M = $0.00003 reserved; 5 + 5 used = $0.000015 charged.
    agent = _agent(
        _model_decide(requests),
        {"max_cost_usd": "0.00006"},
        tools={"noop": _NOOP},
        pricing={"acme:m1": {"input_per_mtok": "1", "output_per_mtok": "2"}},
    )
    run = asyncio.run(agent.run({}))
    error = _found(run, LimitReachedError)
    assert requests == [1, 2, 3]
    assert error.limit == "max_cost_usd"
    assert (error.bound, error.consumed, error.requested) == (
        Decimal("0.00006"),
        Decimal("0.000045"),
        Decimal("0.00003"),
    )


def test_genai_prices_price_a_known_model() -> None:
    usage = Usage((Ledger("s", {"max_cost_usd": Decimal(10)}),), {})
    cost = usage.price("openai", "gpt-4.1-mini", input_tokens=1_000_000, output_tokens=1_000_000)
    assert cost == Decimal("2.0")
    with pytest.raises(Exception) as caught:
        usage.price("openai", "no-such-model-xyz", input_tokens=1, output_tokens=1)
    assert caught.value.code == BUDGET_PRICE_UNKNOWN  # type: ignore[attr-defined]
    assert "pricing:" in str(caught.value)


# -- the delegation tree --------------------------------------------------------------------------
def _child(decide: Any, limits: Any = None) -> Pipeline:
    return define_agent(
        id="child",
        input_schema=dict[str, Any],
        result_schema=str,
        initial_state=lambda validated: {},
        decide=decide,
        limits=limits,
    )


def test_a_childs_usage_is_charged_to_its_parent() -> None:
    parent_saw: list[Any] = []

    def child_decide(state: Any, ctx: Any) -> Any:
        reservation = ctx.usage.reserve(input_tokens=30, output_tokens=0)
        ctx.usage.charge(reservation, input_tokens=30, output_tokens=0)
        return finish("child done")

    def parent_decide(state: Any, ctx: Any) -> Any:
        parent_saw.append(ctx.usage.remaining["max_input_tokens"])
        if ctx.turn == 1:
            return continue_with(call("delegate", {}, "c"))
        return finish("done")

    agent = _agent(
        parent_decide,
        {"max_input_tokens": 100},
        tools={"delegate": pipeline_tool(_child(child_decide), description="Delegate.")},
    )
    run = asyncio.run(agent.run({}))
    assert run.status == "completed", [e.format() for e in run.errors]
    assert parent_saw == [100, 70]


def test_two_children_in_parallel_cannot_together_overrun() -> None:
    """Both children reserve while the other holds its reservation: only one fits."""
    barrier = threading.Barrier(2, timeout=30)
    admitted: list[str] = []

    async def child_decide(state: Any, ctx: Any) -> Any:
        try:
            reservation = ctx.usage.reserve(input_tokens=60, output_tokens=0)
        except LimitReachedError:
            await asyncio.to_thread(barrier.wait)
            raise
        admitted.append(ctx.execution["agent_run_id"])
        await asyncio.to_thread(barrier.wait)  # the other reserves while this one is held
        ctx.usage.charge(reservation, input_tokens=60, output_tokens=0)
        return finish("ok")

    def parent_decide(state: Any, ctx: Any) -> Any:
        if ctx.turn == 1:
            return continue_with(call("delegate", {}, "a"), call("delegate", {}, "b"))
        return finish("done")

    agent = _agent(
        parent_decide,
        {"max_input_tokens": 100, "max_concurrency": 2},
        tools={"delegate": pipeline_tool(_child(child_decide), description="Delegate.")},
    )
    run = asyncio.run(agent.run({}))
    assert len(admitted) == 1
    assert run.status == "failed"
    error = _found(run, LimitReachedError)
    assert (error.limit, error.consumed, error.requested) == ("max_input_tokens", 60, 60)


def test_a_tool_that_calls_a_model_reports_through_its_context() -> None:
    def expensive(value: Any, ctx: Any) -> dict[str, Any]:
        reservation = ctx.usage.reserve(input_tokens=40, output_tokens=0)
        ctx.usage.charge(reservation, input_tokens=40, output_tokens=0)
        return {}

    tool = define_tool(
        description="Asks a model.", input_schema=dict, output_schema=dict, run=expensive
    )

    def decide(state: Any, ctx: Any) -> Any:
        return continue_with(call("ask", {}))

    run = asyncio.run(_agent(decide, {"max_input_tokens": 100}, tools={"ask": tool}).run({}))
    error = _found(run, LimitReachedError)
    assert (error.limit, error.consumed, error.requested) == ("max_input_tokens", 80, 40)


# -- YAML -----------------------------------------------------------------------------------------
_PROJECT = """\
version: 1
project: {{id: budgets}}
python_path: [.]
agents:
  a:
    input: {{schema: {{type: object}}}}
    result: {{schema: {{type: string}}}}
    initial_state: {{}}
    decide: budget_decide:decide
    limits: {{max_turns: 5, {limits}}}
{pricing}
"""

_DECIDE = """\
from tubeless.testing import finish


def decide(state, ctx):
    reservation = ctx.usage.reserve(
        input_tokens=1000, output_tokens=1000, provider="acme", model="m1"
    )
    ctx.usage.charge(reservation, input_tokens=1000, output_tokens=1000)
    return finish(str(ctx.usage.remaining["max_cost_usd"]))
"""


def _project(tmp_path: Path, limits: str, pricing: str = "") -> Path:
    # A module name of its own per test: a module is imported once per process.
    module = "budget_decide_" + "".join(c for c in tmp_path.name if c.isalnum())
    (tmp_path / f"{module}.py").write_text(_DECIDE)
    path = tmp_path / "budgets.yaml"
    text = _PROJECT.format(limits=limits, pricing=pricing)
    path.write_text(text.replace("budget_decide:decide", f"{module}:decide"))
    return path


def test_yaml_budgets_and_pricing_compile_to_the_python_objects(tmp_path: Path) -> None:
    path = _project(
        tmp_path,
        "max_cost_usd: '0.01', max_total_tokens: 5000",
        "pricing:\n  acme:m1: {input_per_mtok: 1.5, output_per_mtok: '2'}",
    )
    entry = load_project(path).entry()
    run = asyncio.run(entry.run({}))
    assert run.status == "completed", [e.format() for e in run.errors]
    # 1000 * 1.5 / 1M + 1000 * 2 / 1M = 0.0035 spent of 0.01.
    assert Decimal(run.value) == Decimal("0.0065")


def test_a_yaml_number_cost_is_kept_exactly(tmp_path: Path) -> None:
    path = _project(
        tmp_path,
        "max_cost_usd: 0.1",
        "pricing:\n  acme:m1: {input_per_mtok: 0.15, output_per_mtok: 0.6}",
    )
    entry = load_project(path).entry()
    run = asyncio.run(entry.run({}))
    assert Decimal(run.value) == Decimal("0.1") - Decimal("0.00075")


def test_yaml_without_a_price_fails_the_run_with_the_fix(tmp_path: Path) -> None:
    path = _project(tmp_path, "max_cost_usd: '1'")
    run = asyncio.run(load_project(path).entry().run({}))
    assert run.status == "failed"
    error = _found(run, Exception)
    codes = {getattr(e, "code", None) for e in _chain(error)}
    assert BUDGET_PRICE_UNKNOWN in codes


# -- the invariant --------------------------------------------------------------------------------
_STEP = st.tuples(
    st.integers(0, 60),  # reserve input
    st.integers(0, 60),  # reserve output
    st.integers(0, 60),  # used input (charged in full when at most the reservation)
    st.integers(0, 60),  # used output
    st.booleans(),  # the response had no usage (the reservation is kept)
)


@settings(max_examples=200, deadline=None)
@given(
    bound=st.integers(0, 300),
    steps=st.lists(_STEP, max_size=30),
)
def test_honest_usage_never_exceeds_the_bound(bound: int, steps: list[Any]) -> None:
    """Whatever is reserved and charged, consumed stays within the bound as long as no
    response reports more than it reserved; refused reservations change nothing."""
    ledger = Ledger("s", {"max_total_tokens": bound, "max_input_tokens": bound})
    usage = Usage((ledger,), {})
    for r_in, r_out, u_in, u_out, missing in steps:
        before = (ledger.input_tokens, ledger.output_tokens)
        try:
            reservation = usage.reserve(input_tokens=r_in, output_tokens=r_out)
        except LimitReachedError as exc:
            assert exc.requested in (r_in, r_in + r_out)
            assert (ledger.input_tokens, ledger.output_tokens) == before
            continue
        if missing:
            usage.charge(reservation, input_tokens=None, output_tokens=None)
        else:
            usage.charge(reservation, input_tokens=min(u_in, r_in), output_tokens=min(u_out, r_out))
        assert ledger.input_tokens + ledger.output_tokens <= bound
        assert ledger.input_tokens <= bound


@settings(max_examples=100, deadline=None)
@given(
    bound=st.decimals(min_value=0, max_value=1, places=6),
    costs=st.lists(st.decimals(min_value=0, max_value="0.2", places=6), max_size=30),
)
def test_reserved_costs_never_exceed_a_cost_bound(bound: Decimal, costs: list[Decimal]) -> None:
    ledger = Ledger("s", {"max_cost_usd": bound})
    usage = Usage((ledger,), {})
    for cost in costs:
        try:
            reservation = usage.reserve(cost_usd=cost)
        except LimitReachedError:
            continue
        usage.charge(reservation, input_tokens=None, output_tokens=None)
        assert ledger.cost_usd <= bound


def test_a_tool_in_a_worker_thread_commits_its_reservation(tmp_path: Path) -> None:
    """A sync tool (a worker thread) reserving in a checkpointed run: the reservation is
    committed on the loop before ``reserve`` returns, and a rerun of the key keeps it."""
    from tubeless.durable import SqliteCheckpoints

    committed: list[int] = []
    store_path = tmp_path / "c.sqlite"

    def read_usage() -> dict[str, Any]:
        import json

        store = SqliteCheckpoints(store_path)
        try:
            [stored] = store.list()
            usage: dict[str, Any] = json.loads(stored.document)["agents"]["budgeted"]["budget"][
                "usage"
            ]
        finally:
            store.close()
        return usage

    def expensive(value: Any, ctx: Any) -> dict[str, Any]:
        reservation = ctx.usage.reserve(input_tokens=40, output_tokens=0)
        committed.append(read_usage()["input_tokens"])  # durable before the 'request'
        ctx.usage.charge(reservation, input_tokens=30, output_tokens=0)
        return {}

    tool = define_tool(
        description="Asks a model.", input_schema=dict, output_schema=dict, run=expensive
    )

    def decide(state: Any, ctx: Any) -> Any:
        if ctx.turn > 2:
            return finish("done")
        return continue_with(call("ask", {}))

    agent = _agent(decide, {"max_input_tokens": 100}, tools={"ask": tool})
    store = SqliteCheckpoints(store_path)
    try:
        run = asyncio.run(agent.run({}, checkpoints=store))
    finally:
        store.close()
    assert run.status == "completed", [e.format() for e in run.errors]
    assert committed == [40, 70]
    assert read_usage()["input_tokens"] == 60
