"""The decode-step check every RPC's request passes before its handler runs: no string field,
at any depth (map keys included), carries NUL, which PostgreSQL text cannot store. Field rules
on names and numbers live in app/domain (names.py, validation.py) and are applied by the handlers
and services; this gate only guarantees no string can fail in the driver as an "outage"."""

from __future__ import annotations

from typing import Any

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

from app.domain.names import require_text


def check_strings(message: Message, path: str = "") -> None:
    """InvalidInput naming the first string field (dotted path) that holds a NUL."""
    for field, value in message.ListFields():
        where = f"{path}{field.name}"
        if field.type == FieldDescriptor.TYPE_STRING:
            for text in [value] if isinstance(value, str) else value:
                require_text(where, text)
        elif field.type == FieldDescriptor.TYPE_MESSAGE:
            entry = field.message_type
            if entry is not None and entry.GetOptions().map_entry:
                _check_map(entry, value, where)
            elif isinstance(value, Message):
                check_strings(value, f"{where}.")
            else:
                for item in value:
                    check_strings(item, f"{where}.")


def _check_map(entry: Descriptor, mapping: Any, where: str) -> None:
    key_is_text = entry.fields_by_name["key"].type == FieldDescriptor.TYPE_STRING
    value_type = entry.fields_by_name["value"].type
    for key, item in mapping.items():
        if key_is_text:
            require_text(f"{where} key", key)
        if value_type == FieldDescriptor.TYPE_STRING:
            require_text(f"{where}[{key!r}]", item)
        elif value_type == FieldDescriptor.TYPE_MESSAGE:
            check_strings(item, f"{where}[{key!r}].")
