"""The ``Schema`` abstraction over pydantic models, adapter types and JSON Schema dicts."""

from __future__ import annotations

import copy
import dataclasses
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated, Any, Literal, NoReturn

import pydantic
import pytest
from hypothesis import given
from hypothesis import strategies as st
from typing_extensions import TypedDict  # pydantic needs it for TypedDicts before 3.12

from tubeless.errors import ValidationIssue
from tubeless.frozen import FrozenDict, freeze, thaw
from tubeless.schema import Schema, SchemaDefinitionError, SchemaValidationError


class Question(pydantic.BaseModel):
    question: str
    max_words: int = 50


class Answer(TypedDict):
    text: str


class Opaque:
    """A class pydantic knows nothing about."""


@dataclasses.dataclass
class Span:
    start: int
    end: int


QUESTION_JSON = {
    "type": "object",
    "properties": {
        "question": {"type": "string"},
        "max_words": {"type": "integer", "default": 50},
    },
    "required": ["question"],
}


def issues_of(schema: Schema, value: Any) -> list[tuple[tuple[str | int, ...], str]]:
    """The ``(path, message)`` pairs of the error ``schema.validate(value)`` raises."""
    with pytest.raises(SchemaValidationError) as caught:
        schema.validate(value)
    return [(issue.path, issue.message) for issue in caught.value.issues]


# -- kinds and coercion ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "kind"),
    [
        pytest.param(Question, "model", id="model"),
        pytest.param(str, "adapter", id="str"),
        pytest.param(list[str], "adapter", id="list-of-str"),
        pytest.param(Annotated[int, pydantic.Field(ge=0)], "adapter", id="annotated"),
        pytest.param(Answer, "adapter", id="typeddict"),
        pytest.param(Span, "adapter", id="dataclass"),
        pytest.param(None, "adapter", id="none"),
        pytest.param(QUESTION_JSON, "json", id="json-dict"),
        pytest.param(FrozenDict(QUESTION_JSON), "json", id="json-frozendict"),
    ],
)
def test_schema_of_picks_the_kind_from_the_source(source: Any, kind: str) -> None:
    assert Schema.of(source).kind == kind


def test_schema_of_returns_a_schema_unchanged() -> None:
    schema = Schema.of(Question)
    assert Schema.of(schema) is schema


def test_schema_json_and_schema_of_a_dict_are_equal() -> None:
    assert Schema.json(QUESTION_JSON) == Schema.of(QUESTION_JSON)


def test_model_schema_returns_the_model_instance() -> None:
    value = Schema.of(Question).validate({"question": "why?"})
    assert value == Question(question="why?", max_words=50)


@pytest.mark.parametrize(
    ("source", "raw", "expected"),
    [
        pytest.param(int, "12", 12, id="int-lax"),
        pytest.param(list[str], ("a", "b"), ["a", "b"], id="list-from-tuple"),
        pytest.param(Answer, {"text": "hi"}, {"text": "hi"}, id="typeddict"),
        pytest.param(Span, {"start": 1, "end": 2}, Span(1, 2), id="dataclass"),
    ],
)
def test_adapter_schema_returns_the_adapter_output(source: Any, raw: Any, expected: Any) -> None:
    assert Schema.of(source).validate(raw) == expected


def test_model_validators_run_exactly_once_per_validation() -> None:
    calls: list[str] = []

    class Counted(pydantic.BaseModel):
        name: str

        @pydantic.field_validator("name")
        @classmethod
        def count(cls, value: str) -> str:
            calls.append(value)
            return value.upper()

    schema = Schema.of(Counted)
    result = schema.validate({"name": "a"})
    assert calls == ["a"]
    assert type(result) is Counted
    assert result.name == "A"


def test_adapter_validators_run_exactly_once_per_validation() -> None:
    calls: list[int] = []

    def double(value: int) -> int:
        calls.append(value)
        return value * 2

    schema = Schema.of(Annotated[int, pydantic.AfterValidator(double)])
    assert schema.validate(4) == 8
    assert calls == [4]


# -- JSON Schema defaults -------------------------------------------------------------------------


