"""Fetching a link on a chat member's behalf: public addresses only, unless an administrator allows more.

Where a reference comes from decides whether it is fetched, and how:

- **The host's own files arrive as bytes or as a path, never as a link to fetch.** LangBot resolves
  what it stores itself (web-chat uploads, its storage) to base64 before the run starts, so
  ``*_base64`` contents and an attachment's ``content`` are used as they are, with no network at
  all; an attachment ``path`` is read only inside the directories in ``RUNNER_KIT_FILE_DIRS``
  (:mod:`runner_kit.inputs`). A LangBot on a private Docker network therefore keeps working.
- **Every http(s) link in the run's input came with the message**: ``image_url`` / ``file_url``
  contents and an attachment's ``url`` (whatever its ``source``) are what the IM platform forwarded,
  and on LangBot's HTTP-bot and web-page-bot adapters what the sender wrote. A plugin that downloads
  one does it through :func:`fetch` (``runner_kit.inputs.download``), which refuses every address
  that is not public. Plugins that hand a link on to their platform unfetched do not fetch it.

:func:`fetch` accepts http and https only. The host is resolved once, off the event loop; every
address it resolves to must be public (not loopback, private, carrier-grade NAT, link-local with
the cloud metadata address, multicast, reserved, unspecified, documentation; IPv6 ``::1``,
``fc00::/7``, ``fe80::/10``, and IPv4 hidden in IPv4-mapped, -compatible, NAT64 and 6to4 forms is
judged as that IPv4; decimal, octal and hex spellings such as ``2130706433`` or ``0x7f.1`` are
read as the address they spell). The connection then goes to the address that was checked, with
the link's host name in the ``Host`` header and as the TLS server name (so the certificate is
verified for that name): a second DNS answer cannot move it (DNS rebinding). Redirects are
followed by hand, at most :data:`MAX_REDIRECTS`, each hop checked the same way. The download goes
direct (``HTTP(S)_PROXY`` is not used, since a proxy would resolve the name again), keeps no
cookies and never reuses a connection for another host.

An administrator allows more in ``RUNNER_KIT_FETCH_ALLOW``: a comma-separated list of host names
(``files.internal.example``, or ``*.internal.example`` for its subdomains), addresses and
ranges (``10.1.0.0/16``, ``fd00::/8``). A listed name may resolve anywhere; an address in a
listed range passes the check. The size limits stay.

A refused link fails the run with ``input.refused``, naming the link's host only (never a path,
query or credentials): "the link to 127.0.0.1 was not fetched: it points to a private or local
address".
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import re
import socket
import time
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any
from urllib.parse import unquote, urljoin, urlsplit

import httpx

from .errors import RunnerError
from .http import _no_cookies, ssl_context, timeout_for, transport_error
from .logs import get_logger

FETCH_ALLOW_ENV = "RUNNER_KIT_FETCH_ALLOW"
MAX_REDIRECTS = 5
_REDIRECTS = (301, 302, 303, 307, 308)

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

log = get_logger("runner_kit.netguard")
_warned: set[str] = set()

_V4 = ipaddress.IPv4Network
_V6 = ipaddress.IPv6Network
# (range, what it is): checked first, so a refusal names the kind of address
_BLOCKED: tuple[tuple[IPNetwork, str], ...] = (
    (_V4("0.0.0.0/8"), "unspecified"),
    (_V4("127.0.0.0/8"), "loopback"),
    (_V4("10.0.0.0/8"), "private"),
    (_V4("172.16.0.0/12"), "private"),
    (_V4("192.168.0.0/16"), "private"),
    (_V4("100.64.0.0/10"), "carrier-grade NAT"),
    (_V4("169.254.0.0/16"), "link-local"),  # 169.254.169.254: cloud instance metadata
    (_V4("192.0.0.0/24"), "reserved"),
    (_V4("192.0.2.0/24"), "documentation"),
    (_V4("198.51.100.0/24"), "documentation"),
    (_V4("203.0.113.0/24"), "documentation"),
    (_V4("192.88.99.0/24"), "reserved"),  # the old 6to4 relay anycast
    (_V4("198.18.0.0/15"), "reserved"),
    (_V4("224.0.0.0/4"), "multicast"),
    (_V4("240.0.0.0/4"), "reserved"),  # and 255.255.255.255
    (_V6("::/128"), "unspecified"),
    (_V6("::1/128"), "loopback"),
    (_V6("::/96"), "reserved"),  # IPv4-compatible (deprecated)
    (_V6("64:ff9b:1::/48"), "private"),  # local-use NAT64
    (_V6("100::/64"), "reserved"),
    (_V6("2001::/23"), "reserved"),  # Teredo, ORCHID, benchmarking
    (_V6("2001:db8::/32"), "documentation"),
    (_V6("3fff::/20"), "documentation"),
    (_V6("5f00::/16"), "reserved"),
    (_V6("fc00::/7"), "private"),
    (_V6("fe80::/10"), "link-local"),
    (_V6("fec0::/10"), "private"),  # site-local (deprecated)
    (_V6("ff00::/8"), "multicast"),
)
_NAT64 = _V6("64:ff9b::/96")
_PART = re.compile(r"0x[0-9a-f]+|0[0-7]*|[1-9][0-9]*")


# --- addresses ---------------------------------------------------------------------------------


def parse_ip(host: str) -> IPAddress | None:
    """The address ``host`` spells, or None for a name: dotted, bracketed IPv6 with or without a
    zone, and the decimal / octal / hex / shortened IPv4 forms C's inet_aton reads
    (``2130706433``, ``0177.1``, ``0x7f.0.0.1``, ``127.1``)."""
    h = unquote(host.strip()).lower()
    if h.startswith("[") and h.endswith("]"):
        h = h[1:-1]
    if h.endswith(".") and not h.endswith(".."):
        h = h[:-1]
    try:
        return ipaddress.ip_address(h)
    except ValueError:
        pass
    parts = h.split(".")
    if not 1 <= len(parts) <= 4 or not all(_PART.fullmatch(p) for p in parts):
        return None
    values = [int(p, 16) if p.startswith("0x") else int(p, 8) if p.startswith("0") and len(p) > 1 else int(p)
              for p in parts]
    *head, last = values
    if any(v > 255 for v in head) or last >= 256 ** (5 - len(values)):
        return None
    number = last
    for i, v in enumerate(head):
        number |= v << (8 * (3 - i))
    return ipaddress.IPv4Address(number)


def refusal(ip: IPAddress) -> str | None:
    """Why ``ip`` is not a public address ("loopback", "private", ...), or None when it is."""
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.scope_id:
            ip = ipaddress.IPv6Address(ip.packed)
        inner = ip.ipv4_mapped or ip.sixtofour
        if inner is None and ip in _NAT64:
            inner = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
        if inner is not None:
            return refusal(inner)
    for net, kind in _BLOCKED:
        if ip.version == net.version and ip in net:
            return kind
    if ip.is_multicast:
        return "multicast"
    if not ip.is_global:
        return "reserved"
    return None


# --- the administrator's allow-list ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AllowList:
    """Hosts and ranges an administrator lets links reach although they are not public."""

    names: frozenset[str] = frozenset()
    suffixes: tuple[str, ...] = ()  # "*.corp.example" → ".corp.example"
    networks: tuple[IPNetwork, ...] = ()

    @classmethod
    def parse(cls, text: str) -> AllowList:
        """``RUNNER_KIT_FETCH_ALLOW``'s format; an entry that is none of the forms is logged once."""
        names: set[str] = set()
        suffixes: list[str] = []
        networks: list[IPNetwork] = []
        for raw in re.split(r"[,\s]+", text or ""):
            entry = raw.strip().lower().rstrip(".")
            if not entry:
                continue
            try:
                networks.append(ipaddress.ip_network(entry.strip("[]"), strict=False))
                continue
            except ValueError:
                pass
            ip = parse_ip(entry)
            if ip is not None:
                networks.append(ipaddress.ip_network(ip))
            elif entry.startswith("*.") and _is_name(entry[2:]):
                suffixes.append(entry[1:])
            elif _is_name(entry):
                names.add(entry)
            elif raw not in _warned:
                _warned.add(raw)
                log.warning("%s: ignoring %r (not a host name, address or range)", FETCH_ALLOW_ENV, raw[:100])
        return cls(frozenset(names), tuple(suffixes), tuple(networks))

    @classmethod
    def from_env(cls) -> AllowList:
        """The allow-list in the environment, read at call time."""
        return _parsed(os.environ.get(FETCH_ALLOW_ENV, ""))

    def allows_host(self, host: str) -> bool:
        h = host.lower().rstrip(".")
        return h in self.names or any(h.endswith(s) for s in self.suffixes)

    def allows_ip(self, ip: IPAddress) -> bool:
        return any(ip.version == n.version and ip in n for n in self.networks)


