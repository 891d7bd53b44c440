"""Validation of single hosts-file fields, each error naming file, line, field and fix.

Used by :mod:`clusterlaunch.core.hostfile`; pure, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from clusterlaunch.core import envpolicy
from clusterlaunch.core.errors import HostsFileError
from clusterlaunch.core.yamlines import key_line

_DIGITS = re.compile(r"[0-9]+")


def refuse_user_in_host(name: str, path: str, line: int | None, field: str) -> None:
    if "@" in name:
        user, _, bare = name.rpartition("@")
        raise HostsFileError(
            path, line, field, f"{name!r} has a user in it; write host: {bare} and user: {user}"
        )


def positive_int(value: Any, path: str, line: int | None, field: str, example: str) -> int:
    number = as_int(value)
    if number is None or number < 1:
        raise HostsFileError(path, line, field, f"must be a positive integer, got {value!r}")
    return number


def as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and _DIGITS.fullmatch(value.strip()):
        return int(value)
    return None


def env(mapping: Mapping[str, Any], path: str, field: str) -> dict[str, str]:
    line = key_line(mapping, "env")
    raw = mapping.get("env")
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise HostsFileError(path, line, field, "must be a mapping of NAME: value strings")
    result: dict[str, str] = {}
    for key, value in raw.items():
        why = envpolicy.refusal(str(key))
        if why is not None:
            raise HostsFileError(path, key_line(raw, str(key)), f"{field}.{key}", why)
        if isinstance(value, bool) or not isinstance(value, str | int):
            raise HostsFileError(
                path,
                key_line(raw, str(key)),
                f"{field}.{key}",
                f"must be a string, got {value!r}; write the value in quotes",
            )
        result[str(key)] = str(value)
    return result


def devices(entry: Mapping[str, Any], gpus: int, path: str, where: str) -> tuple[int, ...] | None:
    if "devices" not in entry:
        return None
    raw = entry["devices"]
    line = key_line(entry, "devices")
    field = where + ".devices"
    if not isinstance(raw, list) or any(as_int(d) is None or int(d) < 0 for d in raw):
        raise HostsFileError(path, line, field, f"must be a list of GPU indices, got {raw!r}")
    devices = tuple(int(d) for d in raw)
    if len(set(devices)) != len(devices):
        raise HostsFileError(path, line, field, f"lists a GPU twice: {list(devices)}")
    if len(devices) != gpus:
        raise HostsFileError(
            path, line, field, f"has {len(devices)} entries but gpus is {gpus}; they must match"
        )
    return devices


def shared_str(
    entry: Mapping[str, Any], defaults: Mapping[str, Any], key: str, path: str, where: str
) -> str | None:
    if key in entry:
        return optional_str(entry, key, path, f"{where}.{key}")
    return optional_str(defaults, key, path, f"defaults.{key}")


def optional_str(mapping: Mapping[str, Any], key: str, path: str, field: str) -> str | None:
    if key not in mapping or mapping[key] is None:
        return None
    value = mapping[key]
    if not isinstance(value, str) or not value.strip() or "\x00" in value:
        raise HostsFileError(
            path, key_line(mapping, key), field, f"must be a non-empty string, got {value!r}"
        )
    return value


def port(
    entry: Mapping[str, Any], defaults: Mapping[str, Any], path: str, where: str
) -> int | None:
    source, field = (entry, f"{where}.port") if "port" in entry else (defaults, "defaults.port")
    if "port" not in source:
        return None
    port = as_int(source["port"])
    if port is None or not 1 <= port <= 65535:
        raise HostsFileError(
            path,
            key_line(source, "port"),
            field,
            f"must be a TCP port 1-65535, got {source['port']!r}",
        )
    return port


def master_port(data: Mapping[str, Any], path: str) -> int | None:
    if "master_port" not in data or data["master_port"] == "auto":
        return None
    port = as_int(data["master_port"])
    if port is None or not 1 <= port <= 65535:
        raise HostsFileError(
            path,
            key_line(data, "master_port"),
            "master_port",
            f"must be auto or a TCP port 1-65535, got {data['master_port']!r}",
        )
    return port


def check_python(
    python: str, entry: Mapping[str, Any], defaults: Mapping[str, Any], path: str, where: str
) -> None:
    # ``env K=V PYTHON`` would take a path containing "=" for another assignment.
    if "=" in python or "\n" in python:
        source, field = (
            (entry, f"{where}.python") if "python" in entry else (defaults, "defaults.python")
        )
        raise HostsFileError(
            path, key_line(source, "python"), field, "must be a path without '=' or newlines"
        )
