"""Channel set-up: TLS credentials, the bearer token, and where a token may be sent in cleartext.

The rules are the `manyshot` CLI's (client/connection.cc): the TLS files go together as there,
and a bearer token is only sent without TLS to a loopback server (127.0.0.0/8, ::1,
::ffff:127.x.y.z, localhost, unix: sockets), since it would otherwise cross the network in
cleartext.
"""

from __future__ import annotations

import ipaddress
from typing import Optional, Sequence, Tuple

from ._stubs import grpc
from .errors import ConfigurationError


def _is_loopback_host(host: str) -> bool:
    """One host (no port): a loopback IPv4/IPv6 literal or "localhost"."""
    if len(host) >= 2 and host[0] == "[" and host[-1] == "]":
        host = host[1:-1]
    name = host.lower()
    if name in ("localhost", "localhost."):
        return True
    if "%" in name:  # a scoped IPv6 address is never loopback
        return False
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return False
    if address.version == 4:
        return address.is_loopback  # 127.0.0.0/8
    mapped = address.ipv4_mapped
    return address.is_loopback or (mapped is not None and mapped.is_loopback)


def _host_of(address: str) -> str:
    """"host:port", "[v6]:port", "v6" (no port) -> the host part."""
    if address.startswith("["):
        close = address.find("]")
        return address if close < 0 else address[:close + 1]
    first = address.find(":")
    if first < 0:
        return address
    if address.find(":", first + 1) >= 0:
        return address  # a bare IPv6 address
    return address[:first]


def is_loopback_server(server: str) -> bool:
    """Whether the gRPC target `server` reaches this host only (the CLI's IsLoopbackServer)."""
    if server.startswith(("unix:", "unix-abstract:")):
        return True
    if server.startswith(("ipv4:", "ipv6:")):
        addresses = server[len("ipv4:"):]
        if not addresses:
            return False
        return all(_is_loopback_host(_host_of(a)) for a in addresses.split(","))
    if server.startswith("dns:"):
        server = server[len("dns:"):]
        if server.startswith("//"):  # dns://AUTHORITY/host:port
            slash = server.find("/", 2)
            if slash < 0:
                return False
            server = server[slash + 1:]
    return _is_loopback_host(_host_of(server))


def _read(argument: str, path: str, pem: bool) -> bytes:
    try:
        with open(path, "rb") as f:
            contents = f.read()
    except OSError as error:
        raise ConfigurationError(
            f"{argument}={path}: cannot read the file ({error.strerror})") from None
    if pem and b"-----BEGIN " not in contents:
        raise ConfigurationError(f"{argument}={path}: not a PEM file (no '-----BEGIN' line)")
    return contents


def resolve_token(server: str, tls: bool, token: Optional[str],
                  token_file: Optional[str]) -> Optional[str]:
    """The bearer token to send (or None), after the CLI's checks: one of token / token_file, a
    non-empty printable-ASCII token without spaces, and TLS unless the server is loopback."""
    if token and token_file:
        raise ConfigurationError("give token or token_file, not both")
    argument = "token"
    if token_file:
        argument = "token_file"
        token = _read("token_file", token_file, pem=False).decode("utf-8", "replace").strip()
        if not token:
            raise ConfigurationError(f"token_file={token_file}: the file holds no token")
    if not token:
        return None
    if any(not 0x20 < ord(c) <= 0x7e for c in token):
        raise ConfigurationError(f"{argument}: a token is printable ASCII without spaces")
    if not tls and not is_loopback_server(server):
        raise ConfigurationError(
            f"{argument} without TLS is only sent to loopback addresses (it would cross the "
            f"network in cleartext to {server}): give tls_ca_file")
    return token


def make_channel(server: str, *, tls_ca_file: Optional[str] = None,
                 tls_cert_file: Optional[str] = None, tls_key_file: Optional[str] = None,
                 tls_server_name: Optional[str] = None,
                 options: Sequence[Tuple[str, object]] = ()) -> Tuple[grpc.Channel, bool]:
    """A channel to `server` (TLS when tls_ca_file is given; mutual TLS with cert and key) and
    whether it uses TLS."""
    check_tls_arguments(tls_ca_file, tls_cert_file, tls_key_file, tls_server_name)
    options = list(options)
    if not tls_ca_file:
        return grpc.insecure_channel(server, options=options), False
    roots = _read("tls_ca_file", tls_ca_file, pem=True)
    cert = _read("tls_cert_file", tls_cert_file, pem=True) if tls_cert_file else None
    key = _read("tls_key_file", tls_key_file, pem=True) if tls_key_file else None
    credentials = grpc.ssl_channel_credentials(root_certificates=roots, private_key=key,
                                               certificate_chain=cert)
    if tls_server_name:
        options.append(("grpc.ssl_target_name_override", tls_server_name))
    return grpc.secure_channel(server, credentials, options=options), True


def check_tls_arguments(tls_ca_file: Optional[str], tls_cert_file: Optional[str],
                        tls_key_file: Optional[str], tls_server_name: Optional[str]) -> None:
    """The CLI's rules for the TLS arguments, checked before any file is read."""
    if bool(tls_cert_file) != bool(tls_key_file):
        raise ConfigurationError("tls_cert_file and tls_key_file must be given together")
    if tls_cert_file and not tls_ca_file:
        raise ConfigurationError(
            "tls_cert_file needs tls_ca_file (the CA that signed the server's certificate)")
    if tls_server_name and not tls_ca_file:
        raise ConfigurationError("tls_server_name needs tls_ca_file")