@lru_cache(maxsize=8)
def _parsed(text: str) -> AllowList:
    return AllowList.parse(text)


def _is_name(text: str) -> bool:
    return bool(re.fullmatch(r"[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?(\.[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?)*", text))


# --- resolving and checking --------------------------------------------------------------------


async def _getaddrinfo(host: str, port: int) -> list[Any]:
    """The resolver (a seam for tests): asyncio's, which runs getaddrinfo in a worker thread."""
    return await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)


#: a link passed to the chat longer than this is not passed on (a platform's signed links are ~200)
MAX_CHAT_LINK = 8192


def chat_link(url: str, own: str | None = None) -> str | None:
    """``url`` (a file or image link a platform's answer names) as it may go to the chat, or None.

    A platform's answer can give back a link a member sent (an app that echoes the files it was
    given), and LangBot 4.11.2 fetches image and file links itself for some platforms (Discord,
    Lark, Matrix) with no address check: a link to the metadata service or the LAN would be fetched
    from the LangBot host and its bytes posted to the group. So a link is passed on only when it is
    http(s), at most :data:`MAX_CHAT_LINK` long, with no user:password@, blank or control character,
    and not to ``localhost`` or a literal private, loopback or link-local address, unless it is on
    ``own`` (the platform's API base URL: scheme, host and port) or ``RUNNER_KIT_FETCH_ALLOW`` lists
    it. Names are not resolved here. A relative link (``/files/…``) is joined to ``own``'s host,
    without ``own``'s user:password@."""
    if not url or len(url) > MAX_CHAT_LINK or any(c.isspace() or not c.isprintable() for c in url):
        return None
    try:
        home = urlsplit(own) if own else None
        if home is not None and url.startswith("/") and not url.startswith("//"):
            root = f"{home.scheme}://{home.hostname}{f':{home.port}' if home.port else ''}"
            if ":" in (home.hostname or ""):
                root = f"{home.scheme}://[{home.hostname}]{f':{home.port}' if home.port else ''}"
            return urljoin(root + "/", url)
        parts = urlsplit(url)
        where = (parts.scheme.lower(), parts.hostname, parts.port)
    except ValueError:
        return None
    if where[0] not in ("http", "https") or not parts.hostname or "@" in parts.netloc:
        return None
    if home is not None and where == (home.scheme.lower(), home.hostname, home.port):
        return url
    host = _as_fetched(parts.hostname)
    allow, ip = AllowList.from_env(), parse_ip(host)
    local = host == "localhost" or host.endswith(".localhost")
    if (local or (ip is not None and refusal(ip) and not allow.allows_ip(ip))) and not allow.allows_host(host):
        return None
    return url


