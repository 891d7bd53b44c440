"""Read and validate a hosts file: clusterlaunch YAML or an MPI/DeepSpeed hostfile.

Every problem becomes a :class:`~clusterlaunch.errors.HostsFileError` that names
the file, the line, the field and the fix; nothing here touches the network.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from clusterlaunch import envpolicy
from clusterlaunch.errors import HostsFileError
from clusterlaunch.hostranges import HostRangeError, expand_hosts
from clusterlaunch.model import HostSpec, Inventory
from clusterlaunch.yamlines import DuplicateKeyError, LineMap, key_line, load_yaml

TOP_KEYS = ("master_port", "master_addr", "defaults", "hosts")
SHARED_KEYS = ("user", "port", "python", "workdir", "setup", "env", "gpus")
HOST_KEYS = ("host", "gpus", "user", "port", "python", "workdir", "setup", "env", "devices", "addr")

# A MPI/DeepSpeed hostfile line: a host (ranges allowed) and optional key=value
# words. No colons, so a YAML file never looks like one.
_MPI_LINE = re.compile(r"[A-Za-z0-9\[][^\s:#=]*(\s+[A-Za-z_]+=\S+)*")
_DIGITS = re.compile(r"[0-9]+")


def load_inventory(path: str) -> Inventory:
    """Read, detect the format of and validate the hosts file at ``path``."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise HostsFileError(
            path, None, "", "no such file; pass the path of a hosts file"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise HostsFileError(path, None, "", f"cannot read it: {exc}") from None
    return parse_inventory(text, path)


def parse_inventory(text: str, path: str) -> Inventory:
    """Parse hosts-file ``text`` (``path`` is used in messages only)."""
    if looks_like_mpi_hostfile(text):
        return _parse_mpi(text, path)
    return _parse_yaml(text, path)


def looks_like_mpi_hostfile(text: str) -> bool:
    """True when every meaningful line reads ``host [key=value ...]``."""
    lines = [_strip_comment(line) for line in text.splitlines()]
    meaningful = [line for line in lines if line]
    return bool(meaningful) and all(_MPI_LINE.fullmatch(line) for line in meaningful)


def _strip_comment(line: str) -> str:
    return line.split("#", 1)[0].strip()


def _parse_mpi(text: str, path: str) -> Inventory:
    hosts: list[HostSpec] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = _strip_comment(raw)
        if not line:
            continue
        name, *words = line.split()
        _refuse_user_in_host(name, path, number, name)
        slots = 1  # OpenMPI's default when a line gives no slots
        for word in words:
            key, _, value = word.partition("=")
            if key == "slots":
                slots = _positive_int(value, path, number, f"{name}: slots", "slots=4")
            elif key != "max_slots":
                hint = _suggest(key, ("slots", "max_slots"))
                raise HostsFileError(path, number, name, f"unknown option {key!r}{hint}")
        for expanded in _expand(name, path, number, name):
            hosts.append(HostSpec(host=expanded, gpus=slots, line=number))
    inventory = Inventory(path=path, hosts=tuple(hosts))
    _check_inventory(inventory)
    return inventory


