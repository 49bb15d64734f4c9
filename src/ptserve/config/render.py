"""The model configuration as Triton renders it in JSON.

Protobuf field names, enum names, primitive fields always printed, unset sub-messages and oneofs
left out, and 64-bit integers as JSON numbers (protobuf's own JSON printer makes them strings,
which clients such as perf_analyzer do not accept).
"""

from __future__ import annotations

from typing import Any

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

_MESSAGE = FieldDescriptor.TYPE_MESSAGE
_ENUM = FieldDescriptor.TYPE_ENUM
_BYTES = FieldDescriptor.TYPE_BYTES


def config_to_dict(message: Message) -> dict[str, Any]:
    """Render a protobuf message (a ModelConfig or any part of it) as Triton's JSON dict."""
    result: dict[str, Any] = {}
    descriptor: Any = message.DESCRIPTOR
    for field in descriptor.fields:
        value = getattr(message, field.name)
        if _is_map(field):
            value_field = field.message_type.fields_by_name["value"]
            result[field.name] = {
                str(key): _scalar(value_field, item) for key, item in value.items()
            }
        elif _is_repeated(field):
            result[field.name] = [_scalar(field, item) for item in value]
        elif field.type == _MESSAGE or field.containing_oneof is not None:
            if message.HasField(field.name):
                result[field.name] = _scalar(field, value)
        else:
            result[field.name] = _scalar(field, value)
    return result


def _is_repeated(field: Any) -> bool:
    if hasattr(field, "is_repeated"):  # newer protobuf; ``label`` is deprecated there
        flag = field.is_repeated
        return bool(flag() if callable(flag) else flag)
    return bool(field.label == FieldDescriptor.LABEL_REPEATED)


def _is_map(field: Any) -> bool:
    return (
        _is_repeated(field) and field.type == _MESSAGE and field.message_type.GetOptions().map_entry
    )


def _scalar(field: Any, value: Any) -> Any:
    if field.type == _MESSAGE:
        return config_to_dict(value)
    if field.type == _ENUM:
        enum_value = field.enum_type.values_by_number.get(value)
        return enum_value.name if enum_value is not None else value
    if field.type == _BYTES:
        return value.decode("latin-1")
    return value
