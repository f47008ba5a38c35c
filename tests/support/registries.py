"""A real registry for the tests and benchmarks/registry_pull.py: Debian's docker-registry on 127.0.0.1 with TLS
from a CA made for it (openssl) and basic auth (htpasswd -B), the CA given to this machine's dockerd in
/etc/docker/certs.d/HOST:PORT/ while it runs; and a throwaway second dockerd with its own data root, holding no
layer, to pull into without touching the main daemon's images and build cache. Both are stopped and deleted after.
"""
from __future__ import annotations

import contextlib
import io
import os
import secrets
import shutil
import socket
import ssl
import subprocess
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator
from unittest import mock

import docker
import docker.errors

from trainstack import docker_client
from trainstack.image.demo import train_command
from trainstack.image.publish import Pulled, Pushed, pull_image, push_flavor, registry_sbom
from trainstack.image.registry import PASSWORD_ENV, USER_ENV, RegistryClient, credentials

CERTS_DIR = Path("/etc/docker/certs.d")
USER = "trainer"
PASSWORD = "registry-test-password"
# A flavor's tags as a build gives them, in push order: immutable, content, flavor.
TAGS = ["cpu-py3.11-torch2.13-tf2.21-hvd0.28.1-2026.11.26-01a534e", "cpu-py3.11-torch2.13-tf2.21-hvd0.28.1", "cpu"]
START_TIMEOUT_S = 60


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait(what: str, ready, process: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while not ready():
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not start; its log ends:\n{log.read_text(errors='replace')[-3000:]}")
        time.sleep(0.3)


def _openssl(*args: str | Path) -> None:
    subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True)


def make_certificates(folder: Path) -> tuple[Path, Path, Path]:
    """(CA certificate, server certificate, server key): a CA made here, and a certificate it signs for
    127.0.0.1 and localhost."""
    ca_key, ca_crt = folder / "ca.key", folder / "ca.crt"
    key, csr, crt, extensions = folder / "server.key", folder / "server.csr", folder / "server.crt", folder / "san.cnf"
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=trainstack test CA",
             "-keyout", ca_key, "-out", ca_crt)
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1", "-keyout", key, "-out", csr)
    extensions.write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    _openssl("x509", "-req", "-in", csr, "-CA", ca_crt, "-CAkey", ca_key, "-CAcreateserial", "-days", "2",
             "-extfile", extensions, "-out", crt)
    return ca_crt, crt, key


@dataclass(frozen=True)
class Registry:
    host: str  # 127.0.0.1:PORT, what --registry names
    ca: Path
    data: Path  # the registry's storage

    def ca_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=self.ca)


@contextlib.contextmanager
def tls_registry(folder: Path) -> Iterator[Registry]:
    """A running registry with TLS and basic auth (USER, PASSWORD); its CA in dockerd's certs.d while it runs."""
    folder.mkdir(parents=True, exist_ok=True)
    ca, crt, key = make_certificates(folder)
    htpasswd = folder / "htpasswd"
    subprocess.run(["htpasswd", "-Bbc", str(htpasswd), USER, PASSWORD], check=True, capture_output=True)
    port = free_port()
    host = f"127.0.0.1:{port}"
    config = folder / "config.yml"
    config.write_text(
        "version: 0.1\n"
        f"storage:\n  filesystem:\n    rootdirectory: {folder / 'data'}\n  delete:\n    enabled: true\n"
        f"auth:\n  htpasswd:\n    realm: trainstack-test\n    path: {htpasswd}\n"
        f"http:\n  addr: {host}\n  tls:\n    certificate: {crt}\n    key: {key}\n")
    certs = CERTS_DIR / host
    certs.mkdir(parents=True, exist_ok=True)
    shutil.copy(ca, certs / "ca.crt")
    log = folder / "registry.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(["docker-registry", "serve", str(config)], stdout=out, stderr=subprocess.STDOUT)
    context = ssl.create_default_context(cafile=ca)

    def answers() -> bool:
        try:
            urllib.request.urlopen(f"https://{host}/v2/", timeout=2, context=context)
        except urllib.error.HTTPError as exc:
            return exc.code == 401
        except OSError:
            return False
        return True

    try:
        _wait("docker-registry", answers, process, log)
        yield Registry(host, ca, folder / "data")
    finally:
        process.terminate()
        process.wait(timeout=30)
        shutil.rmtree(certs, ignore_errors=True)