def _as_fetched(host: str) -> str:
    """``host`` as the client that fetches the link reads it: IDNA's mapping (full-width letters and
    digits, the ideographic full stops: ``１２７。0．0.1`` is 127.0.0.1 to httpx and aiohttp),
    percent-decoded (as browsers do), lowercase, without the trailing dots (``localhost.``). An IPv6
    literal is left to :func:`parse_ip` (its zone's ``%25``)."""
    if ":" in host:
        return host.lower()
    return unicodedata.normalize("NFKC", unquote(host)).lower().replace("\u3002", ".").rstrip(".")


def shown_host(host: str) -> str:
    """A link's host fit for a message: printable, at most 100 characters."""
    clean = "".join(c for c in host if c.isprintable() and not c.isspace())
    return clean if len(clean) <= 100 else clean[:97] + "..."


def refused(host: str, via: str | None = None) -> RunnerError:
    """The message for a link (to ``host``) that is not fetched; ``via`` is a redirect's host."""
    if via is None:
        text = f"the link to {shown_host(host)} was not fetched: it points to a private or local address"
    else:
        text = (f"the link to {shown_host(host)} was not fetched: it redirects to {shown_host(via)}, "
                "a private or local address")
    return RunnerError("input.refused", text)


async def checked_addresses(host: str, port: int, *, allow: AllowList, timeout: float) -> list[IPAddress]:
    """The addresses ``host`` resolves to, each public or allowed; :class:`RunnerError`
    ``input.refused`` when any is not (one bad answer is enough: the resolver picks, not us),
    ``input.unreadable`` when the name does not resolve."""
    ip = parse_ip(host)
    if ip is not None:
        found: list[IPAddress] = [ip]
    else:
        name = host.lower().rstrip(".")
        if not name or not _is_name(name):
            raise RunnerError("input.unreadable", f"the link's host {shown_host(host)} is not a valid name")
        try:
            async with asyncio.timeout(max(timeout, 0.05)):
                infos = await _getaddrinfo(name, port)
        except TimeoutError:
            raise RunnerError("input.unreadable", f"looking up {shown_host(host)} timed out") from None
        except (OSError, UnicodeError):
            raise RunnerError("input.unreadable", f"the host {shown_host(host)} was not found") from None
        found = []
        for info in infos:
            addr = parse_ip(str(info[4][0]))
            if addr is not None and addr not in found:
                found.append(addr)
        if not found:
            raise RunnerError("input.unreadable", f"the host {shown_host(host)} was not found")
    if ip is None and allow.allows_host(host):
        return found
    for addr in found:
        kind = refusal(addr)
        if kind is not None and not allow.allows_ip(addr):
            log.warning("refused a link to %s: it resolves to %s, a %s address",
                        shown_host(host), addr, kind)
            raise refused(host)
    return found


