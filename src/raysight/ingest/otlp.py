"""OTLP/HTTP exports of either signal, traces or logs (``signals/spans/parse.py``, ``otlp_logs.py``): an export
read from protobuf or OTLP/JSON (its items counted first: ``otlp_count.py``), its attribute values as JSON-ready
Python and back, and an answer encoded as it was asked. Pure."""

from __future__ import annotations

import base64
from typing import Any, TypeVar

import orjson
from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

from raysight.errors import BadIngest
from raysight.ingest import otlp_count

SCOPE_MAX = 256  # an instrumentation scope's name (a module's), copied into each of its spans or log records
INT64_MAX = 2**63 - 1


def attributes(pairs: Any) -> dict[str, Any]:
    """OTLP key-values as a JSON-ready dict (bytes as base64)."""
    return {pair.key: value(pair.value) for pair in pairs}


def value(any_value: AnyValue) -> Any:
    which = any_value.WhichOneof("value")
    if which is None:
        return None
    if which == "array_value":
        return [value(v) for v in any_value.array_value.values]
    if which == "kvlist_value":
        return attributes(any_value.kvlist_value.values)
    if which == "bytes_value":
        return base64.b64encode(any_value.bytes_value).decode()
    return getattr(any_value, which)


def any_value(value: Any) -> AnyValue:
    """A Python value as an OTLP attribute value (a list as an array; anything else not a number as text)."""
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    if isinstance(value, (list, tuple)):
        array = AnyValue()
        array.array_value.values.extend(any_value(v) for v in value)
        return array
    return AnyValue(string_value=str(value))


def key_values(attributes: dict[str, Any]) -> list[KeyValue]:
    """Attributes as OTLP key-values (a None value left out)."""
    return [KeyValue(key=str(k), value=any_value(v)) for k, v in attributes.items() if v is not None]


def text_id(value: Any) -> str | None:
    """A non-empty text attribute (an ID, a name), at most 200 characters; None otherwise."""
    return value[:200] if isinstance(value, str) and value else None


_ID_FIELDS = ("traceId", "spanId", "parentSpanId")


M = TypeVar("M", bound=Message)


def decoded(message: M, body: bytes, json: bool, limit: int, signal: str = "Spans", items: str = "spans") -> M:
    """``message`` (an OTLP export request of ``resource{signal}``) read from ``body``, protobuf or OTLP/JSON;
    BadIngest when it is not one, TooMany when it holds over ``limit`` resources, scopes and ``items``."""
    what = {"Spans": "trace", "Logs": "log"}.get(signal, signal.lower())
    try:
        otlp_count.count(body, json, signal, items, limit, "spans" if signal == "Spans" else "log records")
        if json:
            document = json_ids_to_base64(orjson.loads(body), signal, items)
            json_format.ParseDict(document, message, ignore_unknown_fields=True)
        else:
            message.ParseFromString(body)
    except (DecodeError, json_format.ParseError, orjson.JSONDecodeError, ValueError, TypeError) as exc:
        raise BadIngest(f"not an OTLP {what} export ({'JSON' if json else 'protobuf'}): {exc}") from None
    return message


def json_ids_to_base64(document: Any, signal: str = "Spans", items: str = "spans") -> Any:
    """OTLP/JSON writes trace and span IDs in hex where protobuf's JSON mapping reads bytes as base64: convert them
    (in an export's ``resource{signal}[].scope{signal}[].{items}[]`` and their links) so that one parser reads both
    encodings."""
    if not isinstance(document, dict):
        raise BadIngest(f'an OTLP/JSON export is a JSON object {{"resource{signal}": […]}}')
    for resource_group in _list(document.get(f"resource{signal}")):
        for scope_group in _list(_dict(resource_group).get(f"scope{signal}")):
            for item in _list(_dict(scope_group).get(items)):
                for part in (_dict(item), *(_dict(link) for link in _list(_dict(item).get("links")))):
                    for name in _ID_FIELDS:
                        if isinstance(part.get(name), str):
                            part[name] = _hex_to_base64(part[name])
    return document


def _hex_to_base64(text: str) -> str:
    try:
        return base64.b64encode(bytes.fromhex(text)).decode()
    except ValueError:
        raise BadIngest(f"an OTLP/JSON ID is hex: {text[:40]!r}") from None


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def encoded(message: Message, json: bool) -> bytes:
    """An OTLP answer as protobuf, or OTLP/JSON."""
    if json:
        return json_format.MessageToJson(message, indent=None).encode()
    return message.SerializeToString()
