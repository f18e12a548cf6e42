"""This machine's network addresses: the URLs the live view prints when it listens on every
interface (`--serve 0.0.0.0:PORT`), and the Host headers it accepts (an address of this machine).

Linux: each interface's IPv4 address from the SIOCGIFADDR ioctl and the IPv6 addresses from
/proc/net/if_inet6. Everywhere (and as a complement): the host name's addresses and the source
address of the default route (a UDP socket's connect() chooses a route and sends nothing).
Nothing here fails: what cannot be read is left out.
"""

from __future__ import annotations

import ipaddress
import socket
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, List, Optional, Union

_SIOCGIFADDR = 0x8915  # Linux
_ROUTE_PROBES = ("8.8.8.8", "10.255.255.255")  # only a route lookup: nothing is sent


@dataclass(frozen=True)
class LocalAddress:
    address: str  # without an IPv6 zone
    interface: str = ""

    @property
    def ip(self) -> Union[ipaddress.IPv4Address, ipaddress.IPv6Address]:
        return ipaddress.ip_address(self.address)

    @property
    def openable(self) -> bool:
        """Another machine can open a URL with it: not loopback, not link-local (which would
        need a zone), not multicast or unspecified."""
        ip = self.ip
        return not (ip.is_loopback or ip.is_link_local or ip.is_multicast or ip.is_unspecified)


def _ipv4_by_interface() -> Iterator[LocalAddress]:
    try:
        import fcntl
        names = [name for _, name in socket.if_nameindex()]
    except (ImportError, OSError, AttributeError):
        return
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for name in names:
            try:
                packed = fcntl.ioctl(s.fileno(), _SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
            except OSError:  # no IPv4 address, interface down
                continue
            yield LocalAddress(socket.inet_ntoa(packed[20:24]), name)


def _ipv6_from_proc(root: Path) -> Iterator[LocalAddress]:
    try:
        text = (root / "proc/net/if_inet6").read_text()
    except OSError:
        return
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 6 or len(parts[0]) != 32:
            continue
        try:
            ip = ipaddress.IPv6Address(bytes.fromhex(parts[0]))
        except ValueError:
            continue
        yield LocalAddress(str(ip), parts[5])


def _by_name() -> Iterator[LocalAddress]:
    try:
        infos = socket.getaddrinfo(socket.gethostname(), None)
    except (OSError, UnicodeError):
        return
    for family, _, _, _, sockaddr in infos:
        if family in (socket.AF_INET, socket.AF_INET6):
            yield LocalAddress(str(sockaddr[0]).split("%", 1)[0])


def primary_ipv4() -> Optional[str]:
    """The address other machines most likely reach this one at: the default route's source."""
    for probe in _ROUTE_PROBES:
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.connect((probe, 9))
                addr = s.getsockname()[0]
        except OSError:
            continue
        if addr and not ipaddress.ip_address(addr).is_unspecified:
            return str(addr)
    return None


def local_addresses(root: Path | str = "/") -> List[LocalAddress]:
    """Every address of this machine found (loopback included), each once: the default
    route's first, then IPv4 before IPv6."""
    primary = primary_ipv4()
    found = ([LocalAddress(primary)] if primary else []) + list(_ipv4_by_interface()) + \
        list(_ipv6_from_proc(Path(root))) + list(_by_name())
    merged: dict = {}
    for a in found:
        old = merged.get(a.ip)
        merged[a.ip] = LocalAddress(str(a.ip), (old.interface if old else "") or a.interface)
    return sorted(merged.values(), key=lambda a: (a.address != primary, a.ip.version))


def is_local_ip(text: str, addresses: Optional[List[LocalAddress]] = None) -> bool:
    """`text` is an IP address of this machine (any loopback address counts)."""
    try:
        ip = ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip.is_loopback:
        return True
    return any(a.ip == ip for a in (addresses if addresses is not None else local_addresses()))
