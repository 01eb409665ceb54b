"""docs/traces.md shows, record by record, what a real run of the scripted agent records."""

from __future__ import annotations

from examples.scripted_agent import scripted_agent
from tests.fixtures.traces import EXAMPLE_HEAD, documented_example, record_lines
from tubeless.testing import capture_trace


async def test_the_documented_record_stream_is_what_a_run_records() -> None:
    """The block's record lines (its ``#`` lines aside) are regenerated from a real run; on a
    difference, the message is the block to paste into docs/traces.md (comments re-added)."""
    with capture_trace() as trace:
        run = await scripted_agent.run({"question": "hello tubeless"}, trace=trace)
    assert run.status == "completed", run.errors
    regenerated = record_lines(trace.records)

    documented = [line for line in documented_example() if not line.startswith("#")]

    assert documented == regenerated, EXAMPLE_HEAD + "\n".join(regenerated)


def test_the_example_says_what_each_group_of_records_is() -> None:
    """Comment lines explain the stream: the block is documentation, not only a fixture."""
    comments = [line for line in documented_example() if line.startswith("# ")]

    assert len(comments) >= 10
