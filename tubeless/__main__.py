"""``python -m tubeless``: the same entry point as the ``tubeless`` command."""

from __future__ import annotations

from tubeless._cli import main

if __name__ == "__main__":
    raise SystemExit(main())
