"""ModelConfig's fields, read from the protobuf descriptors, for the console's text rendering.

The configuration API answers Triton's JSON, where an enum value and a string look alike and a
map looks like a message; protobuf's text format (``config.pbtxt``) tells them apart. The
console turns the JSON into text with this description of every message reachable from
``ModelConfig``, made from the same descriptors the server parses configurations with, so the
two cannot drift apart.
"""

from __future__ import annotations

from typing import Any

from google.protobuf.descriptor import Descriptor, FieldDescriptor

from ptserve.config.parse import ModelConfig

_NUMBERS = frozenset(
    {
        FieldDescriptor.TYPE_DOUBLE,
        FieldDescriptor.TYPE_FLOAT,
        FieldDescriptor.TYPE_INT64,
        FieldDescriptor.TYPE_UINT64,
        FieldDescriptor.TYPE_INT32,
        FieldDescriptor.TYPE_FIXED64,
        FieldDescriptor.TYPE_FIXED32,
        FieldDescriptor.TYPE_UINT32,
        FieldDescriptor.TYPE_SFIXED32,
        FieldDescriptor.TYPE_SFIXED64,
        FieldDescriptor.TYPE_SINT32,
        FieldDescriptor.TYPE_SINT64,
    }
)


def _repeated(field: Any) -> bool:
    flag = getattr(field, "is_repeated", None)
    if flag is not None:  # newer protobuf; ``label`` is deprecated there
        return bool(flag() if callable(flag) else flag)
    return bool(field.label == FieldDescriptor.LABEL_REPEATED)


def _value(field: Any, pending: list[Descriptor]) -> dict[str, Any]:
    """How one value of ``field`` is written: its kind, and for enums the name of value 0
    (what an unset field reads as), for messages the message's full name."""
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        pending.append(field.message_type)
        return {"kind": "message", "message": field.message_type.full_name}
    if field.type == FieldDescriptor.TYPE_ENUM:
        zero = field.enum_type.values_by_number.get(0)
        return {"kind": "enum", "zero": zero.name if zero is not None else None}
    if field.type in (FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_BYTES):
        return {"kind": "string"}
    if field.type == FieldDescriptor.TYPE_BOOL:
        return {"kind": "bool"}
    if field.type in _NUMBERS:
        return {"kind": "number"}
    raise ValueError(f"field {field.full_name} has a type the console cannot write: {field.type}")


def config_schema() -> dict[str, Any]:
    """``{"root": <ModelConfig's full name>, "messages": {<full name>: {<field>: <field
    schema>}}}``. A field schema is a value description (see ``_value``) plus
    ``"repeated": true`` for repeated fields, or ``{"kind": "map", "key": ..., "value": ...}``."""
    root: Descriptor = ModelConfig.DESCRIPTOR
    messages: dict[str, dict[str, Any]] = {}
    pending = [root]
    while pending:
        descriptor = pending.pop()
        if descriptor.full_name in messages:
            continue
        fields: dict[str, Any] = {}
        messages[descriptor.full_name] = fields
        fields_of: Any = descriptor.fields
        for field in fields_of:
            entry = field.message_type
            if _repeated(field) and entry is not None and entry.GetOptions().map_entry:
                fields[field.name] = {
                    "kind": "map",
                    "key": _value(entry.fields_by_name["key"], pending),
                    "value": _value(entry.fields_by_name["value"], pending),
                }
                continue
            value = _value(field, pending)
            if _repeated(field):
                value["repeated"] = True
            fields[field.name] = value
    return {"root": root.full_name, "messages": messages}
