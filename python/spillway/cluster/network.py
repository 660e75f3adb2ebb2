"""Keeping a simulated cluster on loopback, and proving that it stayed there.

Ray left to itself binds to the machine's interface address, listens on
every interface, and probes addresses outside the machine (cloud metadata,
DNS) even with its dashboard off. A cluster that Spillway starts on one
machine therefore runs in a private network namespace whose only interface
is loopback: there, any address but 127.0.0.1 is unreachable, so nothing
can leave. :func:`isolated_command` wraps a command that way (what
``spillway cluster local -- COMMAND`` and the test suite use), and
:func:`foreign_sockets` lists every socket of a set of processes whose
local or peer address is outside 127.0.0.0/8 and ::1, for the tests that
prove it.
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, List, Optional, Sequence, Set, Tuple, Union

from ..errors import SpillwayError

# Brings up loopback (down in a new namespace), then replaces the shell.
_LOOPBACK_UP = 'ip link set lo up && exec "$@"'


def interfaces() -> List[str]:
    """The network interfaces this process can see."""
    return sorted(name for _, name in socket.if_nameindex())


def is_isolated() -> bool:
    """Whether this process runs where loopback is the only interface."""
    return interfaces() == ["lo"]


def require_isolation(what: str) -> None:
    """Raises unless this process is in a loopback-only network namespace,
    saying how to get there."""
    if not is_isolated():
        raise SpillwayError(
            f"{what} runs Ray only in a private network namespace with loopback alone, so that nothing "
            f"it starts can reach another address; this process sees the interfaces {', '.join(interfaces())}. "
            "Run it under `spillway cluster local -- COMMAND`, or `unshare --net sh -c 'ip link set lo up && "
            "exec COMMAND'` as root, or pass isolated=False to take responsibility for the network yourself"
        )


def isolated_command(command: Sequence[str]) -> List[str]:
    """``command`` run in a new network namespace holding only loopback
    (needs root, or unprivileged user namespaces)."""
    if not command:
        raise SpillwayError("no command to run in the private network namespace")
    unshare, ip = shutil.which("unshare"), shutil.which("ip")
    if unshare is None or ip is None:
        missing = " and ".join(name for name, path in [("unshare", unshare), ("ip", ip)] if path is None)
        raise SpillwayError(f"running in a private network namespace needs {missing} (util-linux, iproute2)")
    prefix = [unshare, "--net"] if os.geteuid() == 0 else [unshare, "--net", "--map-root-user"]
    return [*prefix, "sh", "-c", _LOOPBACK_UP, "sh", *command]


Address = Tuple[Union[ipaddress.IPv4Address, ipaddress.IPv6Address], int]


def namespace_pids() -> List[int]:
    """Every process in this process's network namespace (all of a local
    cluster's Ray processes, when it runs in a namespace of its own)."""
    mine = os.readlink("/proc/self/ns/net")
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.readlink(f"/proc/{entry}/ns/net") == mine:
                    pids.append(int(entry))
            except OSError:
                continue
    return pids


@dataclass(frozen=True)
class Socket:
    """One TCP or UDP socket of a process, as ``/proc/PID/net`` describes it."""

    pid: int
    protocol: str
    local: Address
    # None for a listening or unconnected socket.
    peer: Optional[Address]

    def is_loopback(self) -> bool:
        """Whether both its addresses are loopback (a wildcard bind is not)."""
        return _is_loopback(self.local) and (self.peer is None or _is_loopback(self.peer))

    def __str__(self) -> str:
        peer = f" -> {_show(self.peer)}" if self.peer else ""
        return f"pid {self.pid} {self.protocol} {_show(self.local)}{peer}"


def sockets(pids: Iterable[int]) -> List[Socket]:
    """The TCP and UDP sockets the processes ``pids`` hold (those that have
    exited meanwhile are skipped)."""
    found: List[Socket] = []
    for pid in pids:
        inodes = _socket_inodes(pid)
        if not inodes:
            continue
        for protocol in ("tcp", "tcp6", "udp", "udp6"):
            try:
                table = Path(f"/proc/{pid}/net/{protocol}").read_text()
            except OSError:
                continue
            for row in table.splitlines()[1:]:
                fields = row.split()
                if len(fields) < 10 or fields[9] not in inodes:
                    continue
                peer = _address(fields[2])
                unset = peer[0].is_unspecified and peer[1] == 0
                found.append(Socket(pid, protocol, _address(fields[1]), None if unset else peer))
    return found


def foreign_sockets(pids: Iterable[int]) -> List[Socket]:
    """The sockets of ``pids`` bound to, listening on or connected to any
    address outside 127.0.0.0/8 and ::1 (a wildcard bind counts: it listens
    on every interface)."""
    return [entry for entry in sockets(pids) if not entry.is_loopback()]


def _socket_inodes(pid: int) -> Set[str]:
    inodes: Set[str] = set()
    try:
        descriptors = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return inodes
    for descriptor in descriptors:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{descriptor}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    return inodes


def _address(field: str) -> Address:
    """A /proc/net address: hexadecimal, each 32-bit word of the IP in host
    (little-endian) byte order, then the port."""
    host, port = field.split(":")
    raw = bytes.fromhex(host)
    ip = b"".join(raw[index : index + 4][::-1] for index in range(0, len(raw), 4))
    return ipaddress.ip_address(ip), int(port, 16)


def _is_loopback(address: Address) -> bool:
    ip = address[0]
    if ip.version == 6 and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


def _show(address: Address) -> str:
    ip, port = address
    return f"[{ip}]:{port}" if ip.version == 6 else f"{ip}:{port}"