@contextlib.contextmanager
def throwaway_daemon(folder: Path) -> Iterator[docker.DockerClient]:
    """A second dockerd holding nothing, on its own socket, data root, exec root, pid file and bridge, with no
    iptables rules (its containers take network_mode none or host); stopped and deleted after. It reads the same
    /etc/docker/certs.d as the main one."""
    folder.mkdir(parents=True, exist_ok=True)
    socket_path = folder / "docker.sock"
    # The exec root's path becomes containerd's socket path, which must stay under the 108 bytes of a unix socket.
    exec_root = Path(tempfile.mkdtemp(prefix="ts-exec-", dir="/tmp"))
    log = folder / "dockerd.log"
    # Never --bridge=none: a dockerd started so deletes the docker0 interface (removeDefaultBridgeInterface), the main
    # daemon's bridge, and every container and build step of the main daemon fails until it restarts. A bridge of
    # its own, in a benchmarking range (198.18.0.0/15), leaves docker0 alone.
    bridge = f"tsbr{secrets.token_hex(3)}"
    subnet = f"198.18.{secrets.randbelow(256)}"
    command = ["dockerd", "--data-root", str(folder / "data"), "--exec-root", str(exec_root),
               "--pidfile", str(folder / "dockerd.pid"), "-H", f"unix://{socket_path}", f"--bridge={bridge}",
               "--iptables=false", "--ip-masq=false", "--ip-forward=false"]
    clients: list[docker.DockerClient] = []

    def answers() -> bool:
        try:
            clients.append(docker.DockerClient(base_url=f"unix://{socket_path}", timeout=900))
        except docker.errors.DockerException:
            return False
        return True

    process = None
    try:
        for step in (["link", "add", bridge, "type", "bridge"], ["addr", "add", f"{subnet}.1/24", "dev", bridge],
                     ["link", "set", bridge, "up"]):
            subprocess.run(["ip", *step], check=True, capture_output=True)
        with open(log, "wb") as out:
            process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
        _wait("the throwaway dockerd", answers, process, log)
        yield clients[0]
    finally:
        for client in clients:
            with contextlib.suppress(docker.errors.DockerException):
                for container in client.containers.list(all=True):
                    container.remove(force=True)
            client.close()
        if process is not None:
            process.terminate()
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        # dockerd leaves its data root (and an exec root's netns) mounted after it stops.
        for root in (folder, exec_root):
            for mount in sorted(_mounts_under(root), reverse=True):
                subprocess.run(["umount", "-l", mount], check=False, capture_output=True)
        subprocess.run(["rm", "-rf", str(folder / "data"), str(exec_root)], check=False)
        subprocess.run(["ip", "link", "delete", bridge], check=False, capture_output=True)


def _mounts_under(root: Path) -> list[str]:
    prefix = f"{root}/"
    return [line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()
            if line.split()[1].startswith(prefix) or line.split()[1] == str(root)]


def tiny_image(client: docker.DockerClient, content: str) -> docker.models.images.Image:
    """An image of one small file, made with `docker import` (no base image, nothing pulled): a different content
    makes a different image."""
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w") as archive:
        payload = content.encode()
        info = tarfile.TarInfo("content.txt")
        info.size = len(payload)
        archive.addfile(info, io.BytesIO(payload))
    client.api.import_image_from_data(data.getvalue(), repository="trainstack-test-tiny", tag=content)
    return client.images.get(f"trainstack-test-tiny:{content}")


@contextlib.contextmanager
def registry_login() -> Iterator[None]:
    """The test registry's credentials, given as users give them to `invoke push` and `invoke pull`."""
    with mock.patch.dict(os.environ, {USER_ENV: USER, PASSWORD_ENV: PASSWORD}):
        yield


@dataclass(frozen=True)
class PushPull:
    """What push_and_pull did and measured."""

    pushed: Pushed
    push_seconds: float
    repushed: Pushed
    repush_seconds: float
    sbom: tuple[str, dict]  # where `invoke sbom --image` read it from the registry, and the SBOM
    images_before_pull: int  # in the throwaway daemon
    by_tag: Pulled
    pull_seconds: float
    by_digest: Pulled
    doctor: tuple[int, str]  # exit code, output
    training: tuple[int, str]
    training_seconds: float


def push_and_pull(image_name: str, flavor: str, folder: Path) -> PushPull:
    """`invoke push` of a built flavor to a TLS + basic-auth registry (twice: the second changes nothing), then, in a
    throwaway dockerd holding nothing, the SBOM read from the registry as `invoke sbom --image` reads it, a pull by
    the immutable tag (timed) and by digest, `trainrun doctor` and the
    2-rank training of `invoke train` in the pulled image (network none). The main daemon keeps its images; the
    registry's tags given to the local image are removed after."""
    main = docker_client.connect()
    with tls_registry(folder / "registry") as registry, registry_login():
        started = time.monotonic()
        pushed = push_flavor(image_name, flavor, registry.host)
        push_seconds = time.monotonic() - started
        try:
            started = time.monotonic()
            repushed = push_flavor(image_name, flavor, registry.host)
            repush_seconds = time.monotonic() - started
            sbom = registry_sbom(main, pushed.references[0])
            with throwaway_daemon(folder / "daemon") as second:
                images_before = len(second.images.list(all=True))
                started = time.monotonic()
                by_tag = pull_image(second, registry.host, image_name, pushed.references[0].rpartition(":")[2])
                pull_seconds = time.monotonic() - started
                by_digest = pull_image(second, registry.host, image_name,
                                       pushed.digest_reference.rpartition("@")[2])
                doctor = docker_client.run_container(
                    second, {"image": by_tag.reference, "command": ["trainrun", "doctor"], "network_mode": "none"},
                    timeout=300)
                started = time.monotonic()
                training = docker_client.run_container(
                    second, {"image": by_digest.reference, "command": train_command(2), "shm_size": "1g",
                             "network_mode": "none"}, timeout=900)
                training_seconds = time.monotonic() - started
        finally:
            for reference in pushed.references:
                with contextlib.suppress(docker.errors.ImageNotFound):
                    main.images.remove(reference, noprune=True)
    return PushPull(pushed, push_seconds, repushed, repush_seconds, sbom, images_before, by_tag, pull_seconds,
                    by_digest, doctor, training, training_seconds)


def registry_api(registry: Registry) -> RegistryClient:
    """The registry's /v2/ API as invoke push and pull reach it, with the credentials the environment gives."""
    return RegistryClient(registry.host, credentials(registry.host), insecure=False)
