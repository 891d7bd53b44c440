"""Read and validate a hosts file: clusterlaunch YAML or an MPI/DeepSpeed hostfile.

Every problem becomes a :class:`~clusterlaunch.core.errors.HostsFileError` that names
the file, the line, the field and the fix; nothing here touches the network.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

import yaml

from clusterlaunch.core import envfile, hostfields, hostnames, mpihostfile, restarts
from clusterlaunch.core.defaults import SSH_CLIENTS
from clusterlaunch.core.duplicatehosts import refuse_duplicates
from clusterlaunch.core.errors import HostsFileError
from clusterlaunch.core.hostranges import HostRangeError, expand_hosts, group_operand
from clusterlaunch.core.limits import MAX_HOSTS, MAX_HOSTS_FILE_BYTES, MAX_WORLD_SIZE
from clusterlaunch.core.model import HostSpec, Inventory
from clusterlaunch.core.yamlines import (
    DuplicateKeyError,
    LineMap,
    YamlLimitError,
    describe_yaml_error,
    item_line,
    key_line,
    load_yaml,
)
from clusterlaunch.core.yamlnumbers import first_number_form

_ENTRY_EXAMPLE = "{host: gpu-a, gpus: 4}"
TOP_KEYS: tuple[str, ...] = ("master_port", "master_addr", "ssh_client", "defaults", "hosts")
SHARED_KEYS: tuple[str, ...] = ("user", "port", "python", "workdir", "setup", "env")
SHARED_KEYS += ("env_file", "gpus", "accelerator")
HOST_KEYS: tuple[str, ...] = ("host", "gpus", "user", "port", "python", "workdir", "setup")
HOST_KEYS += ("env", "env_file", "devices", "addr", "accelerator")
HOST_KEYS += ("spare",)
TOP_KEYS += ("max_restarts",)


def load_inventory(path: str) -> Inventory:
    """Read, detect the format of and validate the hosts file at ``path``."""
    return parse_inventory(read_hosts_file(path), path)


def read_hosts_file(path: str) -> str:
    """The text of the hosts file, at most :data:`MAX_HOSTS_FILE_BYTES` (``/dev/zero`` too)."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_HOSTS_FILE_BYTES + 1)
    except FileNotFoundError:
        raise HostsFileError(
            path, None, "", "no such file; pass the path of a hosts file"
        ) from None
    except OSError as exc:
        raise HostsFileError(path, None, "", f"cannot read it: {exc.strerror or exc}") from None
    if len(data) > MAX_HOSTS_FILE_BYTES:
        raise HostsFileError(
            path,
            None,
            "",
            f"larger than {MAX_HOSTS_FILE_BYTES:,} bytes (1 MiB), the limit for a hosts file; "
            "use host ranges (gpu[001-512]) and a defaults: block",
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise HostsFileError(
            path, line, "", f"not UTF-8 text (byte 0x{data[exc.start]:02x}); save it as UTF-8"
        ) from None


def parse_inventory(text: str, path: str) -> Inventory:
    """Parse hosts-file ``text`` (``path`` names it in messages, and anchors ``env_file:``)."""
    text = mpihostfile.without_bom(text)
    try:
        return (
            _parse_yaml(text, path) if mpihostfile.looks_like_yaml(text) else _parse_mpi(text, path)
        )
    except HostsFileError:  # "master_port:29500" is the likelier cause, where there is one
        mpihostfile.refuse_missing_space(text, path, (*TOP_KEYS, *SHARED_KEYS, *HOST_KEYS))
        raise


def _parse_mpi(text: str, path: str) -> Inventory:
    hosts: list[HostSpec] = []
    for entry in mpihostfile.parse_lines(text, path):
        room = MAX_HOSTS - len(hosts)
        for name in _expand(entry.name, path, entry.line, "", room, mpi=True):
            hosts.append(HostSpec(host=name, gpus=entry.slots, line=entry.line))
    if not hosts:
        raise HostsFileError(path, None, "", "no hosts; write one per line: gpu01 slots=8")
    inventory = Inventory(path=path, hosts=tuple(hosts), mpi=True)
    _check_inventory(inventory)
    return inventory


def _parse_yaml(text: str, path: str) -> Inventory:
    try:
        data = load_yaml(text)
    except DuplicateKeyError as exc:
        raise HostsFileError(path, exc.line, exc.key, f"{exc}; keep one of them") from None
    except YamlLimitError as exc:
        raise HostsFileError(path, exc.line, "", str(exc)) from None
    except yaml.YAMLError as exc:
        line, problem = describe_yaml_error(exc, text)
        raise HostsFileError(path, line, "", problem) from None
    number = first_number_form(data)  # before any field reads a number YAML changed
    if number is not None:  # a variable's value (env.NAME) may be a secret: not shown
        where, form = number
        raise HostsFileError(path, form.line, where, form.problem(".env." not in f".{where}"))
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
        hosts.extend(_host_entries(entry, defaults, index, path, data, MAX_HOSTS - len(hosts)))
    inventory = Inventory(
        path=path,
        hosts=tuple(hosts),
        master_port=hostfields.master_port(data, path),
        master_addr=hostfields.address(data, "master_addr", path, "master_addr"),
        max_restarts=restarts.max_restarts_field(data, path),
        ssh_client=_ssh_client(data, path),
    )
    _check_inventory(inventory)
    return inventory


def _ssh_client(data: Mapping[str, Any], path: str) -> str | None:
    """``ssh_client:``, one of :data:`SSH_CLIENTS` (``--ssh-client`` wins over it)."""
    if data.get("ssh_client") is None:
        return None
    value = data["ssh_client"]
    if value not in SSH_CLIENTS:
        choices = " or ".join(f"ssh_client: {name}" for name in SSH_CLIENTS)
        raise HostsFileError(
            path,
            key_line(data, "ssh_client"),
            "ssh_client",
            f"must be {' or '.join(SSH_CLIENTS)}, got {hostnames.shown(value)}; write {choices}",
        )
    return str(value)


def _host_entries(
    entry: Any, defaults: Mapping[str, Any], index: int, path: str, top: Any, room: int
) -> list[HostSpec]:
    where = f"hosts[{index}]"
    if not isinstance(entry, dict):
        got = "an empty item" if entry is None else hostnames.shown(entry)
        line = item_line(top["hosts"], index) or key_line(top, "hosts")
        raise HostsFileError(
            path, line, where, f"must be a mapping like {_ENTRY_EXAMPLE}, got {got}"
        )
    line = entry.line if isinstance(entry, LineMap) else None
    _check_keys(entry, HOST_KEYS, path, where + ".")
    if "host" not in entry:
        raise HostsFileError(path, line, where + ".host", "missing; give the SSH destination")
    name = entry["host"]
    if not isinstance(name, str) or not name.strip():
        got = hostfields.got_text(entry, "host")
        raise HostsFileError(
            path, key_line(entry, "host"), where + ".host", f"must be a host name, {got}"
        )
    merged = {**defaults, **entry}
    if "gpus" not in merged:
        raise HostsFileError(
            path, line, where + ".gpus", "missing; give the number of processes, e.g. gpus: 4"
        )
    source = entry if "gpus" in entry else defaults
    prefix = where if "gpus" in entry else "defaults"
    gpus = hostfields.gpus(source, path, key_line(source, "gpus"), prefix + ".gpus")
    env = {**_env(defaults, path, "defaults"), **_env(entry, path, where)}
    devices = hostfields.devices(entry, gpus, path, where)
    names = _expand(name, path, key_line(entry, "host"), where + ".host", room)
    if len(names) > 1 and "addr" in entry:
        raise HostsFileError(
            path, key_line(entry, "addr"), where + ".addr", "cannot be combined with a host range"
        )
    python = hostfields.shared_str(entry, defaults, "python", path, where)
    if python is not None:
        hostfields.check_python(python, entry, defaults, path, where)
    spec = {
        "user": hostfields.user(entry, defaults, path, where),
        "port": hostfields.port(entry, defaults, path, where),
        "python": python,
        "workdir": hostfields.shared_str(entry, defaults, "workdir", path, where),
        "setup": hostfields.shared_str(entry, defaults, "setup", path, where),
        "env": env,
        "devices": devices,
        "gpus": len(devices) if gpus is None and devices is not None else gpus,
        "addr": hostfields.address(entry, "addr", path, where + ".addr"),
        "accelerator": hostfields.accelerator(entry, defaults, path, where),
        "spare": restarts.spare_field(entry, path, where + ".spare"),
    }
    return [HostSpec(host=host, line=line, entry=index, **spec) for host in names]  # type: ignore[arg-type]


def _env(mapping: Mapping[str, Any], path: str, where: str) -> dict[str, str]:
    """``env_file:`` then ``env:`` of one block, ``env:`` winning; files are local,
    relative to the hosts file's directory."""
    field = where + ".env_file"
    name = hostfields.optional_str(mapping, "env_file", path, field)
    line = key_line(mapping, "env_file")
    variables = {} if name is None else envfile.named_in_hosts_file(name, path, line, field)
    return {**variables, **hostfields.env(mapping, path, where + ".env")}


def _check_keys(
    mapping: Mapping[str, Any], allowed: tuple[str, ...], path: str, where: str
) -> None:
    for key in mapping:
        if key not in allowed:
            hint = _suggest(str(key), allowed)
            if where and key in TOP_KEYS:  # ssh_client: under defaults:, say
                hint = " (it is a top-level key: move it out to the top of the file)"
            raise HostsFileError(
                path,
                key_line(mapping, str(key)),
                f"{where}{key}",
                f"unknown key{hint}; allowed here: {', '.join(allowed)}",
            )


def _suggest(word: str, choices: tuple[str, ...]) -> str:
    close = difflib.get_close_matches(word, choices, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _expand(
    name: str, path: str, line: int | None, field: str, room: int, mpi: bool = False
) -> list[str]:
    """The names ``name`` stands for (at most ``room`` more hosts), each one OpenSSH would take."""
    if not mpi and group_operand(name) is None:  # mpihostfile and expand_hosts say more
        hostnames.refuse_destination_form(name, path, line, field)
    try:
        names = expand_hosts(name, room)
    except HostRangeError as exc:
        raise HostsFileError(path, line, field, str(exc)) from None
    for host in names:
        hostnames.check_host_name(host, path, line, field)
    return names


def _check_inventory(inventory: Inventory) -> None:
    world = 0
    for spec in inventory.hosts:
        world += spec.gpus or 0  # gpus: auto is checked once resolved (accelerators.resolve)
        if world > MAX_WORLD_SIZE:
            raise HostsFileError(
                inventory.path,
                spec.line,
                "gpus",
                f"the job reaches {world:,} ranks at {spec.host}; "
                f"a job has at most {MAX_WORLD_SIZE:,} ranks",
            )
    refuse_duplicates(inventory)
    if all(spec.spare for spec in inventory.hosts):
        raise HostsFileError(
            inventory.path,
            inventory.hosts[0].line,
            "spare",
            "every host is a spare; mark only idle hosts spare: true",
        )
