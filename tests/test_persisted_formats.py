"""Keys and digests that files already hold keep their exact values (DESIGN.md §11, §24).

Checkpoint keys, approval (call) digests, cassette input digests, checkpoint input digests and
definition fingerprints are written to files that a later release reads back. All of them come
from one canonical-JSON helper (``tubeless.frozen``); this pins them over literal values, so a
change of form shows here first. Keys and call digests escape non-ASCII (``\\uXXXX``), which for
ASCII data is the text earlier releases hashed; where it differs, the earlier value is still
recognised (the old-rule key is looked up, an old call digest still binds its decision).
"""

from __future__ import annotations

from typing import Any

import pytest

from tubeless.agent import RecordedApprovals, call_digest
from tubeless.agent._cassette import digest as cassette_digest
from tubeless.agent._durable_checks import input_digest, server_tools
from tubeless.batch._spi import InputRow, row_key
from tubeless.durable._keys import default_key, legacy_key
from tubeless.frozen import canonical_json, digest, fingerprint
from tubeless.schema import Schema

ASCII: dict[str, Any] = {"question": "hello tubeless", "n": 3, "tags": ["x", None, 1.5, True]}
UNICODE = {"q": "héllo ✓ 𝄞"}
SURROGATE = {"q": "\ud800"}

# What releases before round 3 wrote, for the values above.
ASCII_HEX = "fdb6fe59104266c7621f038d73bf90ef3c4a1521782e6788c41c59352027b0d9"
UNICODE_UTF8_HEX = "75354e8dee457db5c124cde24ba0d582cd6edf3b9044967bafa0698e411823a5"
# The escaped form: '{"q":"h\u00e9llo \u2713 \ud834\udd1e"}'.
UNICODE_ESCAPED_HEX = "9236ecfd8d3daeb43e930795fd528a40fe2684ebc0df34b2e9e56e44f2b08615"
# '{"q":"\ud800"}' escaped, and the UTF-8 form with the surrogate as its own three bytes.
SURROGATE_ESCAPED_HEX = "a2b5d607a3897bd53327d33d7340fca3342c006d8538395ac0e3ae8ed43db08b"
SURROGATE_UTF8_HEX = "a3fea9c61eede153813c2574d13471f5cd29d53bc06dc26cfa666b795dd47496"


def test_canonical_json_has_one_form_per_escaping() -> None:
    assert canonical_json({"b": [1, "é"], "a": None}) == '{"a":null,"b":[1,"é"]}'
    assert canonical_json({"b": [1, "é"], "a": None}, ensure_ascii=True) == (
        '{"a":null,"b":[1,"\\u00e9"]}'
    )
    assert canonical_json(SURROGATE, ensure_ascii=True) == '{"q":"\\ud800"}'


def test_digests_of_ascii_data_are_what_earlier_releases_wrote() -> None:
    assert digest(ASCII) == digest(ASCII, ensure_ascii=False) == f"sha256:{ASCII_HEX}"
    assert fingerprint(ASCII) == f"sha256:{ASCII_HEX}"
    assert default_key("e", ASCII) == legacy_key("e", ASCII) == "e:fdb6fe59104266c7"
    assert row_key("e", InputRow(index=0, line=1, raw=ASCII)) == "e:fdb6fe59104266c7"
    assert input_digest(ASCII) == ASCII_HEX
    assert cassette_digest(ASCII) == f"sha256:{ASCII_HEX}"
    assert call_digest("send", ASCII) == (
        "sha256:fc35529011dfdfc7ef45224ab4ecd2ece98c2f7624c0f20913868147f14879dc"
    )


def test_keys_and_call_digests_escape_non_ascii() -> None:
    assert digest(UNICODE) == f"sha256:{UNICODE_ESCAPED_HEX}"
    assert default_key("e", UNICODE) == f"e:{UNICODE_ESCAPED_HEX[:16]}"
    assert call_digest("send", UNICODE) == (
        "sha256:7cfae7539ac01aa94baea3f15a5735fc830efde152f53d16e0f2a4d60e330a8a"
    )
    # The round-2 key of the same input, which a run still finds.
    assert legacy_key("e", UNICODE) == f"e:{UNICODE_UTF8_HEX[:16]}"


def test_fingerprints_and_input_digests_keep_their_utf8_form() -> None:
    """Definition fingerprints, cassette and checkpoint input digests never changed form."""
    assert fingerprint(UNICODE) == f"sha256:{UNICODE_UTF8_HEX}"
    assert digest(UNICODE, ensure_ascii=False) == f"sha256:{UNICODE_UTF8_HEX}"
    assert input_digest(UNICODE) == UNICODE_UTF8_HEX
    assert cassette_digest(UNICODE) == f"sha256:{UNICODE_UTF8_HEX}"
    schema = Schema.json({"type": "string", "description": "héllo ✓"})
    assert schema.fingerprint == (
        "sha256:582361bd8d74cbec40b4b6ecba79b5f87b1b219f15f33aa48a9e3856ec1e506e"
    )
    described = {"server": "s", "tool": "t", "description": "Sends ✓", "input_schema": {}}
    assert server_tools({"x": described})["x"]["description"] == (
        "62d42951cb4f31fbb7f1f203fd663cf5125b015cb9add9bfe518be94a9ce04db"
    )


def test_a_lone_surrogate_has_a_key_and_every_digest() -> None:
    assert digest(SURROGATE) == f"sha256:{SURROGATE_ESCAPED_HEX}"
    assert default_key("e", SURROGATE) == f"e:{SURROGATE_ESCAPED_HEX[:16]}"
    assert fingerprint(SURROGATE) == f"sha256:{SURROGATE_UTF8_HEX}"
    assert input_digest(SURROGATE) == SURROGATE_UTF8_HEX
    assert cassette_digest(SURROGATE) == f"sha256:{SURROGATE_UTF8_HEX}"
    assert call_digest("send", SURROGATE).startswith("sha256:")
    described = {"server": "s", "tool": "t", "description": "\ud800", "input_schema": {}}
    assert server_tools({"x": described})["x"]["description"] == (
        "91a681b998555fb475479817b126c94e57e52011fa1842c5d188795a4a05226b"
    )
    # The batch runner's key of the same raw input is the same key.
    assert row_key("e", InputRow(index=0, line=1, raw=SURROGATE)) == default_key("e", SURROGATE)


@pytest.mark.parametrize("value", [UNICODE, ASCII])
def test_a_decision_recorded_with_a_round_2_call_digest_still_binds(value: Any) -> None:
    """A waiting checkpoint approved before the upgrade is not asked again."""
    old = f"sha256:{_round_2_call_hex(value)}"
    request = {
        "route": "a",
        "turn": 1,
        "call_id": "c1",
        "tool": "send",
        "input": value,
        "digest": call_digest("send", value),
    }
    approvals = RecordedApprovals([{**request, "digest": old, "approved": True}])
    assert approvals.decision(request) is True
    other = {**request, "input": {"q": "other"}, "digest": call_digest("send", {"q": "other"})}
    assert approvals.decision(other) is None


def _round_2_call_hex(value: Any) -> str:
    import hashlib
    import json

    text = json.dumps(["send", value], sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
