"""The service interface of the pipeline core: what other packages may use of its private modules.

Another package uses a private module of this one only through here: ``from
tubeless.pipeline._spi import NAME``. The import-linter contract "Private modules stay inside
their package" (``pyproject.toml``) refuses any other import of a ``tubeless.pipeline._*``
module from outside the package, so this list is everything other layers depend on beyond the
public ``tubeless.pipeline`` names. Users today: the agent layer (slots of the run environment,
child runs, identities, cancellation), providers (a run's resources), project (interruptible
templates), reporting (plan steps), the durable CLI (checkpoint keys), the CLI's signal handling,
and batches (a root run given the input the driver validated for the row's key).

Each name is loaded from its home module when first imported from here, so importing this
module costs nothing and never loads a module its caller does not need.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tubeless._lazy import lazy_attributes

if TYPE_CHECKING:
    from tubeless.pipeline._cancel import (
        YIELD_EVERY,
        RunCancelledError,
        clear_interrupt,
        interrupt,
        interruptibly,
        stop_waiting,
    )
    from tubeless.pipeline._checkpoint_keys import checkpoint_keys, validated_or_unvalidated
    from tubeless.pipeline._child import run_child, run_child_value
    from tubeless.pipeline._compose import FanOutFailedError
    from tubeless.pipeline._execute import (
        APPROVER_SLOT,
        DEFAULT_CONTROLS,
        TREE_SLOT,
        Controls,
        run_root,
    )
    from tubeless.pipeline._failures import ChildRunFailedError, is_cancellation
    from tubeless.pipeline._finalize import FINALIZE_STEP_ID
    from tubeless.pipeline._identity import descriptor_fingerprint, schema_fingerprint
    from tubeless.pipeline._iterate import ITERATION_START_SLOT
    from tubeless.pipeline._lean import LeanPathSwitch
    from tubeless.pipeline._pipeline import original_exception
    from tubeless.pipeline._plan import PlanStep, SelectionReason
    from tubeless.pipeline._resources import run_resource
    from tubeless.pipeline._run_state import UNVALIDATED
    from tubeless.pipeline._step import NestedPipeline, RequiredOutputs, is_async_callable

__all__ = [
    "APPROVER_SLOT",
    "DEFAULT_CONTROLS",
    "FINALIZE_STEP_ID",
    "ITERATION_START_SLOT",
    "TREE_SLOT",
    "UNVALIDATED",
    "YIELD_EVERY",
    "ChildRunFailedError",
    "Controls",
    "FanOutFailedError",
    "LeanPathSwitch",
    "NestedPipeline",
    "PlanStep",
    "RequiredOutputs",
    "RunCancelledError",
    "SelectionReason",
    "checkpoint_keys",
    "clear_interrupt",
    "descriptor_fingerprint",
    "interrupt",
    "interruptibly",
    "is_async_callable",
    "is_cancellation",
    "original_exception",
    "run_child",
    "run_child_value",
    "run_resource",
    "run_root",
    "schema_fingerprint",
    "stop_waiting",
    "validated_or_unvalidated",
]

#: Each name's home: (module, attribute).
_HOMES: dict[str, tuple[str, str]] = {
    "APPROVER_SLOT": ("tubeless.pipeline._execute", "APPROVER_SLOT"),
    "ChildRunFailedError": ("tubeless.pipeline._failures", "ChildRunFailedError"),
    "Controls": ("tubeless.pipeline._execute", "Controls"),
    "DEFAULT_CONTROLS": ("tubeless.pipeline._execute", "DEFAULT_CONTROLS"),
    "FINALIZE_STEP_ID": ("tubeless.pipeline._finalize", "FINALIZE_STEP_ID"),
    "FanOutFailedError": ("tubeless.pipeline._compose", "FanOutFailedError"),
    "ITERATION_START_SLOT": ("tubeless.pipeline._iterate", "ITERATION_START_SLOT"),
    "LeanPathSwitch": ("tubeless.pipeline._lean", "LeanPathSwitch"),
    "NestedPipeline": ("tubeless.pipeline._step", "NestedPipeline"),
    "PlanStep": ("tubeless.pipeline._plan", "PlanStep"),
    "RequiredOutputs": ("tubeless.pipeline._step", "RequiredOutputs"),
    "RunCancelledError": ("tubeless.pipeline._cancel", "RunCancelledError"),
    "SelectionReason": ("tubeless.pipeline._plan", "SelectionReason"),
    "TREE_SLOT": ("tubeless.pipeline._execute", "TREE_SLOT"),
    "UNVALIDATED": ("tubeless.pipeline._run_state", "UNVALIDATED"),
    "YIELD_EVERY": ("tubeless.pipeline._cancel", "YIELD_EVERY"),
    "checkpoint_keys": ("tubeless.pipeline._checkpoint_keys", "checkpoint_keys"),
    "clear_interrupt": ("tubeless.pipeline._cancel", "clear_interrupt"),
    "descriptor_fingerprint": ("tubeless.pipeline._identity", "descriptor_fingerprint"),
    "interrupt": ("tubeless.pipeline._cancel", "interrupt"),
    "interruptibly": ("tubeless.pipeline._cancel", "interruptibly"),
    "is_async_callable": ("tubeless.pipeline._step", "is_async_callable"),
    "is_cancellation": ("tubeless.pipeline._failures", "is_cancellation"),
    "original_exception": ("tubeless.pipeline._pipeline", "original_exception"),
    "run_child": ("tubeless.pipeline._child", "run_child"),
    "run_child_value": ("tubeless.pipeline._child", "run_child_value"),
    "run_resource": ("tubeless.pipeline._resources", "run_resource"),
    "run_root": ("tubeless.pipeline._execute", "run_root"),
    "schema_fingerprint": ("tubeless.pipeline._identity", "schema_fingerprint"),
    "stop_waiting": ("tubeless.pipeline._cancel", "stop_waiting"),
    "validated_or_unvalidated": ("tubeless.pipeline._checkpoint_keys", "validated_or_unvalidated"),
}

__getattr__, __dir__ = lazy_attributes(globals(), _HOMES)