def _parse_yaml(text: str, path: str) -> Inventory:
    try:
        data = load_yaml(text)
    except DuplicateKeyError as exc:
        raise HostsFileError(path, exc.line, exc.key, f"{exc}; keep one of them") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(exc, "problem", None) or str(exc)
        raise HostsFileError(path, line, "", f"YAML syntax error: {problem}") from None
    if data is None:
        raise HostsFileError(path, None, "hosts", "the file is empty; list your hosts under hosts:")
    if not isinstance(data, dict):
        raise HostsFileError(
            path, 1, "", "expected a mapping with a hosts: list (or an MPI hostfile)"
        )
    _check_keys(data, TOP_KEYS, path, "")
    defaults = data.get("defaults")
    if defaults is None:
        defaults = {}
    if not isinstance(defaults, dict):
        raise HostsFileError(path, key_line(data, "defaults"), "defaults", "must be a mapping")
    _check_keys(defaults, SHARED_KEYS, path, "defaults.")
    entries = data.get("hosts")
    if not entries:
        raise HostsFileError(
            path,
            key_line(data, "hosts"),
            "hosts",
            "no hosts; add a list like - {host: gpu-a, gpus: 4}",
        )
    if not isinstance(entries, list):
        raise HostsFileError(path, key_line(data, "hosts"), "hosts", "must be a list of hosts")
    hosts: list[HostSpec] = []
    for index, entry in enumerate(entries):
        hosts.extend(_host_entries(entry, defaults, index, path, data))
    inventory = Inventory(
        path=path,
        hosts=tuple(hosts),
        master_port=_master_port(data, path),
        master_addr=_optional_str(data, "master_addr", path, "master_addr"),
    )
    _check_inventory(inventory)
    return inventory


def _host_entries(
    entry: Any, defaults: Mapping[str, Any], index: int, path: str, top: Any
) -> list[HostSpec]:
    where = f"hosts[{index}]"
    if not isinstance(entry, dict):
        line = key_line(top, "hosts")
        raise HostsFileError(
            path, line, where, "must be a mapping like {host: gpu-a, gpus: 4}, got " + repr(entry)
        )
    line = entry.line if isinstance(entry, LineMap) else None
    _check_keys(entry, HOST_KEYS, path, where + ".")
    if "host" not in entry:
        raise HostsFileError(path, line, where + ".host", "missing; give the SSH destination")
    name = entry["host"]
    if not isinstance(name, str) or not name.strip() or any(c.isspace() for c in name):
        raise HostsFileError(
            path, key_line(entry, "host"), where + ".host", f"must be a host name, got {name!r}"
        )
    _refuse_user_in_host(name, path, key_line(entry, "host"), where + ".host")
    merged = {**defaults, **entry}
    if "gpus" not in merged:
        raise HostsFileError(
            path, line, where + ".gpus", "missing; give the number of processes, e.g. gpus: 4"
        )
    source = entry if "gpus" in entry else defaults
    prefix = where if "gpus" in entry else "defaults"
    gpus = _positive_int(
        merged["gpus"], path, key_line(source, "gpus"), prefix + ".gpus", "gpus: 4"
    )
    env = {
        **_env(defaults, path, "defaults.env"),
        **_env(entry, path, where + ".env"),
    }
    devices = _devices(entry, gpus, path, where)
    names = _expand(name, path, key_line(entry, "host"), where + ".host")
    if len(names) > 1 and "addr" in entry:
        raise HostsFileError(
            path, key_line(entry, "addr"), where + ".addr", "cannot be combined with a host range"
        )
    python = _shared_str(entry, defaults, "python", path, where)
    if python is not None:
        _check_python(python, entry, defaults, path, where)
    spec = {
        "gpus": gpus,
        "user": _shared_str(entry, defaults, "user", path, where),
        "port": _port(entry, defaults, path, where),
        "python": python,
        "workdir": _shared_str(entry, defaults, "workdir", path, where),
        "setup": _shared_str(entry, defaults, "setup", path, where),
        "env": env,
        "devices": devices,
        "addr": _optional_str(entry, "addr", path, where + ".addr"),
    }
    return [HostSpec(host=host, line=line, **spec) for host in names]  # type: ignore[arg-type]


def _refuse_user_in_host(name: str, path: str, line: int | None, field: str) -> None:
    if "@" in name:
        user, _, bare = name.rpartition("@")
        raise HostsFileError(
            path, line, field, f"{name!r} has a user in it; write host: {bare} and user: {user}"
        )