def test_json_schema_fills_defaults_without_mutating_the_input() -> None:
    schema = Schema.json(
        {
            "type": "object",
            "properties": {
                "tags": {"type": "array", "default": ["x"]},
                "options": {
                    "type": "object",
                    "default": {},
                    "properties": {"depth": {"type": "integer", "default": 2}},
                },
            },
        }
    )
    given_value: dict[str, Any] = {"options": {}}
    result = schema.validate(given_value)
    assert result == {"tags": ["x"], "options": {"depth": 2}}
    assert given_value == {"options": {}}


def test_json_schema_defaults_are_fresh_copies_per_validation() -> None:
    schema = Schema.json({"type": "object", "properties": {"tags": {"default": ["x"]}}})
    first = schema.validate({})
    first["tags"].append("changed")
    assert schema.validate({}) == {"tags": ["x"]}
    assert schema.json_schema()["properties"]["tags"]["default"] == ("x",)


def test_json_schema_accepts_frozen_values_as_arrays_and_objects() -> None:
    schema = Schema.json({"type": "object", "properties": {"items": {"type": "array"}}})
    result = schema.validate(freeze({"items": [1, {"a": [2]}]}))
    assert result == {"items": [1, {"a": [2]}]}
    assert type(result) is dict


def test_json_schema_is_unaffected_by_later_changes_to_the_given_dict() -> None:
    source = copy.deepcopy(QUESTION_JSON)
    schema = Schema.json(source)
    source["required"] = ["question", "max_words"]
    assert schema.validate({"question": "q"}) == {"question": "q", "max_words": 50}


# -- validation errors ----------------------------------------------------------------------------


def test_json_schema_in_its_declared_dialect_without_defaults() -> None:
    """``dialect="declared"`` reads ``$schema`` (a draft-07 tuple, draft-04 exclusiveMinimum);
    ``defaults=False`` leaves missing properties missing."""
    tuple_schema = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "properties": {
            "pair": {"type": "array", "items": [{"type": "string"}, {"type": "number"}]},
            "n": {"type": "integer", "default": 10},
        },
    }
    with pytest.raises(SchemaDefinitionError):
        Schema.json(tuple_schema)
    declared = Schema.json(tuple_schema, dialect="declared", defaults=False)
    assert declared.validate({"pair": ["a", 1]}) == {"pair": ["a", 1]}
    with pytest.raises(SchemaValidationError):
        declared.validate({"pair": [1, "a"]})
    assert declared != Schema.json(tuple_schema, dialect="declared")
    assert Schema.json(tuple_schema, dialect="declared").validate({}) == {"n": 10}

    draft4 = {
        "$schema": "http://json-schema.org/draft-04/schema#",
        "properties": {"x": {"type": "number", "minimum": 0, "exclusiveMinimum": True}},
    }
    with pytest.raises(SchemaValidationError) as caught:
        Schema.json(draft4, dialect="declared").validate({"x": 0})
    assert str(caught.value) == "x: must be greater than 0"
    unknown = {"$schema": "https://example.com/my-dialect"}
    with pytest.raises(SchemaDefinitionError, match=r"\$schema names no known dialect"):
        Schema.json(unknown, dialect="declared")


def test_model_validation_issues_carry_pydantic_messages_and_paths() -> None:
    class Batch(pydantic.BaseModel):
        questions: list[Question]

    issues = issues_of(Schema.of(Batch), {"questions": [{"question": "ok"}, {"max_words": 1}]})
    assert issues == [(("questions", 1, "question"), "Field required")]


def test_validation_error_text_joins_formatted_issues() -> None:
    with pytest.raises(SchemaValidationError) as caught:
        Schema.of(Question).validate({"max_words": "many"})
    error = caught.value
    assert error.issues == (
        ValidationIssue(message="Field required", path=("question",)),
        ValidationIssue(
            message="Input should be a valid integer, unable to parse string as an integer",
            path=("max_words",),
        ),
    )
    assert str(error) == "; ".join(issue.format() for issue in error.issues)
    assert isinstance(error, ValueError)


def test_validation_error_does_not_chain_the_value_quoting_original() -> None:
    with pytest.raises(SchemaValidationError) as caught:
        Schema.of(int).validate("secret-value")
    assert caught.value.__cause__ is None
    assert caught.value.__suppress_context__


