"""Plain scalars read by the YAML 1.2 core schema, as editors and JSON Schema tools read them.

PyYAML resolves plain scalars by YAML 1.1, where ``010`` is 8, ``1:30`` is 90 and ``yes``,
``on`` and ``off`` are booleans; yaml-language-server, check-jsonschema and Ajv read YAML 1.2,
where the first is 10 and the others are strings. :func:`core_scalar` gives the YAML 1.2 value
of a plain scalar, and refuses the forms the two versions read differently, so an editor and
``tubeless`` never disagree about what a file says.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["Ambiguous", "core_scalar"]

_NULL: Final = re.compile(r"~|null|Null|NULL|")
_TRUE: Final = re.compile(r"true|True|TRUE")
_FALSE: Final = re.compile(r"false|False|FALSE")
_INT: Final = re.compile(r"[-+]?[0-9]+")
_OCT: Final = re.compile(r"0o[0-7]+")
_HEX: Final = re.compile(r"0x[0-9a-fA-F]+")
_FLOAT: Final = re.compile(r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?")
_INF: Final = re.compile(r"[-+]?\.(?:inf|Inf|INF)")
_NAN: Final = re.compile(r"\.(?:nan|NaN|NAN)")

# What YAML 1.1 reads differently (each with the way to write it unambiguously). The spec's
# one-letter y/n booleans are left out: PyYAML never read them as booleans, no YAML 1.2 tool does,
# and refusing them would forbid keys such as a schema's `x` and `y` properties.
_YAML11_BOOL: Final = re.compile(r"yes|Yes|YES|no|No|NO|on|On|ON|off|Off|OFF")
_SEXAGESIMAL: Final = re.compile(r"[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?")
_LEADING_ZERO: Final = re.compile(r"[-+]?0[0-9_]+(?:\.[0-9_]*)?(?:[eE][-+]?[0-9]+)?")
_BINARY: Final = re.compile(r"[-+]?0b[01_]+")
_UNDERSCORED: Final = re.compile(r"[-+]?(?:0x[0-9a-fA-F_]+|[0-9_]*\.?[0-9_]+(?:[eE][-+]?[0-9]+)?)")


class Ambiguous(ValueError):
    """A plain scalar that YAML 1.1 and YAML 1.2 read differently; the message says the fix."""


def _ambiguity(text: str) -> str | None:
    if _YAML11_BOOL.fullmatch(text):
        return (
            f"{text!r} is a boolean in YAML 1.1 but a string in YAML 1.2 (what editors read): "
            f"write true or false, or quote it ('{text}') for text"
        )
    if _SEXAGESIMAL.fullmatch(text) and ":" in text:
        return (
            f"{text!r} is a base-60 number in YAML 1.1 but a string in YAML 1.2: quote it "
            f"('{text}') for text, or write the number itself"
        )
    if _LEADING_ZERO.fullmatch(text) and text.lstrip("+-")[1:2] not in ("", "."):
        return (
            f"{text!r} is octal in YAML 1.1 but decimal in YAML 1.2: write it without the "
            f"leading zero (or 0o... for octal), or quote it ('{text}') for text"
        )
    if _BINARY.fullmatch(text):
        return (
            f"{text!r} is a binary number in YAML 1.1 but a string in YAML 1.2: write it in "
            f"decimal, or quote it ('{text}') for text"
        )
    if "_" in text and _UNDERSCORED.fullmatch(text) and any(c.isdigit() for c in text):
        return (
            f"{text!r} is a number in YAML 1.1 but a string in YAML 1.2: remove the underscores, "
            f"or quote it ('{text}') for text"
        )
    return None


def core_scalar(text: str) -> object:
    """The YAML 1.2 core-schema value of the plain scalar ``text``.

    Returns ``None``, a bool, an int, a float (``inf``/``nan`` included; callers refuse them) or
    the text itself.

    Raises:
        Ambiguous: When YAML 1.1 reads ``text`` differently.
    """
    problem = _ambiguity(text)
    if problem is not None:
        raise Ambiguous(problem)
    if _NULL.fullmatch(text):
        return None
    if _TRUE.fullmatch(text):
        return True
    if _FALSE.fullmatch(text):
        return False
    if _INT.fullmatch(text):
        return int(text)
    if _OCT.fullmatch(text):
        return int(text[2:], 8)
    if _HEX.fullmatch(text):
        return int(text[2:], 16)
    if _FLOAT.fullmatch(text):
        return float(text)
    if _INF.fullmatch(text):
        return float("-inf") if text.startswith("-") else float("inf")
    if _NAN.fullmatch(text):
        return float("nan")
    return text
