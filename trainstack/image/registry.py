"""A registry's HTTP API (distribution's /v2/) as `invoke push` and `invoke pull` read it before the daemon moves
anything: whether it answers and takes the credentials, a repository's tags, and the manifest a tag names (its
digest, its config digest, which is the image ID, and its layers); and the blobs and manifests of the artifacts
pushed beside an image (trainstack.image.artifacts).

Credentials: TRAINSTACK_REGISTRY_USER with TRAINSTACK_REGISTRY_PASSWORD when set, else what `docker login` stored for
the registry (the docker config file, its credential helpers included), else none; the same ones go to the daemon.
TLS as dockerd does it: the system's CAs and /etc/docker/certs.d/HOST[:PORT]/*.crt; a registry the daemon counts as
insecure (one on a loopback address, or named by --insecure-registry) is asked over https without verifying its
certificate, then over plain http.
"""
from __future__ import annotations

import base64
import hashlib
import ipaddress
import json
import os
import re
import socket
import ssl
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker.auth
import docker.errors

from trainstack.errors import TrainstackError, bad_value

USER_ENV = "TRAINSTACK_REGISTRY_USER"
PASSWORD_ENV = "TRAINSTACK_REGISTRY_PASSWORD"
CERTS_DIR = Path("/etc/docker/certs.d")
TIMEOUT_S = 15.0
# What docker 20.10 pushes (schema 2) and what other tools push (OCI), single images and lists.
MANIFEST_TYPES = ("application/vnd.docker.distribution.manifest.v2+json",
                  "application/vnd.oci.image.manifest.v1+json",
                  "application/vnd.docker.distribution.manifest.list.v2+json",
                  "application/vnd.oci.image.index.v1+json")
# Docker Hub's name, and where its /v2/ API answers.
DOCKER_HUB = ("docker.io", "index.docker.io")
DOCKER_HUB_API = "registry-1.docker.io"
_CHALLENGE = re.compile(r'(\w+)="([^"]*)"')
_NEXT_LINK = re.compile(r'<([^>]+)>\s*;\s*rel="?next"?')


@dataclass(frozen=True)
class Credentials:
    username: str
    password: str = field(repr=False)
    origin: str  # where they come from, named in errors

    def auth_config(self) -> dict[str, str]:
        """As the docker SDK's push and pull take them."""
        return {"username": self.username, "password": self.password}


def credentials(host: str) -> Credentials | None:
    """The environment's credentials, else those `docker login HOST` stored, else None."""
    user, password = os.environ.get(USER_ENV), os.environ.get(PASSWORD_ENV)
    if user or password:
        for name, value, other in ((USER_ENV, user, PASSWORD_ENV), (PASSWORD_ENV, password, USER_ENV)):
            if not value:
                raise bad_value(f"${name}", "", f"is empty while ${other} is set", "both set, or neither")
        return Credentials(user, password, f"${USER_ENV}")
    try:
        stored = docker.auth.load_config().resolve_authconfig(host) or {}
    except docker.errors.DockerException as exc:
        raise TrainstackError(f"the credentials `docker login {host}` stored could not be read: {exc}") from None
    user = stored.get("username") or stored.get("Username")
    password = stored.get("password") or stored.get("Password")
    return Credentials(user, password, f"`docker login {host}`") if user and password else None


def insecure(host: str, registry_config: dict[str, Any]) -> bool:
    """Whether the daemon whose `docker info` RegistryConfig this is treats the registry at HOST[:PORT] as insecure:
    named so itself, or resolving to an address in its insecure ranges (127.0.0.0/8 always)."""
    index = (registry_config.get("IndexConfigs") or {}).get(host)
    if index is not None:
        return not index.get("Secure", True)
    hostname = urllib.parse.urlsplit(f"//{host}").hostname or host
    try:
        addresses = {info[4][0].partition("%")[0] for info in socket.getaddrinfo(hostname, None)}
    except OSError:
        return False
    networks = [ipaddress.ip_network(cidr) for cidr in registry_config.get("InsecureRegistryCIDRs") or []]
    return any(ipaddress.ip_address(address) in network for address in addresses for network in networks)


class _CredentialsStayHome(urllib.request.HTTPRedirectHandler):
    """Follows a redirect without the registry's Authorization where it leads to another host: registries send blob
    downloads to a storage host (ghcr.io's, Docker Hub's CDN), whose signed URL is its own authorization."""

    def redirect_request(self, req: urllib.request.Request, fp: Any, code: int, msg: str, headers: Any,
                         newurl: str) -> urllib.request.Request | None:
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and urllib.parse.urlsplit(newurl).netloc != urllib.parse.urlsplit(req.full_url).netloc:
            new.remove_header("Authorization")
        return new