@pytest.mark.parametrize(
    ("schema", "value", "expected"),
    [
        pytest.param({"type": "string"}, 3, [((), "expected type 'string'")], id="type"),
        pytest.param(
            {"type": ["string", "null"]},
            3,
            [((), "expected one of types 'string', 'null'")],
            id="type-list",
        ),
        pytest.param(
            {"required": ["question", "topic"], "properties": {"topic": {"default": "x"}}},
            {},
            [((), "required property 'question' is missing")],
            id="required-after-defaults",
        ),
        pytest.param(
            {"required": ["a", "b"]},
            {},
            [((), "required properties 'a', 'b' are missing")],
            id="required-several",
        ),
        pytest.param(
            {"properties": {"q": {"type": "string", "pattern": "^a"}}},
            {"q": "bcd"},
            [(("q",), "does not match pattern '^a'")],
            id="pattern",
        ),
        pytest.param(
            {"enum": ["red", "green"]},
            "blue",
            [((), 'must be one of the enumerated values: ["red","green"]')],
            id="enum",
        ),
        pytest.param(
            {"properties": {"a": {}}, "additionalProperties": False},
            {"a": 1, "x": 2, "y": 3},
            [((), "additional properties are not allowed ('x', 'y')")],
            id="additional-properties",
        ),
        pytest.param(
            {"items": {"type": "integer", "minimum": 0}},
            [1, -1, "2"],
            [((1,), "must be greater than or equal to 0"), ((2,), "expected type 'integer'")],
            id="items-in-path-order",
        ),
        pytest.param(
            {"anyOf": [{"type": "string"}, {"type": "integer"}]},
            [],
            [((), "must match at least one of the allowed schemas")],
            id="any-of",
        ),
        pytest.param(
            {"properties": {"n": {"maxLength": 2}}},
            {"n": "long"},
            [(("n",), "should have at most 2 characters")],
            id="max-length",
        ),
        pytest.param(
            {"properties": {"a": False}},
            {"a": 1},
            [(("a",), "no value is allowed here")],
            id="false-property-schema",
        ),
        pytest.param({"not": {}}, 1, [((), "must not match the disallowed schema")], id="not"),
    ],
)
def test_json_schema_issues_describe_the_schema_side(
    schema: dict[str, Any], value: Any, expected: list[tuple[tuple[str | int, ...], str]]
) -> None:
    assert issues_of(Schema.json(schema), value) == expected


SECRET_PREFIX = "s3cr3t-"
secrets = st.text(min_size=1, max_size=20).map(lambda text: SECRET_PREFIX + text)


class Typed(pydantic.BaseModel):
    count: int
    flag: bool
    nested: list[Question]


TYPED_JSON = {
    "type": "object",
    "properties": {
        "count": {"type": "integer"},
        "flag": {"type": "boolean"},
        "nested": {"type": "array", "items": QUESTION_JSON},
        "colour": {"enum": ["red"]},
        "code": {"type": "string", "pattern": "^[0-9]+$", "maxLength": 3},
    },
    "additionalProperties": False,
    "required": ["count"],
}

SECRET_SCHEMAS = [
    pytest.param(Schema.of(Typed), id="model"),
    pytest.param(Schema.of(dict[str, tuple[int, bool]]), id="adapter"),
    pytest.param(Schema.of(Question | Typed), id="adapter-union"),
    pytest.param(Schema.json(TYPED_JSON), id="json"),
]


@pytest.mark.parametrize("schema", SECRET_SCHEMAS)
@given(secret=secrets)
def test_validation_messages_never_contain_the_input_value(schema: Schema, secret: str) -> None:
    value = {
        "count": secret,
        "flag": secret,
        "nested": [{"question": 1, "max_words": secret}, secret],
        "colour": secret,
        "code": secret,
        "k": (1, secret),
    }
    with pytest.raises(SchemaValidationError) as caught:
        schema.validate(value)
    assert SECRET_PREFIX not in str(caught.value)
    for issue in caught.value.issues:
        assert SECRET_PREFIX not in issue.message
        assert SECRET_PREFIX not in repr(issue.path)


