"""The small command line the example modules share (until ``tubeless run`` takes over)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from pydantic import BaseModel

from tubeless import Pipeline
from tubeless.reporting import format_plan


def run_agent_cli(pipeline: Pipeline, prog: str, argv: list[str] | None = None) -> int:
    """Parse ``--question``, ``--dry-run`` and ``--plan``; print the result as JSON."""
    parser = argparse.ArgumentParser(prog=prog)
    parser.add_argument("--question", help="the text to work on (default: 'hello tubeless')")
    parser.add_argument("--dry-run", action="store_true", help="run the preview sources")
    parser.add_argument("--plan", action="store_true", help="print the plan; run nothing")
    parser.add_argument("--explain", action="store_true", help="with --plan: say why")
    args = parser.parse_args(argv)
    if args.plan:
        print(format_plan(pipeline.plan(dry_run=args.dry_run), explain=args.explain), end="")
        return 0
    raw = {} if args.question is None else {"question": args.question}
    run = asyncio.run(pipeline.run(raw, dry_run=args.dry_run))
    if run.status != "completed":
        for error in run.errors:
            print(f"error: {error.format()}", file=sys.stderr)
        return 7 if run.status == "cancelled" else 6
    value = run.value.model_dump() if isinstance(run.value, BaseModel) else run.value
    print(json.dumps(value))
    return 0
