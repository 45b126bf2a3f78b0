"""A tool's JSON Schema kept whole: enforced with `jsonschema`, shown as written.

A pydantic model built from a JSON Schema (`planexec.mcp.schema_to_model`) knows the
arguments' names, types, defaults and aliases, which resolution and coercion need; it does
not know ``minimum``, ``maximum``, ``minLength``, ``pattern``, ``format``, ``$ref``,
nested ``additionalProperties`` and the rest. `SchemaArgs` is the base of such models:

- ``model_validate`` (what `planexec.tools.ToolSpec.parse` and langchain's tools call)
  first validates with pydantic, then checks the arguments as they will be sent (by their
  wire names) against the WHOLE schema with a maintained validator (`jsonschema`; the
  dialect the schema names in ``$schema``, Draft 2020-12 when it names none; ``$ref`` and
  ``$defs`` resolved inside the schema, never fetched; ``format`` checked where the
  validator can). A violation is a `pydantic.ValidationError` whose errors name the
  argument (``loc``) and the rule broken, so the executor reports ``ARGS_INVALID`` and the
  tool is not called;
- ``model_json_schema()`` returns the tool's own schema, as given, so the schema the
  planner is shown is the one the arguments are checked against.

`schema_validator` checks a schema once (an invalid schema raises `InvalidSchemaError`).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any, ClassVar

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from jsonschema.protocols import Validator
from jsonschema.validators import validator_for
from pydantic import BaseModel, ValidationError
from pydantic_core import InitErrorDetails, PydanticCustomError

from planexec._text import clip
from planexec.errors import PlanexecError

__all__ = ["InvalidSchemaError", "SchemaArgs", "schema_errors", "schema_validator"]


class InvalidSchemaError(PlanexecError, ValueError):
    """A tool's input schema is not a valid JSON Schema (its arguments cannot be checked).

    ``where``: the path in the schema of the invalid part (``(root)`` for the schema).
    """

    def __init__(self, message: str, *, where: str = "(root)") -> None:
        super().__init__(message)
        self.where = where


def schema_validator(schema: Mapping[str, Any]) -> Validator:
    """A validator for ``schema`` (its ``$schema`` dialect, Draft 2020-12 by default).

    Formats are checked where the validator can check them (``email``, ``ipv4``,
    ``ipv6``, ``date``, ``uuid``, ``regex``... and those whose optional checkers are
    installed); other formats are annotations, as the specification allows.

    Raises:
        InvalidSchemaError: the schema is not valid in its dialect.
    """
    data = dict(schema)
    cls = validator_for(data, default=Draft202012Validator)
    try:
        cls.check_schema(data)
    except SchemaError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "(root)"
        raise InvalidSchemaError(
            f"invalid JSON Schema at {where}: {exc.message}", where=where
        ) from exc
    validator: Validator = cls(data, format_checker=cls.FORMAT_CHECKER)
    return validator


def _rule(keyword: str, value: Any) -> str:
    try:
        shown = json.dumps(value, ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError):
        shown = repr(value)
    return f"{keyword}: {clip(shown, 80)}"


def schema_errors(validator: Validator, data: Mapping[str, Any]) -> list[InitErrorDetails]:
    """The schema violations of ``data``, as pydantic error details (empty when valid).

    Each error's ``loc`` is the path to the offending value (its first item the
    argument's name, for a violation inside an argument), its type ``json_schema``, and
    its message names the rule (``maximum: 10``) and what broke it.
    """
    details: list[InitErrorDetails] = []
    found = sorted(validator.iter_errors(dict(data)), key=lambda e: list(map(str, e.path)))
    for error in found:
        keyword = str(error.validator)
        rule = _rule(keyword, error.validator_value)
        details.append(
            InitErrorDetails(
                type=PydanticCustomError(
                    "json_schema",
                    "breaks the schema's rule ({rule}): {why}",
                    {"rule": rule, "keyword": keyword, "why": error.message},
                ),
                loc=tuple(error.absolute_path),
                input=error.instance,
            )
        )
    return details


class SchemaArgs(BaseModel):
    """Base of argument models that carry their tool's whole JSON Schema.

    Subclasses set ``__json_schema__`` (the schema as the tool gave it) and
    ``__schema_validator__`` (from `schema_validator`).
    """

    __json_schema__: ClassVar[dict[str, Any]] = {"type": "object"}
    __schema_validator__: ClassVar[Validator | None] = None

    @classmethod
    def model_validate(cls, obj: Any, *args: Any, **kwargs: Any) -> Any:
        """Validate with pydantic, then against the whole JSON Schema (see the module).

        Raises:
            pydantic.ValidationError: pydantic's errors, or the schema's violations.
        """
        model = super().model_validate(obj, *args, **kwargs)
        validator = cls.__schema_validator__
        if validator is not None:
            wire = model.model_dump(mode="json", by_alias=True, exclude_unset=True)
            errors = schema_errors(validator, wire)
            if errors:
                raise ValidationError.from_exception_data(cls.__name__, errors)
        return model

    @classmethod
    def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """The tool's own JSON Schema, as given (a copy)."""
        return copy.deepcopy(cls.__json_schema__)