@given(secret=secrets)
def test_discriminated_union_errors_never_quote_the_tag(secret: str) -> None:
    class Cat(pydantic.BaseModel):
        kind: Literal["cat"]

    class Dog(pydantic.BaseModel):
        kind: Literal["dog"]

    schema = Schema.of(Annotated[Cat | Dog, pydantic.Field(discriminator="kind")])
    issues = issues_of(schema, {"kind": secret})
    assert issues == [((), "Input tag does not match any of the expected tags: 'cat', 'dog'")]


def test_json_schema_cycle_in_the_input_is_a_validation_error() -> None:
    value: list[Any] = []
    value.append(value)
    assert issues_of(Schema.json({"type": "array"}), value) == [((0,), "value contains a cycle")]


# -- json_schema() --------------------------------------------------------------------------------


def test_model_json_schema_is_the_validation_mode_schema() -> None:
    assert thaw(Schema.of(Question).json_schema()) == {
        "title": "Question",
        "type": "object",
        "properties": {
            "question": {"title": "Question", "type": "string"},
            "max_words": {"title": "Max Words", "type": "integer", "default": 50},
        },
        "required": ["question"],
    }


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        pytest.param(str, {"type": "string"}, id="str"),
        pytest.param(list[int], {"type": "array", "items": {"type": "integer"}}, id="list"),
        pytest.param(
            Annotated[int, pydantic.Field(ge=1)], {"type": "integer", "minimum": 1}, id="annotated"
        ),
        pytest.param(QUESTION_JSON, QUESTION_JSON, id="json-dict"),
    ],
)
def test_json_schema_output(source: Any, expected: dict[str, Any]) -> None:
    assert thaw(Schema.of(source).json_schema()) == expected


def test_json_schema_output_is_frozen_and_cached() -> None:
    schema = Schema.of(Question)
    output = schema.json_schema()
    assert type(output) is FrozenDict
    assert schema.json_schema() is output
    with pytest.raises(TypeError, match="immutable"):
        output["title"] = "changed"


def test_json_schema_output_for_a_json_schema_is_a_copy_of_the_given_dict() -> None:
    source = copy.deepcopy(QUESTION_JSON)
    output = Schema.json(source).json_schema()
    assert output == freeze(QUESTION_JSON)
    assert output is not source


def test_a_type_without_a_json_schema_fails_when_asked_for_it() -> None:
    schema = Schema.of(Callable[[], int])
    assert schema.validate(len) is len
    with pytest.raises(SchemaDefinitionError, match="as JSON Schema"):
        schema.json_schema()


# -- definition errors ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        pytest.param({"type": 12}, "Invalid JSON Schema at /type: ", id="bad-type"),
        pytest.param(
            {"properties": {"a": {"minLength": -1}}},
            "Invalid JSON Schema at /properties/a/minLength: ",
            id="negative-min-length",
        ),
        pytest.param({"required": "a"}, "Invalid JSON Schema at /required: ", id="bad-required"),
        pytest.param({"enum": [{1, 2}]}, "Invalid JSON Schema: /enum/0: unsupported", id="set"),
    ],
)
def test_invalid_json_schemas_are_rejected_at_construction(
    schema: dict[str, Any], message: str
) -> None:
    with pytest.raises(SchemaDefinitionError) as caught:
        Schema.json(schema)
    assert str(caught.value).startswith(message)


@pytest.mark.parametrize(
    ("source", "named"),
    [
        pytest.param(object(), "an instance of 'object'", id="object"),
        pytest.param(3, "an instance of 'int'", id="int"),
        pytest.param(Opaque, "type 'Opaque'", id="arbitrary-type"),
        pytest.param("Question", "a string", id="string-annotation"),
    ],
)
def test_sources_pydantic_cannot_validate_are_rejected(source: Any, named: str) -> None:
    with pytest.raises(SchemaDefinitionError, match=f"Cannot build a schema from {named}"):
        Schema.of(source)


def test_schema_definition_error_is_a_type_error() -> None:
    assert issubclass(SchemaDefinitionError, TypeError)