def _check_keys(
    mapping: Mapping[str, Any], allowed: tuple[str, ...], path: str, where: str
) -> None:
    for key in mapping:
        if key not in allowed:
            hint = _suggest(str(key), allowed)
            raise HostsFileError(
                path,
                key_line(mapping, str(key)),
                f"{where}{key}",
                f"unknown key{hint}; allowed here: {', '.join(allowed)}",
            )


def _suggest(word: str, choices: tuple[str, ...]) -> str:
    close = difflib.get_close_matches(word, choices, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _positive_int(value: Any, path: str, line: int | None, field: str, example: str) -> int:
    number = _as_int(value)
    if number is None or number < 1:
        raise HostsFileError(path, line, field, f"must be a positive integer, got {value!r}")
    return number


def _as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and _DIGITS.fullmatch(value.strip()):
        return int(value)
    return None


def _expand(name: str, path: str, line: int | None, field: str) -> list[str]:
    try:
        return expand_hosts(name)
    except HostRangeError as exc:
        raise HostsFileError(path, line, field, str(exc)) from None


def _env(mapping: Mapping[str, Any], path: str, field: str) -> dict[str, str]:
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


def _devices(entry: Mapping[str, Any], gpus: int, path: str, where: str) -> tuple[int, ...] | None:
    if "devices" not in entry:
        return None
    raw = entry["devices"]
    line = key_line(entry, "devices")
    field = where + ".devices"
    if not isinstance(raw, list) or any(_as_int(d) is None or int(d) < 0 for d in raw):
        raise HostsFileError(path, line, field, f"must be a list of GPU indices, got {raw!r}")
    devices = tuple(int(d) for d in raw)
    if len(set(devices)) != len(devices):
        raise HostsFileError(path, line, field, f"lists a GPU twice: {list(devices)}")
    if len(devices) != gpus:
        raise HostsFileError(
            path, line, field, f"has {len(devices)} entries but gpus is {gpus}; they must match"
        )
    return devices


def _shared_str(
    entry: Mapping[str, Any], defaults: Mapping[str, Any], key: str, path: str, where: str
) -> str | None:
    if key in entry:
        return _optional_str(entry, key, path, f"{where}.{key}")
    return _optional_str(defaults, key, path, f"defaults.{key}")


def _optional_str(mapping: Mapping[str, Any], key: str, path: str, field: str) -> str | None:
    if key not in mapping or mapping[key] is None:
        return None
    value = mapping[key]
    if not isinstance(value, str) or not value.strip() or "\x00" in value:
        raise HostsFileError(
            path, key_line(mapping, key), field, f"must be a non-empty string, got {value!r}"
        )
    return value


def _port(
    entry: Mapping[str, Any], defaults: Mapping[str, Any], path: str, where: str
) -> int | None:
    source, field = (entry, f"{where}.port") if "port" in entry else (defaults, "defaults.port")
    if "port" not in source:
        return None
    port = _as_int(source["port"])
    if port is None or not 1 <= port <= 65535:
        raise HostsFileError(
            path,
            key_line(source, "port"),
            field,
            f"must be a TCP port 1-65535, got {source['port']!r}",
        )
    return port


def _master_port(data: Mapping[str, Any], path: str) -> int | None:
    if "master_port" not in data or data["master_port"] == "auto":
        return None
    port = _as_int(data["master_port"])
    if port is None or not 1 <= port <= 65535:
        raise HostsFileError(
            path,
            key_line(data, "master_port"),
            "master_port",
            f"must be auto or a TCP port 1-65535, got {data['master_port']!r}",
        )
    return port


def _check_python(
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


def _check_inventory(inventory: Inventory) -> None:
    seen: dict[tuple[str, int | None], HostSpec] = {}
    for spec in inventory.hosts:
        key = (spec.host, spec.port)
        if key in seen:
            first = seen[key]
            raise HostsFileError(
                inventory.path,
                spec.line,
                "host",
                f"{spec.host} is listed twice (also at line {first.line}); "
                "list each host once and raise its gpus instead",
            )
        seen[key] = spec