@dataclass(frozen=True)
class RemoteManifest:
    digest: str  # what `docker pull REGISTRY/NAME@DIGEST` takes
    document: dict[str, Any]

    @property
    def config_digest(self) -> str | None:
        """The image ID of a single image's manifest; None for a list of images."""
        return self.document.get("config", {}).get("digest")

    @property
    def layer_bytes(self) -> int:
        """The compressed size of the layers, what a pull on a daemon holding none of them downloads."""
        return sum(layer["size"] for layer in self.document.get("layers", []))


class RegistryClient:
    """Reads one registry, authenticating as its challenge asks (Basic, or a Bearer token from its realm)."""

    def __init__(self, host: str, creds: Credentials | None, insecure: bool) -> None:
        self.host = host
        self._api_host = DOCKER_HUB_API if host in DOCKER_HUB else host
        self.credentials = creds
        self._schemes = ["https", "http"] if insecure else ["https"]
        self._context = ssl.create_default_context()
        if insecure:
            self._context.check_hostname = False
            self._context.verify_mode = ssl.CERT_NONE
        else:
            for ca in sorted((CERTS_DIR / host).glob("*.crt")):
                self._context.load_verify_locations(ca)

    def tags(self, name: str) -> list[str]:
        """The tags of repository NAME, none when the registry does not know it."""
        found: list[str] = []
        path: str | None = f"/v2/{name}/tags/list"
        while path:
            status, headers, body = self._get(path, scope=f"repository:{name}:pull")
            if status == 404:
                return found
            found += json.loads(body).get("tags") or []
            link = _NEXT_LINK.search(headers.get("Link", ""))
            path = urllib.parse.urlsplit(link.group(1))._replace(scheme="", netloc="").geturl() if link else None
        return found

    def manifest(self, name: str, reference: str) -> RemoteManifest | None:
        """The manifest REFERENCE (a tag or a digest) of repository NAME; None when there is none."""
        found = self.manifest_bytes(name, reference, ", ".join(MANIFEST_TYPES))
        return RemoteManifest(found[0], json.loads(found[1])) if found else None

    def manifest_bytes(self, name: str, reference: str, accept: str) -> tuple[str, bytes] | None:
        """(digest, the exact bytes) of manifest REFERENCE of media types `accept`; None when there is none."""
        status, headers, body = self._get(f"/v2/{name}/manifests/{reference}", scope=f"repository:{name}:pull",
                                          accept=accept)
        if status == 404:
            return None
        return headers.get("Docker-Content-Digest") or _digest(body), body

    def referrers(self, name: str, digest: str) -> dict[str, Any] | None:
        """The index of the manifests referring to DIGEST from the referrers API (OCI distribution 1.1); None from a
        registry without that API."""
        status, headers, body = self._get(f"/v2/{name}/referrers/{digest}", scope=f"repository:{name}:pull")
        if status == 404 or not headers.get("Content-Type", "").startswith("application/vnd.oci.image.index"):
            return None
        return json.loads(body)

    def blob(self, name: str, digest: str) -> bytes | None:
        """Blob DIGEST of repository NAME, checked against its digest; None when there is none."""
        status, _, body = self._get(f"/v2/{name}/blobs/{digest}", scope=f"repository:{name}:pull")
        if status == 404:
            return None
        if _digest(body) != digest:
            raise TrainstackError(f"the registry {self.host} gave {name}'s blob {digest} with other bytes "
                                  f"({_digest(body)})")
        return body

    def put_blob(self, name: str, data: bytes) -> str:
        """Uploads `data` as a blob of repository NAME (once: a blob already there is not sent again); its digest."""
        digest = _digest(data)
        scope = f"repository:{name}:pull,push"
        status, _, _ = self._request("HEAD", f"/v2/{name}/blobs/{digest}", scope, ok=(200, 404))
        if status == 200:
            return digest
        _, started, _ = self._request("POST", f"/v2/{name}/blobs/uploads/", scope, ok=(202,))
        location = urllib.parse.urlsplit(started.get("Location", ""))
        query = "&".join(filter(None, [location.query, urllib.parse.urlencode({"digest": digest})]))
        self._request("PUT", f"{location.path}?{query}", scope, ok=(201,), data=data,
                      headers={"Content-Type": "application/octet-stream"})
        return digest

    def put_manifest(self, name: str, reference: str, body: bytes, media_type: str) -> tuple[str, Any]:
        """Puts manifest `body` under REFERENCE (a tag or its digest) of repository NAME; (its digest, the answer's
        headers)."""
        _, headers, _ = self._request("PUT", f"/v2/{name}/manifests/{reference}", f"repository:{name}:pull,push",
                                      ok=(201,), data=body, headers={"Content-Type": media_type})
        return headers.get("Docker-Content-Digest") or _digest(body), headers

    def _get(self, path: str, scope: str, accept: str | None = None) -> tuple[int, Any, bytes]:
        """(status, headers, body) of a GET; 404 is an answer, any other failure raises."""
        return self._request("GET", path, scope, ok=(200, 404), headers={"Accept": accept} if accept else {})

    def _request(self, method: str, path: str, scope: str, ok: tuple[int, ...], data: bytes | None = None,
                 headers: dict[str, str] | None = None) -> tuple[int, Any, bytes]:
        headers = dict(headers or {})
        status, answer, body = self._send(path, headers, method=method, data=data)
        if status == 401:
            headers["Authorization"] = self._authorization(answer.get("WWW-Authenticate", ""), scope)
            status, answer, body = self._send(path, headers, method=method, data=data)
            if status == 401:
                raise self._refused()
        if status not in ok:
            raise TrainstackError(f"the registry {self.host} answered HTTP {status} to {method} {path}: "
                                  f"{body[:200].decode(errors='replace').strip()}")
        return status, answer, body

    def _send(self, path: str, headers: dict[str, str], url: str | None = None, method: str = "GET",
              data: bytes | None = None) -> tuple[int, Any, bytes]:
        while True:
            request = urllib.request.Request(url or f"{self._schemes[0]}://{self._api_host}{path}", headers=headers,
                                             method=method, data=data)
            try:
                opener = urllib.request.build_opener(urllib.request.HTTPSHandler(context=self._context),
                                                     _CredentialsStayHome())
                with opener.open(request, timeout=TIMEOUT_S) as response:
                    return response.status, response.headers, response.read()
            except urllib.error.HTTPError as exc:
                return exc.code, exc.headers, exc.read()
            except OSError as exc:
                reason = getattr(exc, "reason", exc)
                if isinstance(reason, ssl.SSLCertVerificationError):
                    raise TrainstackError(
                        f"the registry {self.host}'s certificate is not trusted ({reason.verify_message}): give "
                        f"dockerd and trainstack its CA as {CERTS_DIR / self.host / 'ca.crt'}") from None
                # An insecure registry that does not speak TLS is asked again over http, as dockerd does.
                if url is None and isinstance(reason, ssl.SSLError) and len(self._schemes) > 1:
                    self._schemes.pop(0)
                    continue
                raise TrainstackError(f"the registry {self.host} does not answer ({request.full_url}: {reason}); "
                                      "start it, or check the registry named") from None

    def _authorization(self, challenge: str, scope: str) -> str:
        kind = challenge.partition(" ")[0].lower()
        if kind == "basic":
            if self.credentials is None:
                raise self._refused()
            return self._basic()
        if kind != "bearer":
            raise TrainstackError(f"the registry {self.host} asks for an authentication trainstack does not know: "
                                  f"{challenge!r}")
        params = dict(_CHALLENGE.findall(challenge))
        query = {"service": params.get("service", ""), "scope": scope}
        headers = {"Authorization": self._basic()} if self.credentials else {}
        status, _, body = self._send("", headers, f"{params.get('realm', '')}?{urllib.parse.urlencode(query)}")
        if status != 200:
            raise self._refused()
        answer = json.loads(body)
        return f"Bearer {answer.get('token') or answer.get('access_token')}"

    def _basic(self) -> str:
        pair = f"{self.credentials.username}:{self.credentials.password}".encode()
        return f"Basic {base64.b64encode(pair).decode()}"

    def _refused(self) -> TrainstackError:
        if self.credentials is None:
            return TrainstackError(f"the registry {self.host} asks for credentials: `docker login {self.host}`, or "
                                   f"set ${USER_ENV} and ${PASSWORD_ENV}")
        return TrainstackError(f"the registry {self.host} refused the credentials of user "
                               f"{self.credentials.username!r} (from {self.credentials.origin}): wrong user or "
                               f"password; `docker login {self.host}` again, or set ${USER_ENV} and ${PASSWORD_ENV}")


def _digest(data: bytes) -> str:
    return f"sha256:{hashlib.sha256(data).hexdigest()}"