# --- fetching ----------------------------------------------------------------------------------


@dataclass(slots=True)
class Fetched:
    """A downloaded body."""

    data: bytes
    content_type: str


async def fetch(
    url: str,
    *,
    label: str,
    max_bytes: int,
    budget: float,
    allow: AllowList | None = None,
) -> Fetched:
    """GET ``url`` under the rules above; ``label`` names the file in messages (already quoted).

    Raises :class:`RunnerError`: ``input.refused`` (scheme or address), ``input.too_large`` (more
    than ``max_bytes``), ``input.unreadable`` (an error status, a transport failure, too many
    redirects, a name that does not resolve).
    """
    allow = AllowList.from_env() if allow is None else allow
    deadline = time.monotonic() + max(budget, 0.05)
    try:
        target = httpx.URL(url.strip())
    except (httpx.InvalidURL, UnicodeError, ValueError):
        raise RunnerError("input.unreadable", f"{label} has a link that is not a valid URL") from None
    first = _host_name(target)
    # one client per download, holding no idle connection: a connection made for one checked
    # address and TLS name is never reused for another host's request
    async with httpx.AsyncClient(
        verify=ssl_context(), trust_env=False, follow_redirects=False, cookies=_no_cookies(),
        limits=httpx.Limits(max_connections=1, max_keepalive_connections=0),
    ) as client:
        for hop in range(MAX_REDIRECTS + 1):
            scheme = target.scheme.lower()
            if scheme not in ("http", "https"):
                if hop == 0:
                    raise RunnerError("input.refused", f"{label} was not fetched: only http and https links are")
                raise RunnerError("input.refused", f"the link to {shown_host(first)} was not fetched: it "
                                                   f"redirects to a {shown_host(scheme)[:20]}: address")
            host = target.raw_host.decode("ascii", "replace")
            if not host:
                raise RunnerError("input.unreadable", f"{label} has a link without a host")
            port = target.port or (443 if scheme == "https" else 80)
            try:
                addresses = await checked_addresses(host, port, allow=allow, timeout=deadline - time.monotonic())
            except RunnerError as err:
                if err.code == "input.refused":
                    raise (refused(first, via=_host_name(target)) if hop else err) from None
                raise RunnerError(err.code, f"could not download {label}: {err.message}") from None
            resp = await _send(client, target, host, addresses, label, deadline)
            try:
                if resp.status_code in _REDIRECTS and resp.headers.get("location"):
                    try:
                        target = target.join(resp.headers["location"])
                    except (httpx.InvalidURL, UnicodeError, ValueError):
                        raise RunnerError("input.unreadable",
                                          f"could not download {label}: it redirects to an invalid address") from None
                    continue
                if resp.status_code >= 400 or resp.status_code in _REDIRECTS:
                    raise RunnerError("input.unreadable", f"could not download {label} (HTTP {resp.status_code})",
                                      status=resp.status_code)
                data = await _read(resp, label, max_bytes, host, deadline)
                return Fetched(data, resp.headers.get("content-type", ""))
            finally:
                await resp.aclose()
    raise RunnerError("input.unreadable", f"could not download {label}: more than {MAX_REDIRECTS} redirects")