def test_schema_json_rejects_a_non_mapping() -> None:
    with pytest.raises(SchemaDefinitionError, match="expects a JSON Schema dict, got 'list'"):
        Schema.json([])  # type: ignore[arg-type]  # deliberately wrong


def test_model_with_unresolvable_forward_reference_is_rejected() -> None:
    class Broken(pydantic.BaseModel):
        child: Missing  # type: ignore[name-defined]  # noqa: F821  # deliberately undefined

    with pytest.raises(SchemaDefinitionError, match=r"'.*Broken' is not fully defined"):
        Schema.of(Broken)


def test_remote_references_are_never_fetched(monkeypatch: pytest.MonkeyPatch) -> None:
    fetched: list[Any] = []

    def no_network(request: Any, *args: Any, **kwargs: Any) -> NoReturn:
        fetched.append(request)
        raise OSError("no network in tests")

    monkeypatch.setattr(urllib.request, "urlopen", no_network)
    schema = Schema.json({"$ref": "https://example.invalid/schema.json"})
    with pytest.raises(SchemaDefinitionError, match="Unresolvable JSON Schema reference"):
        schema.validate(1)
    assert fetched == []


def test_local_references_resolve() -> None:
    schema = Schema.json(
        {
            "$defs": {"name": {"type": "string", "minLength": 1}},
            "properties": {"first": {"$ref": "#/$defs/name"}},
        }
    )
    assert schema.validate({"first": "a"}) == {"first": "a"}
    assert issues_of(schema, {"first": ""}) == [(("first",), "should have at least 1 character")]


# -- identity, equality, immutability -------------------------------------------------------------


def test_fingerprint_is_stable_and_ignores_key_order() -> None:
    one = Schema.json({"type": "object", "properties": {"a": {"type": "string"}}})
    two = Schema.json({"properties": {"a": {"type": "string"}}, "type": "object"})
    assert one.fingerprint == one.fingerprint == two.fingerprint
    assert one.fingerprint.startswith("sha256:")
    assert Schema.json({"type": "string"}).fingerprint == Schema.of(str).fingerprint
    assert Schema.json({"type": "integer"}).fingerprint != Schema.of(str).fingerprint


def test_json_schemas_are_equal_by_content_and_others_by_identity() -> None:
    assert Schema.json({"a": 1, "b": 2}) == Schema.json({"b": 2, "a": 1})
    assert hash(Schema.json({"a": 1, "b": 2})) == hash(Schema.json({"b": 2, "a": 1}))
    assert Schema.of(Question) == Schema.of(Question)
    assert hash(Schema.of(Question)) == hash(Schema.of(Question))
    assert Schema.of(str) != Schema.json({"type": "string"})

    class Other(pydantic.BaseModel):
        question: str
        max_words: int = 50

    assert Schema.of(Question) != Schema.of(Other)


def test_schema_is_immutable() -> None:
    schema = Schema.of(Question)
    with pytest.raises(AttributeError, match="immutable"):
        schema._kind = "json"  # deliberately writing a private slot
    assert copy.deepcopy(schema) is schema


@pytest.mark.parametrize(
    ("source", "text"),
    [
        pytest.param(Question, "Schema.of(Question)", id="model"),
        pytest.param(str, "Schema.of(str)", id="adapter"),
        pytest.param({"type": "string"}, 'Schema.json({"type":"string"})', id="json"),
    ],
)
def test_schema_repr(source: Any, text: str) -> None:
    assert repr(Schema.of(source)) == text


def test_source_is_the_wrapped_object() -> None:
    assert Schema.of(Question).source is Question
    assert Schema.json(QUESTION_JSON).source == freeze(QUESTION_JSON)


# -- threads --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "source", [pytest.param(Question, id="model"), pytest.param(QUESTION_JSON, id="json")]
)
def test_validate_works_from_worker_threads(source: Any) -> None:
    schema = Schema.of(source)
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda i: schema.validate({"question": f"q{i}"}), range(50)))
    for i, result in enumerate(results):
        value = result if isinstance(result, dict) else result.model_dump()
        assert value == {"question": f"q{i}", "max_words": 50}
