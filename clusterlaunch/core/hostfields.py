"""Validation of single hosts-file fields, each error naming file, line, field and fix.

Used by :mod:`clusterlaunch.core.hostfile`; pure, no I/O.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Mapping
from typing import Any

from clusterlaunch.core import envpolicy
from clusterlaunch.core.accelerators import NAMES as ACCELERATORS
from clusterlaunch.core.errors import HostsFileError
from clusterlaunch.core.hostnames import (
    address_problem,
    master_address_problem,
    shown,
    user_name_problem,
)
from clusterlaunch.core.limits import MAX_PROCS_PER_HOST
from clusterlaunch.core.yamlines import key_line, written

_DIGITS = re.compile(r"[0-9]{1,18}")
AUTO = "auto"
_MAX_SHOWN = 60


def as_read(value: Any) -> str:
    """What YAML made of a value, for a message; its null is "no value", not ``None``."""
    return "no value" if value is None else shown(value)


def got_text(mapping: Mapping[str, Any], key: str, fix: str = "") -> str:
    """``got VALUE; FIX`` for a text field: the one rule for all of them. A value YAML read
    as something else (``yes``: True, ``~``: no value) is shown as written; the fix: quote it."""
    value, text = as_read(mapping[key]), written(mapping, key)
    if text == "":  # "host:" with nothing after it (YAML reads null)
        return f"got nothing (the value is empty); {fix}" if fix else "got nothing (it is empty)"
    if text and len(text) <= _MAX_SHOWN:
        reads = "" if text == value else f", which YAML reads as {value}"
        return f'got {text}{reads}; write it in quotes ("{text}")'
    return f"got {value}; {fix}" if fix else f"got {value}"


def positive_int(
    value: Any, path: str, line: int | None, field: str, most: int = MAX_PROCS_PER_HOST
) -> int:
    number = as_int(value)
    if number is None or not 1 <= number <= most:
        raise HostsFileError(
            path, line, field, f"must be a positive integer up to {most:,}, got {shown(value)}"
        )
    return number


def as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and _DIGITS.fullmatch(value.strip(" \t")):  # not U+2028
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
    for key, value in raw.items():  # YAML keys are the text as written (yamlines)
        why = envpolicy.refusal(key)
        if why is None and (isinstance(value, bool) or not isinstance(value, str | int)):
            why = "must be a string, " + _got_value(raw, key)
        if why is not None:
            raise HostsFileError(path, key_line(raw, key), f"{field}.{key}", why)
        result[key] = str(value)
    return result


def _got_value(env: Mapping[str, Any], name: str) -> str:
    """What YAML made of ``env``'s value of ``name``: a YAML word (``yes``, ``~``) as it
    was written; a number, a date or a collection only by its kind, since a variable's
    value may be a secret, as the other messages about variables never show one."""
    value = env[name]
    if value is None or isinstance(value, bool):
        return got_text(env, name, "write the value in quotes")
    kinds = {float: "a number with a fraction or exponent", datetime.date: "a date"}
    kinds |= {list: "a list", dict: "a mapping"}
    kind = next((said for t, said in kinds.items() if isinstance(value, t)), "no text")
    return f"and YAML reads this value as {kind} (not shown); write it in quotes"


def gpus(source: Mapping[str, Any], path: str, line: int | None, field: str) -> int | None:
    """``source``'s ``gpus:``: a positive integer, or ``auto`` (``None``: counted by the
    preflight)."""
    value = source["gpus"]
    if value == AUTO:
        return None
    number = as_int(value)
    if number is None or not 1 <= number <= MAX_PROCS_PER_HOST:
        text = written(source, "gpus")  # "yes" was shown as "True"
        got = (
            as_read(value)
            if text in (None, as_read(value))
            else f"{text}, which YAML reads as {as_read(value)}"
        )
        raise HostsFileError(
            path,
            line,
            field,
            f"must be auto or a positive integer up to {MAX_PROCS_PER_HOST:,}, got {got}",
        )
    return number


def accelerator(
    entry: Mapping[str, Any], defaults: Mapping[str, Any], path: str, where: str
) -> str | None:
    """``accelerator:``: cuda, rocm or npu (unset or null: detected by the preflight)."""
    source, field = (
        (entry, f"{where}.accelerator")
        if "accelerator" in entry
        else (defaults, "defaults.accelerator")
    )
    value = source.get("accelerator")
    if value is not None and value not in ACCELERATORS:  # 1 or yes: shown as written
        raise HostsFileError(
            path,
            key_line(source, "accelerator"),
            field,
            f"must be one of {', '.join(ACCELERATORS)}, "
            f"got {written(source, 'accelerator') or shown(value)}",
        )
    return value


def _device_index(value: Any) -> int | None:
    """A GPU index a host can have (0 to 1,023: 999999999999999999999 was taken), or None."""
    number = as_int(value)
    return number if number is not None and 0 <= number < MAX_PROCS_PER_HOST else None


def devices(
    entry: Mapping[str, Any], gpus: int | None, path: str, where: str
) -> tuple[int, ...] | None:
    if entry.get("devices") is None:  # unset, or null (unset too)
        return None
    raw = entry["devices"]
    line = key_line(entry, "devices")
    field = where + ".devices"
    if not isinstance(raw, list) or any(_device_index(d) is None for d in raw):
        raise HostsFileError(
            path,
            line,
            field,
            f"must be a list of GPU indices (0 to {MAX_PROCS_PER_HOST - 1:,}), got {shown(raw)}",
        )
    if not raw:  # with gpus: auto it would start no process at all
        fix = "list the device indices (devices: [0, 1]) or drop the key to use every device"
        raise HostsFileError(path, line, field, f"is empty; {fix}")
    devices = tuple(int(d) for d in raw)
    if len(set(devices)) != len(devices):
        raise HostsFileError(path, line, field, f"lists a GPU twice: {list(devices)}")
    if gpus is not None and len(devices) != gpus:
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


def user(
    entry: Mapping[str, Any], defaults: Mapping[str, Any], path: str, where: str
) -> str | None:
    """``user:``, a name OpenSSH would take (it may reach a ProxyCommand as ``%r``)."""
    source, field = (entry, f"{where}.user") if "user" in entry else (defaults, "defaults.user")
    name = optional_str(source, "user", path, field)
    problem = None if name is None else user_name_problem(name)
    if problem is not None:
        raise HostsFileError(path, key_line(source, "user"), field, f"{shown(name)} {problem}")
    return name


def address(mapping: Mapping[str, Any], key: str, path: str, field: str) -> str | None:
    """``addr:`` or ``master_addr:``: a host name or address, by the same rules as ``host:``."""
    value = optional_str(mapping, key, path, field)
    problem = None if value is None else address_problem(value, f"{key}: ", "master_port: ")
    if problem is None and value is not None and key == "master_addr":
        problem = master_address_problem(value, "master_addr:")
    if problem is not None:
        raise HostsFileError(path, key_line(mapping, key), field, f"{shown(value)} {problem}")
    return value


def optional_str(mapping: Mapping[str, Any], key: str, path: str, field: str) -> str | None:
    if key not in mapping or mapping[key] is None:
        return None
    value = mapping[key]
    if not isinstance(value, str) or not value.strip() or "\x00" in value:
        got = got_text(mapping, key)
        raise HostsFileError(
            path, key_line(mapping, key), field, f"must be a non-empty string, {got}"
        )
    return value


def port(
    entry: Mapping[str, Any], defaults: Mapping[str, Any], path: str, where: str
) -> int | None:
    source, field = (entry, f"{where}.port") if "port" in entry else (defaults, "defaults.port")
    if source.get("port") is None:
        return None
    port = as_int(source["port"])
    if port is None or not 1 <= port <= 65535:
        raise HostsFileError(
            path,
            key_line(source, "port"),
            field,
            f"must be a TCP port 1-65535, got {shown(source['port'])}",
        )
    return port


def master_port(data: Mapping[str, Any], path: str) -> int | None:
    if data.get("master_port") in (None, "auto"):
        return None
    port = as_int(data["master_port"])
    if port is None or not 1 <= port <= 65535:
        raise HostsFileError(
            path,
            key_line(data, "master_port"),
            "master_port",
            f"must be auto or a TCP port 1-65535, got {shown(data['master_port'])}",
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
