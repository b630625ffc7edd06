"""Which Redis to talk to and how, parsed from one URL (the only way to configure it).

==================================================== =============================================
URL                                                  meaning
==================================================== =============================================
``redis://host:6379/0``                              one server, database 0
``rediss://host:6380/0``                             one server over TLS
``redis://user:secret@host:6379/0``                  ACL user and password (``:secret@``: default
                                                     user); percent-encode special characters
``redis+cluster://h1:7000,h2:7001``                  Redis Cluster from these seed nodes (the
                                                     scheme selects cluster mode; no database)
``rediss+cluster://user:secret@h1:7000``             Redis Cluster over TLS with an ACL user
==================================================== =============================================

TLS options go in the query string: ``ssl_ca_certs`` (CA bundle file), ``ssl_certfile`` and
``ssl_keyfile`` (client certificate), ``ssl_cert_reqs`` (``required`` by default, ``optional``,
``none``) and ``ssl_check_hostname`` (``true`` by default; ``false`` for certificates without
the server's name). Unknown options are an error, so a typo never silently weakens TLS.
"""

from __future__ import annotations

import re
import ssl
from dataclasses import dataclass
from urllib.parse import parse_qsl, unquote, urlsplit

from solaris_lib.cache.errors import CacheConfigError

DEFAULT_PORT = 6379
_SCHEMES = {  # scheme -> (tls, cluster)
    "redis": (False, False),
    "rediss": (True, False),
    "redis+cluster": (False, True),
    "rediss+cluster": (True, True),
}
_CERT_REQS = {"required": ssl.CERT_REQUIRED, "optional": ssl.CERT_OPTIONAL, "none": ssl.CERT_NONE}
_HOST_PORT = re.compile(r"^(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<host>[^:/\[\]]+))(?::(?P<port>\d+))?$")
_BOOLEANS = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}


@dataclass(frozen=True)
class TlsOptions:
    """How to verify the server (and, optionally, present a client certificate)."""

    ca_certs: str | None = None
    certfile: str | None = None
    keyfile: str | None = None
    cert_reqs: str = "required"
    check_hostname: bool = True

    def context(self) -> ssl.SSLContext:
        """A client SSLContext; the system trust store unless ``ca_certs`` is given."""
        context = ssl.create_default_context(cafile=self.ca_certs)
        context.check_hostname = self.check_hostname and self.cert_reqs != "none"
        context.verify_mode = _CERT_REQS[self.cert_reqs]
        if self.certfile:
            context.load_cert_chain(self.certfile, self.keyfile)
        return context


@dataclass(frozen=True)
class Endpoint:
    """A parsed Redis URL: seed nodes, credentials, database, TLS and cluster mode."""

    nodes: tuple[tuple[str, int], ...]
    username: str | None = None
    password: str | None = None
    db: int = 0
    cluster: bool = False
    tls: TlsOptions | None = None

    @classmethod
    def from_url(cls, url: str) -> Endpoint:
        """Parse ``url`` (see the module docstring); a CacheConfigError names the problem."""
        parts = urlsplit(url)
        if parts.scheme not in _SCHEMES:
            raise CacheConfigError(
                f"unsupported Redis URL scheme {parts.scheme!r} in {redact(url)}; "
                f"use one of {', '.join(_SCHEMES)}"
            )
        tls, cluster = _SCHEMES[parts.scheme]
        userinfo, _, hostlist = parts.netloc.rpartition("@")
        username, password = _credentials(userinfo)
        db = _database(parts.path, cluster, url)
        options = _tls_options(parts.query, tls, url)
        return cls(_nodes(hostlist, url), username, password, db, cluster, options)

    def redacted(self) -> str:
        """The endpoint for log lines, without the password."""
        scheme = ("rediss" if self.tls else "redis") + ("+cluster" if self.cluster else "")
        user = f"{self.username or ''}:***@" if self.password else ""
        hosts = ",".join(f"{h}:{p}" for h, p in self.nodes)
        return f"{scheme}://{user}{hosts}" + ("" if self.cluster else f"/{self.db}")


def redact(url: str) -> str:
    """``url`` with any password replaced by ``***`` (for error messages)."""
    parts = urlsplit(url)
    userinfo, at, hostlist = parts.netloc.rpartition("@")
    if not at or ":" not in userinfo:
        return url
    user = userinfo.split(":", 1)[0]
    return url.replace(parts.netloc, f"{user}:***@{hostlist}", 1)


def _credentials(userinfo: str) -> tuple[str | None, str | None]:
    if not userinfo:
        return None, None
    user, colon, password = userinfo.partition(":")
    if not colon:
        return None, unquote(user)  # redis://secret@host: a password for the default user
    return unquote(user) or None, unquote(password)


def _nodes(hostlist: str, url: str) -> tuple[tuple[str, int], ...]:
    nodes = []
    for item in hostlist.split(","):
        match = _HOST_PORT.match(item.strip())
        port = int(match.group("port") or DEFAULT_PORT) if match else 0
        if not match or not 0 < port < 65536:
            raise CacheConfigError(f"bad host:port {item!r} in Redis URL {redact(url)}")
        nodes.append((match.group("v6") or match.group("host"), port))
    return tuple(nodes)


def _database(path: str, cluster: bool, url: str) -> int:
    text = path.strip("/")
    if not text:
        return 0
    if cluster:
        raise CacheConfigError(f"Redis Cluster has no databases: drop /{text} from {redact(url)}")
    if not text.isdigit():
        raise CacheConfigError(f"database must be a number, got {text!r} in {redact(url)}")
    return int(text)


def _tls_options(query: str, tls: bool, url: str) -> TlsOptions | None:
    raw = dict(parse_qsl(query, keep_blank_values=True))
    known = {"ssl_ca_certs", "ssl_certfile", "ssl_keyfile", "ssl_cert_reqs", "ssl_check_hostname"}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise CacheConfigError(
            f"unknown Redis URL options {', '.join(unknown)} in {redact(url)}; known: "
            f"{', '.join(sorted(known))}"
        )
    if not tls:
        if raw:
            raise CacheConfigError(f"TLS options need a rediss:// URL: {redact(url)}")
        return None
    reqs = raw.get("ssl_cert_reqs", "required").lower()
    check = raw.get("ssl_check_hostname", "true").lower()
    if reqs not in _CERT_REQS or check not in _BOOLEANS:
        raise CacheConfigError(
            f"ssl_cert_reqs must be one of {', '.join(_CERT_REQS)} and ssl_check_hostname a "
            f"boolean, in {redact(url)}"
        )
    return TlsOptions(
        raw.get("ssl_ca_certs"), raw.get("ssl_certfile"), raw.get("ssl_keyfile"), reqs,
        _BOOLEANS[check],
    )
