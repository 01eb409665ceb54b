"""``main()`` maps what a command raises to an exit code; ``-v`` and ``--debug`` act globally."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import click
import pytest

from tubeless._cli import cli, main
from tubeless.errors import ReferenceResolutionError


@click.command("probe")
@click.option("--fail", type=click.Choice(["boom", "reference", "exit"]))
@click.option("--count", type=int, default=0)
def probe(fail: str | None, count: int) -> None:
    """A stand-in subcommand: logs like a handler, then fails as asked."""
    logging.getLogger("tubeless.run").info("handler says hello")
    if fail == "boom":
        raise RuntimeError("boom")
    if fail == "reference":
        raise ReferenceResolutionError("cannot import 'examples.nope'")
    if fail == "exit":
        click.get_current_context().exit(5)
    click.echo(f"count={count}")


@pytest.fixture(autouse=True)
def probe_command() -> Iterator[None]:
    logger = logging.getLogger("tubeless.run")
    handlers, level = list(logger.handlers), logger.level
    # Start from a logger no earlier `-v` run configured (another test may have run one here).
    logger.handlers[:] = [h for h in handlers if type(h).__name__ != "_StderrHandler"]
    logger.setLevel(logging.NOTSET)
    cli.add_command(probe)
    try:
        yield
    finally:
        del cli.commands["probe"]
        logger.handlers[:] = handlers
        logger.setLevel(level)


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, list[str]]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err.splitlines()


def test_a_command_that_succeeds_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "probe", "--count", "3") == (0, "count=3\n", [])


def test_a_command_can_choose_its_exit_code_with_ctx_exit(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert run(capsys, "probe", "--fail", "exit") == (5, "", [])


def test_an_unexpected_exception_exits_6_with_one_line_and_no_traceback(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert run(capsys, "probe", "--fail", "boom") == (6, "", ["error: RuntimeError: boom"])


def test_debug_adds_the_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "--debug", "probe", "--fail", "boom")

    assert (code, out) == (6, "")
    assert err[0] == "Traceback (most recent call last):"
    assert err[-2:] == ["RuntimeError: boom", "error: RuntimeError: boom"]


def test_tubeless_errors_print_their_code(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "probe", "--fail", "reference") == (
        2,
        "",
        ["error: TUBELESS_REFERENCE_INVALID: cannot import 'examples.nope'"],
    )


def test_a_subcommand_usage_error_exits_1_with_the_subcommand_usage(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert run(capsys, "probe", "--count", "many") == (
        1,
        "",
        [
            "error: Invalid value for '--count': 'many' is not a valid integer.",
            "Usage: tubeless probe [OPTIONS]",
            "Try 'tubeless probe --help' for help.",
        ],
    )


def test_handler_logs_stay_hidden_without_verbose(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "probe") == (0, "count=0\n", [])


def test_verbose_shows_handler_logs_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "-v", "probe") == (0, "count=0\n", ["INFO tubeless.run: handler says hello"])


def test_verbose_twice_installs_one_handler(capsys: pytest.CaptureFixture[str]) -> None:
    run(capsys, "-v", "probe")

    assert run(capsys, "-vv", "probe") == (
        0,
        "count=0\n",
        ["INFO tubeless.run: handler says hello"],
    )


def test_bare_tubeless_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    """`tubeless` with no command (or only global options) prints the help and exits 0."""
    assert main([]) == 0
    assert "Commands:" in capsys.readouterr().out
    assert main(["-v"]) == 0
    assert "Commands:" in capsys.readouterr().out


def test_short_help_option(capsys: pytest.CaptureFixture[str]) -> None:
    """`-h` is `--help`, for the group and for commands."""
    assert main(["-h"]) == 0
    assert "Commands:" in capsys.readouterr().out
    assert main(["validate", "-h"]) == 0
    assert "validate" in capsys.readouterr().out


def test_verbose_after_the_command_gets_a_hint(capsys: pytest.CaptureFixture[str]) -> None:
    """`tubeless validate -v x` says that -v goes before the command."""
    assert main(["validate", "-v", "x.yaml"]) == 1
    err = capsys.readouterr().err
    assert "put it before the command" in err and "tubeless -v run" in err


def test_a_command_without_v_after_one_with_it_shows_no_handler_logs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``-v`` holds for its own command only: in one process (a test run, a program calling
    ``main`` twice), the next command without it logs nothing to stderr."""
    assert main(["-v", "schema"]) == 0
    logging.getLogger("tubeless.run").info("shown with -v")
    assert "shown with -v" in capsys.readouterr().err
    assert main(["schema"]) == 0
    logging.getLogger("tubeless.run").info("not shown")
    assert "not shown" not in capsys.readouterr().err
