"""One ``Schema`` abstraction over pydantic models, ``TypeAdapter`` types and JSON Schema dicts.

Every place that validates data (pipeline options and results, step outputs, tool inputs and
outputs, agent inputs and results) takes anything :meth:`Schema.of` accepts:

- a pydantic ``BaseModel`` subclass: validated with ``model_validate``, so the value is the
  model instance;
- any other type or annotation pydantic's ``TypeAdapter`` supports (``str``, ``list[str]``,
  ``Annotated[...]``, ``TypedDict``, dataclasses, ...);
- a JSON Schema dict (``Schema.json(...)``, or a plain ``dict`` given to ``Schema.of``):
  validated with jsonschema's draft 2020-12 validator, filling ``default`` values of missing
  object properties in a copy of the input.

A schema validates (and may transform) a value exactly once per :meth:`Schema.validate` call.
Validation errors never quote the rejected value: pydantic errors are read with
``include_input=False`` and jsonschema errors are described from the schema side (the keyword,
its value and the path), never from ``error.message``. Property names are treated as
identifiers and may appear in paths and messages; values never do.

Schemas are built (and checked) at definition time, are immutable, and are safe to use from
worker threads.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Literal, NoReturn, final

from tubeless.errors import ValidationIssue
from tubeless.frozen import FreezeError, canonical_json, fingerprint, freeze, thaw

if TYPE_CHECKING:
    import pydantic

# pydantic and jsonschema are imported where a schema is first built or used, not here: a plain
# ``from tubeless import define_agent`` need not pay for either (about half its import time).


def _json_schema_tools() -> Any:
    """The jsonschema side (with ``referencing``), imported on first use."""
    import tubeless._jsonschema_messages as tools

    return tools


def _pydantic() -> Any:
    """pydantic, imported on first use (later calls find it in ``sys.modules``)."""
    import pydantic

    return pydantic


#: The longest schema text a ``repr`` (and an ``enum``/``const`` message) quotes.
_MAX_QUOTED_SCHEMA_VALUE = 80


__all__ = ["Schema", "SchemaDefinitionError", "SchemaValidationError"]

SchemaKind = Literal["model", "adapter", "json"]


class SchemaDefinitionError(TypeError):
    """A schema cannot be built: an unsupported type, or an invalid JSON Schema."""


class SchemaValidationError(ValueError):
    """A value does not match a schema; ``issues`` says where and why, never quoting values.

    ``str(error)`` is ``"; ".join(issue.format() for issue in error.issues)``.
    """

    issues: tuple[ValidationIssue, ...]
    """Every problem found, in path order (at least one)."""

    def __init__(self, issues: Iterable[ValidationIssue]) -> None:
        self.issues = tuple(issues)
        assert self.issues, "a validation error needs at least one issue"
        super().__init__("; ".join(issue.format() for issue in self.issues))


@final
class Schema:
    """An immutable validator that also exposes its draft 2020-12 input JSON Schema.

    Build one with :meth:`Schema.of` (or :meth:`Schema.json` for JSON Schema dicts). Equality
    and hashing follow the wrapped object's identity for models and adapter types, and the
    canonical JSON of the schema for JSON Schema dicts.
    """

    __slots__ = ("_adapter", "_frozen_json", "_json_schema", "_kind", "_source", "_validate")

    _kind: SchemaKind
    _source: Any
    _validate: Callable[[Any], Any]
    _adapter: pydantic.TypeAdapter[Any] | None  # for adapter-kind schemas
    _frozen_json: str | None  # canonical JSON of a json-kind schema, for __eq__ / __hash__
    _json_schema: dict[str, Any] | None  # cached frozen input JSON Schema

    def __init__(self, source: Any) -> None:
        """Build a schema from ``source``, coerced as :meth:`Schema.of` describes.

        Raises:
            SchemaDefinitionError: If ``source`` cannot be turned into a schema.
        """
        if isinstance(source, Schema):
            for name in Schema.__slots__:
                object.__setattr__(self, name, getattr(source, name))
        elif isinstance(source, dict):
            self._init_json(source)
        elif isinstance(source, type) and issubclass(source, _pydantic().BaseModel):
            self._init_model(source)
        else:
            self._init_adapter(source)

    @classmethod
    def of(cls, source: Any) -> Schema:
        """Coerce ``source`` to a schema.

        Args:
            source: A ``Schema`` (returned as is), a ``dict`` (a JSON Schema, see
                :meth:`json`), a pydantic ``BaseModel`` subclass, or any other type or
                annotation pydantic's ``TypeAdapter`` supports.

        Returns:
            The schema.

        Raises:
            SchemaDefinitionError: If pydantic cannot build a validator for ``source`` or the
                JSON Schema is invalid.
        """
        if isinstance(source, Schema):
            return source
        return cls(source)

    @classmethod
    def json(
        cls,
        schema: Mapping[str, Any],
        *,
        dialect: Literal["2020-12", "declared"] = "2020-12",
        defaults: bool = True,
    ) -> Schema:
        """A schema validated by jsonschema (draft 2020-12), filling ``default`` values.

        The dict is checked against the draft 2020-12 meta-schema here, and copied: later
        changes to it have no effect. Validation works on a deep copy of the input, in which
        missing object properties with a ``default`` get a copy of it; tuples and
        ``FrozenDict`` values validate as arrays and objects and come back as lists and dicts.

        Args:
            schema: The JSON Schema.
            dialect: ``"declared"`` reads the schema in the dialect its ``$schema`` names
                (draft-04, -06, -07, 2019-09, 2020-12; 2020-12 without one), for schemas
                written elsewhere (an MCP server's); :meth:`json_schema` is then the schema as
                given, in that dialect.
            defaults: ``False`` leaves missing properties missing: the value is a plain copy
                of the input.

        Raises:
            SchemaDefinitionError: If ``schema`` is not a mapping of plain JSON data or is not
                a valid JSON Schema of its dialect (a ``$schema`` naming no known dialect too).
        """
        if not isinstance(schema, Mapping):
            raise SchemaDefinitionError(
                f"Schema.json() expects a JSON Schema dict, got {type(schema).__name__!r}"
            )
        instance = object.__new__(cls)
        instance._init_json(dict(schema), dialect=dialect, defaults=defaults)
        return instance

    # -- construction ---------------------------------------------------------------------

    def _init_model(self, model: type[pydantic.BaseModel]) -> None:
        pydantic = _pydantic()
        if not model.__pydantic_complete__:
            try:
                model.model_rebuild(raise_errors=True)
            except (pydantic.PydanticUserError, pydantic.PydanticUndefinedAnnotation) as err:
                raise SchemaDefinitionError(
                    f"Model {model.__qualname__!r} is not fully defined: {_first_line(err)}"
                ) from err

        def validate(value: Any) -> Any:
            try:
                return model.model_validate(value)
            except pydantic.ValidationError as err:
                _raise_pydantic(err)

        self._set(kind="model", source=model, validate=validate)

    def _init_adapter(self, source: Any) -> None:
        if isinstance(source, str):
            # A string would be resolved as a forward reference in this module's namespace.
            raise SchemaDefinitionError(
                "Cannot build a schema from a string; pass the type itself, not its name"
            )
        pydantic = _pydantic()
        try:
            adapter = pydantic.TypeAdapter(source)
        except pydantic.PydanticSchemaGenerationError as err:
            # Pydantic's advice (arbitrary_types_allowed) does not apply here; the cause keeps it.
            raise SchemaDefinitionError(
                f"Cannot build a schema from {_describe(source)}: pass a pydantic model, a "
                "type pydantic can validate, or a JSON Schema dict"
            ) from err
        except (pydantic.PydanticUserError, pydantic.PydanticUndefinedAnnotation) as err:
            raise SchemaDefinitionError(
                f"Cannot build a schema from {_describe(source)}: {_first_line(err)}"
            ) from err
        if not adapter.pydantic_complete:
            raise SchemaDefinitionError(
                f"Cannot build a schema from {_describe(source)}: it has unresolved forward "
                "references"
            )

        def validate(value: Any) -> Any:
            try:
                return adapter.validate_python(value)
            except pydantic.ValidationError as err:
                _raise_pydantic(err)

        self._set(kind="adapter", source=source, validate=validate, adapter=adapter)

    def _init_json(
        self,
        schema: dict[str, Any],
        *,
        dialect: Literal["2020-12", "declared"] = "2020-12",
        defaults: bool = True,
    ) -> None:
        try:
            frozen = freeze(schema)
        except FreezeError as err:
            raise SchemaDefinitionError(f"Invalid JSON Schema: {err}") from err
        plain = thaw(frozen)  # jsonschema wants lists for arrays; this copy is never shared
        tools = _json_schema_tools()
        kind: Any = tools.jsonschema.Draft202012Validator
        if dialect == "declared":
            kind = tools._declared_validator(plain)
            if kind is None:
                raise SchemaDefinitionError("Invalid JSON Schema: $schema names no known dialect")
        if defaults:
            kind = (
                tools._DefaultFillingValidator
                if kind is tools.jsonschema.Draft202012Validator
                else tools._extend(kind, {"properties": tools._properties_filling_defaults})
            )
        try:
            kind.check_schema(plain)
        except tools.SchemaError as err:
            where = tools._pointer(err.absolute_path)
            raise SchemaDefinitionError(
                f"Invalid JSON Schema{' at ' + where if where else ''}: {err.message}"
            ) from err
        # An empty registry: a ``$ref`` to a URL is an error, never a network fetch (jsonschema's
        # default registry still downloads remote references, with a deprecation warning).
        validator = kind(plain, registry=tools.Registry())
        unresolvable = tools.Unresolvable
        issues_of = tools._jsonschema_issues
        bounded_patterns = tools.bounded_patterns

        def validate(value: Any) -> Any:
            try:
                # The copy is what gets defaults filled in, so the caller's value is untouched.
                instance = thaw(value)
            except FreezeError as err:
                raise SchemaValidationError(
                    [ValidationIssue(message="value contains a cycle", path=err.path)]
                ) from None
            # Pattern matching has one time budget per validation (tubeless._jsonschema_patterns).
            with bounded_patterns():
                try:
                    errors = list(validator.iter_errors(instance))
                except unresolvable as err:
                    raise SchemaDefinitionError(
                        f"Unresolvable JSON Schema reference: {err}"
                    ) from err
                if errors:
                    raise SchemaValidationError(issues_of(errors))
            return instance

        self._set(
            kind="json",
            source=frozen,
            validate=validate,
            # The options join the identity: the same dict read otherwise validates otherwise.
            frozen_json=canonical_json(
                frozen if (dialect, defaults) == ("2020-12", True) else [frozen, dialect, defaults]
            ),
            json_schema=frozen,
        )

    def _set(
        self,
        *,
        kind: SchemaKind,
        source: Any,
        validate: Callable[[Any], Any],
        adapter: pydantic.TypeAdapter[Any] | None = None,
        frozen_json: str | None = None,
        json_schema: dict[str, Any] | None = None,
    ) -> None:
        object.__setattr__(self, "_kind", kind)
        object.__setattr__(self, "_source", source)
        object.__setattr__(self, "_validate", validate)
        object.__setattr__(self, "_adapter", adapter)
        object.__setattr__(self, "_frozen_json", frozen_json)
        object.__setattr__(self, "_json_schema", json_schema)

    # -- public API -----------------------------------------------------------------------

    @property
    def kind(self) -> SchemaKind:
        """``"model"`` (a ``BaseModel``), ``"adapter"`` (a ``TypeAdapter`` type) or ``"json"``."""
        return self._kind

    @property
    def source(self) -> Any:
        """The wrapped model class or type; for ``"json"`` schemas, the frozen schema dict."""
        return self._source

    def validate(self, value: Any) -> Any:
        """Validate ``value`` once and return the validated (possibly transformed) value.

        Returns:
            A model instance for models, the adapter's output for types, and a plain copy of
            the input with defaults filled for JSON Schemas.

        Raises:
            SchemaValidationError: If ``value`` does not match; its issues never quote it.
        """
        try:
            return self._validate(value)
        except RecursionError:
            # Untrusted data nested deeper than a recursive validator can follow.
            raise SchemaValidationError(
                [ValidationIssue(message="value is nested too deeply to validate")]
            ) from None

    def json_schema(self) -> dict[str, Any]:
        """The draft 2020-12 JSON Schema of accepted *input*, as frozen JSON data.

        The result is a :class:`~tubeless.frozen.FrozenDict` computed once and shared:
        descriptors own frozen JSON, so nobody can change it for everyone else. Use
        :func:`tubeless.frozen.thaw` for an editable copy.

        Raises:
            SchemaDefinitionError: If pydantic cannot express the type as JSON Schema.
        """
        cached = self._json_schema
        if cached is not None:
            return cached
        pydantic = _pydantic()
        try:
            if self._adapter is not None:
                raw = self._adapter.json_schema(mode="validation")
            else:
                raw = self._source.model_json_schema(mode="validation")
            frozen: dict[str, Any] = freeze(raw)
        except (pydantic.PydanticUserError, FreezeError) as err:
            raise SchemaDefinitionError(
                f"Cannot express {_describe(self._source)} as JSON Schema: {_first_line(err)}"
            ) from err
        # A benign race: two threads may both compute the same value; either one is kept.
        object.__setattr__(self, "_json_schema", frozen)
        return frozen

    @property
    def fingerprint(self) -> str:
        """``"sha256:<hex>"`` of the canonical JSON of :meth:`json_schema`."""
        return fingerprint(self.json_schema())

    def __setattr__(self, name: str, value: Any) -> NoReturn:
        raise AttributeError("Schema is immutable")

    def __delattr__(self, name: str) -> NoReturn:
        raise AttributeError("Schema is immutable")

    def __copy__(self) -> Schema:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Schema:
        return self

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Schema):
            return NotImplemented
        if self._kind != other._kind:
            return False
        if self._kind == "json":
            return self._frozen_json == other._frozen_json
        return self._source is other._source

    def __hash__(self) -> int:
        if self._kind == "json":
            return hash(("json", self._frozen_json))
        return hash((self._kind, id(self._source)))

    def __repr__(self) -> str:
        if self._kind == "json":
            text = self._frozen_json or ""
            if len(text) > _MAX_QUOTED_SCHEMA_VALUE:
                text = text[: _MAX_QUOTED_SCHEMA_VALUE - 1] + "…"
            return f"Schema.json({text})"
        source = self._source
        name = source.__qualname__ if isinstance(source, type) else repr(source)
        return f"Schema.of({name})"


# -- pydantic ---------------------------------------------------------------------------------

# Pydantic error types whose message would quote (part of) the input, rewritten from the
# schema-side context only. The rest quote nothing but schema facts (bounds, patterns,
# expected literals). ``value_error`` and ``assertion_error`` carry the messages of the user's
# own validators and are kept as written.
_REWRITTEN_PYDANTIC_MESSAGES: dict[str, str] = {
    "union_tag_invalid": "Input tag does not match any of the expected tags: {expected_tags}",
    "uuid_parsing": "Input should be a valid UUID",
    "get_attribute_error": "Error extracting attribute",
    "iteration_error": "Error iterating over object",
    "mapping_type": "Input should be a valid mapping",
    "bytes_invalid_encoding": "Data should be valid {encoding}",
    "timezone_offset": "Timezone offset of {tz_expected} required",
    "datetime_object_invalid": "Invalid datetime object",
}


def _raise_pydantic(err: pydantic.ValidationError) -> NoReturn:
    issues: list[ValidationIssue] = []
    for detail in err.errors(include_input=False, include_url=False):
        message = detail["msg"]
        template = _REWRITTEN_PYDANTIC_MESSAGES.get(detail["type"])
        if template is not None:
            try:
                message = template.format(**detail.get("ctx", {}))
            except (KeyError, IndexError, ValueError):
                message = template.partition("{")[0].rstrip(" :,")
        issues.append(ValidationIssue(message=message, path=tuple(detail["loc"])))
    # Not chained: pydantic's own message quotes the input (the ``from None`` rule in errors.py).
    raise SchemaValidationError(issues) from None


# -- helpers ---------------------------------------------------------------------------------------


def _describe(source: Any) -> str:
    """Names the type of a definition-time object (never its repr, which may be anything)."""
    if isinstance(source, type):
        return f"type {source.__qualname__!r}"
    return f"an instance of {type(source).__qualname__!r}"


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__
