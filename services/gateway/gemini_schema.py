"""Gemini's Schema (the OpenAPI 3.0 subset of `responseSchema` and function `parameters`) as JSON Schema, the one
form the grammar and the tool specs take: upper-case types lowered, `nullable` as a null type, int64 counts
given as strings read as integers, Gemini-only keywords and formats dropped."""

from __future__ import annotations

from typing import Any


def _snake(name: str) -> str:
    return "".join(f"_{ch.lower()}" if ch.isupper() else ch for ch in name)



SCHEMA_MAPS = ("properties", "$defs", "definitions", "patternProperties", "dependentSchemas")
SCHEMA_ONE = ("items", "additionalProperties", "not", "contains", "propertyNames", "if", "then", "else",
              "additionalItems", "unevaluatedItems", "unevaluatedProperties")
SCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
SCHEMA_COUNTS = ("minItems", "maxItems", "minLength", "maxLength", "minProperties", "maxProperties")  # int64: strings in JSON
SCHEMA_PROTO_NAMES = {"any_of": "anyOf", "property_ordering": "propertyOrdering", **{_snake(k): k for k in SCHEMA_COUNTS}}
GEMINI_ONLY = ("propertyOrdering", "example", "nullable", "title")
FORMATS = ("date-time", "date", "time", "duration", "email", "hostname", "ipv4", "ipv6", "uri", "uuid")  # what the grammar knows


def json_schema(s: Any) -> Any:
    """A Gemini Schema (OpenAPI 3.0 subset: `type: STRING`, `nullable`, int64 counts as strings) or a JSON
    Schema with Gemini's habits (Gemini CLI sends `type: OBJECT` in responseJsonSchema) as plain JSON Schema.
    Formats only Gemini knows (int32, double, enum…) are dropped: they constrain nothing a grammar can."""
    if isinstance(s, list):
        return [json_schema(x) for x in s]
    if not isinstance(s, dict):
        return s
    out: dict[str, Any] = {}
    for k, v in s.items():
        k = SCHEMA_PROTO_NAMES.get(k, k)
        if k == "type":
            types = [t.lower() for t in (v if isinstance(v, list) else [v]) if isinstance(t, str)
                     and t.upper() != "TYPE_UNSPECIFIED"]
            if types:
                out["type"] = types[0] if len(types) == 1 else types
        elif k in SCHEMA_MAPS and isinstance(v, dict):
            out[k] = {name: json_schema(sub) for name, sub in v.items()}
        elif k in SCHEMA_ONE or k in SCHEMA_LISTS:
            out[k] = json_schema(v)
        elif k in SCHEMA_COUNTS and isinstance(v, str) and v.isdigit():
            out[k] = int(v)
        elif k == "format" and v not in FORMATS:
            continue
        elif k not in GEMINI_ONLY:
            out[k] = v
    if s.get("nullable") is True:
        t = out.get("type")
        if isinstance(t, str):
            out["type"] = [t, "null"]
        elif isinstance(t, list) and "null" not in t:
            out["type"] = [*t, "null"]
    return out
