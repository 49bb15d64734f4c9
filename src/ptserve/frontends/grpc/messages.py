"""The core's answers (plain dicts and lists) as the service's protobuf messages, and settings
requests as plain values; no decisions are made here."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from google.protobuf import json_format
from tritonclient.grpc import service_pb2 as pb

from ptserve.common.errors import invalid_arg
from ptserve.core.shared_memory import RegionStatus
from ptserve.core.trace_settings import TraceValue


def server_metadata(data: dict[str, Any]) -> Any:
    return pb.ServerMetadataResponse(
        name=data["name"], version=data["version"], extensions=data["extensions"]
    )


def model_metadata(data: dict[str, Any]) -> Any:
    message = pb.ModelMetadataResponse(
        name=data["name"], versions=data["versions"], platform=data["platform"]
    )
    for target, specs in ((message.inputs, data["inputs"]), (message.outputs, data["outputs"])):
        for spec in specs:
            target.add(name=spec["name"], datatype=spec["datatype"], shape=spec["shape"])
    return message


def model_statistics(data: dict[str, Any]) -> Any:
    """The statistics dict has the message's field names, so protobuf's own parser maps it."""
    return json_format.ParseDict(data, pb.ModelStatisticsResponse(), ignore_unknown_fields=True)


def repository_index(entries: list[dict[str, str]]) -> Any:
    message = pb.RepositoryIndexResponse()
    for entry in entries:
        message.models.add(**entry)
    return message


def system_shm_status(regions: list[RegionStatus]) -> Any:
    message = pb.SystemSharedMemoryStatusResponse()
    for region in regions:
        status = message.regions[region.name]
        status.name = region.name
        status.key = region.key
        status.offset = region.offset
        status.byte_size = region.byte_size
    return message


def log_settings_request(settings: Mapping[str, Any]) -> dict[str, Any]:
    """LogSettingsRequest entries → plain values (the one set member of each SettingValue)."""
    changes: dict[str, Any] = {}
    for key, value in settings.items():
        choice = value.WhichOneof("parameter_choice")
        if choice is None:
            raise invalid_arg(f"log setting '{key}' has no value")
        changes[key] = getattr(value, choice)
    return changes


def log_settings_response(settings: Mapping[str, bool | int | str]) -> Any:
    message = pb.LogSettingsResponse()
    for key, value in settings.items():
        entry = message.settings[key]
        if isinstance(value, bool):
            entry.bool_param = value
        elif isinstance(value, int):
            entry.uint32_param = value
        else:
            entry.string_param = value
    return message


def trace_settings_request(settings: Mapping[str, Any]) -> dict[str, TraceValue | None]:
    """Each setting arrives as a list of strings; an empty list clears it."""
    return {key: list(value.value) or None for key, value in settings.items()}


def trace_settings_response(settings: Mapping[str, TraceValue]) -> Any:
    message = pb.TraceSettingResponse()
    for key, value in settings.items():
        message.settings[key].value.extend([value] if isinstance(value, str) else value)
    return message