def _host_name(url: httpx.URL) -> str:
    """``url``'s host for a message: its Unicode form, or as written when that does not decode
    (``xn--x-`` is no valid IDNA label, and httpx raises on reading it)."""
    try:
        return url.host
    except (UnicodeError, ValueError):
        return url.raw_host.decode("ascii", "replace")


async def _send(client: httpx.AsyncClient, target: httpx.URL, host: str, addresses: Sequence[IPAddress],
                label: str, deadline: float) -> httpx.Response:
    """One GET to the first of ``addresses`` that answers, with ``host`` as Host and TLS name."""
    headers = {"Host": target.netloc.decode("ascii"), "Accept": "*/*"}
    extensions: dict[str, Any] = {}
    if target.scheme.lower() == "https" and parse_ip(host) is None:
        extensions["sni_hostname"] = host.rstrip(".")
    last: httpx.HTTPError | None = None
    for addr in addresses:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        try:
            req = client.build_request("GET", target.copy_with(host=str(addr)), headers=headers,
                                       extensions=extensions, timeout=timeout_for(left))
            return await client.send(req, stream=True)
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            last = exc  # the next checked address, if any
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            raise _unreadable(label, exc, host) from None
        except (UnicodeError, ValueError):
            # httpx reads a redirect's Location as it receives it: a host no valid IDNA label names
            # (``xn--zz``) raised out of send, past every message
            raise RunnerError("input.unreadable", f"could not download {label}: it redirects to an invalid "
                                                  "address") from None
    if last is None:
        raise RunnerError("input.unreadable", f"could not download {label}: the run's time limit was reached")
    raise _unreadable(label, last, host)


def _unreadable(label: str, exc: Exception, host: str) -> RunnerError:
    if isinstance(exc, httpx.HTTPError):
        why = transport_error(exc, shown_host(host)).message
    else:
        why = "the address is not valid"
    return RunnerError("input.unreadable", f"could not download {label}: {why}")


async def _read(resp: httpx.Response, label: str, max_bytes: int, host: str, deadline: float) -> bytes:
    """The body, within ``deadline`` in all: a server that sends a byte now and then, each in time
    for the read timeout, would otherwise hold the run far past its budget."""
    declared = resp.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise _too_large(label, max_bytes)
    buf = bytearray()
    try:
        async with asyncio.timeout(max(deadline - time.monotonic(), 0.0)):
            async for chunk in resp.aiter_bytes():
                buf += chunk
                if len(buf) > max_bytes:
                    raise _too_large(label, max_bytes)
    except httpx.HTTPError as exc:
        raise _unreadable(label, exc, host) from None
    except TimeoutError:
        raise RunnerError("input.unreadable", f"could not download {label}: it did not arrive in time") from None
    return bytes(buf)


def _too_large(label: str, max_bytes: int) -> RunnerError:
    return RunnerError("input.too_large",
                       f"{label} is larger than the limit of {max_bytes / 1048576:.1f} MiB (max-file-size-mb)")
