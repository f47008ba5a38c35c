"""up, status, run, exec and down of a cluster against a stand-in for the docker SDK: what is created, what the
launchers get, that nothing is published and that down (or a failed up) removes every container, the network
and the keys. The real thing: tests/image/test_multinode.py."""
from __future__ import annotations

import io
import itertools
import shutil
from pathlib import Path

import docker.errors
import pytest
from invoke import Collection, Context

from trainrun.remote import IDENTITY_ENV, KNOWN_HOSTS_ENV, PORT_ENV
from trainstack.clusters import nodes
from trainstack.clusters.containers import ClusterError
from trainstack.clusters.nodes.plan import NODES_KEYS_LABEL
from trainstack.tasks import nodes as nodes_tasks

pytestmark = pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="needs ssh-keygen (openssh-client)")
HOST_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHostKeyOf"


class FakeContainer:
    def __init__(self, docker: "FakeDocker", kwargs: dict) -> None:
        self.docker, self.kwargs = docker, kwargs
        self.name = kwargs["name"]
        self.id = f"id-{self.name}"
        self.labels = kwargs.get("labels", {})
        self.status = "created"
        address = f"172.18.0.{next(docker.addresses)}"
        self.attrs = {"Config": {"Image": kwargs["image"]}, "State": {"ExitCode": 3},
                      "NetworkSettings": {"Networks": {kwargs["network"]: {"IPAddress": address}}}}

    def start(self) -> None:
        self.status = "exited" if self.name in self.docker.dying else "running"

    def logs(self, tail=None, stream=False, follow=False):
        if self.kwargs["command"] == ["trainstack-sshd"]:
            text = b"" if self.name in self.docker.silent else (
                f"trainstack-sshd: host key {HOST_KEY}{self.name[-1]} trainstack-sshd@{self.name}\n"
                "Server listening on 0.0.0.0 port 2222.\n").encode()
        else:
            text = b"launcher output\n"
        return iter([text]) if stream else text

    def wait(self, timeout=None):
        return {"StatusCode": self.docker.launcher_code}

    def remove(self, force=False) -> None:
        self.docker.containers_made.remove(self)


class FakeNetwork:
    def __init__(self, docker: "FakeDocker", name: str, labels: dict) -> None:
        self.docker, self.name, self.labels = docker, name, labels

    def remove(self) -> None:
        self.docker.networks_made.remove(self)


def _matches(labels: dict, filters: dict | None) -> bool:
    wanted = (filters or {}).get("label")
    if wanted is None:
        return True
    key, _, value = wanted.partition("=")
    return key in labels and (not value or labels[key] == value)


class FakeDocker:
    """The parts of docker.DockerClient the nodes runner uses."""

    def __init__(self, images=("trainstack:cpu",)) -> None:
        self.known_images = set(images)
        self.containers_made: list[FakeContainer] = []
        self.networks_made: list[FakeNetwork] = []
        self.created: list[dict] = []
        self.dying: set[str] = set()
        self.silent: set[str] = set()
        self.launcher_code = 0
        self.addresses = itertools.count(2)
        self.execs: dict[str, tuple[str, list[str]]] = {}
        self.exec_codes: dict[str, int] = {}
        outer = self

        class Images:
            def get(self, ref):
                if ref not in outer.known_images:
                    raise docker.errors.ImageNotFound(ref)

        class Networks:
            def create(self, name, driver, labels):
                outer.networks_made.append(FakeNetwork(outer, name, labels))

            def list(self, filters=None):
                return [n for n in outer.networks_made if _matches(n.labels, filters)]

        class Volumes:  # a cluster of nodes makes none
            def list(self, filters=None):
                return []

        class Containers:
            def create(self, **kwargs):
                outer.created.append(kwargs)
                container = FakeContainer(outer, kwargs)
                outer.containers_made.append(container)
                return container

            def list(self, all=False, filters=None):
                return [c for c in outer.containers_made if _matches(c.labels, filters)]

        class Api:
            def exec_create(self, container_id, command, stdout, stderr):
                exec_id = f"exec-{len(outer.execs)}"
                outer.execs[exec_id] = (container_id, command)
                return {"Id": exec_id}

            def exec_start(self, exec_id, stream):
                container_id, command = outer.execs[exec_id]
                return iter([f"{' '.join(command)}\nsec".encode(), b"ond line\n"])

            def exec_inspect(self, exec_id):
                return {"ExitCode": outer.exec_codes.get(outer.execs[exec_id][0], 0)}

        self.images, self.networks, self.volumes = Images(), Networks(), Volumes()
        self.containers, self.api = Containers(), Api()


@pytest.fixture
def fake():
    client = FakeDocker()
    yield client
    nodes.down("n", client=client)  # removes any keys a test left


def up(fake: FakeDocker, **options) -> dict:
    return nodes.up(**{"count": 2, "name": "n", "timeout": 2, "client": fake, "progress": lambda line: None,
                       **options})


def keys_of(fake: FakeDocker) -> Path:
    return Path(fake.containers_made[0].labels[NODES_KEYS_LABEL])


def test_up_starts_workers_on_their_network_and_records_their_host_keys(fake, tmp_path) -> None:
    plan = up(fake, slots=2, share=str(tmp_path))
    assert [n.name for n in fake.networks_made] == ["n"]
    assert [c.name for c in fake.containers_made] == ["n-worker-1", "n-worker-2"]
    assert all(c.status == "running" and "ports" not in c.kwargs for c in fake.containers_made)
    keys = keys_of(fake)
    assert (keys / "known_hosts").read_text() == (f"[n-worker-1]:2222,[172.18.0.2]:2222 {HOST_KEY}1\n"
                                                  f"[n-worker-2]:2222,[172.18.0.3]:2222 {HOST_KEY}2\n")
    assert (keys / "hostfile").read_text() == "n-worker-1 slots=2\nn-worker-2 slots=2\n"
    assert plan["hosts"] == "n-worker-1:2,n-worker-2:2"
    text = nodes.status("n", client=fake)
    assert "  n-worker-1  running  172.18.0.2  sshd ready" in text
    assert "-H n-worker-1:2,n-worker-2:2" in text and "trainrun mpi -np 4 " in text


def test_down_removes_containers_network_and_keys(fake) -> None:
    up(fake)
    keys = keys_of(fake)
    assert nodes.down("n", client=fake) == ["n-worker-1", "n-worker-2", "n"]
    assert fake.containers_made == [] and fake.networks_made == [] and not keys.exists()
    assert nodes.down("n", client=fake) == []


def test_a_worker_that_exits_fails_up_and_leaves_nothing(fake, monkeypatch) -> None:
    made: list[Path] = []
    real_make_keys = nodes.runner.make_keys
    monkeypatch.setattr(nodes.runner, "make_keys", lambda name: made.append(real_make_keys(name)) or made[-1])
    fake.dying.add("n-worker-2")
    with pytest.raises(ClusterError, match="worker n-worker-2 exited with code 3; removed the cluster"):
        up(fake)
    assert fake.containers_made == [] and fake.networks_made == [] and not made[0].exists()


def test_a_silent_sshd_fails_up_within_the_timeout(fake) -> None:
    fake.silent.add("n-worker-1")
    with pytest.raises(ClusterError, match="sshd not listening after 1s on n-worker-1; removed the cluster"):
        up(fake, timeout=1)
    assert fake.containers_made == []


def test_up_refuses_a_name_in_use_and_an_image_not_built(fake) -> None:
    up(fake)
    with pytest.raises(ClusterError, match="--name = 'n': is already up"):
        up(fake)
    with pytest.raises(ClusterError, match="--image = 'trainstack:gpu': is not built"):
        up(fake, name="other", image="trainstack:gpu")


def test_run_starts_a_launcher_with_the_key_and_removes_it(fake, tmp_path) -> None:
    up(fake, share=str(tmp_path))
    out = io.StringIO()
    fake.launcher_code = 3
    assert nodes.run(["trainrun", "mpi", "-np", "2", "-H", "n-worker-1:1,n-worker-2:1", "true"], "n", fake, out) == 3
    launcher = fake.created[-1]
    keys = keys_of(fake)
    assert launcher["name"].startswith("n-launcher-") and launcher["network"] == "n" and "ports" not in launcher
    assert launcher["environment"] == {PORT_ENV: "2222", IDENTITY_ENV: "/etc/trainstack/ssh/id_ed25519",
                                       KNOWN_HOSTS_ENV: "/etc/trainstack/ssh/known_hosts"}
    assert launcher["volumes"][str(keys / "id_ed25519")] == {"bind": "/etc/trainstack/ssh/id_ed25519", "mode": "ro"}
    assert launcher["volumes"][str(tmp_path)] == {"bind": "/job", "mode": "ro"}
    assert launcher["working_dir"] == "/job"
    assert out.getvalue() == "launcher output\n"
    assert [c.name for c in fake.containers_made] == ["n-worker-1", "n-worker-2"]  # the launcher is gone


def test_exec_fills_in_each_workers_rank_and_prefixes_its_lines(fake) -> None:
    up(fake)
    out = io.StringIO()
    fake.exec_codes["id-n-worker-2"] = 4
    code = nodes.run_on_workers(["trainrun", "torch", "--nnodes", "{nnodes}", "--node-rank", "{node_rank}",
                                 "--master-addr", "{master_addr}", "t.py"], "n", fake, out)
    assert code == 4
    lines = sorted(out.getvalue().splitlines())
    assert lines == [
        "[n-worker-1] second line",
        "[n-worker-1] trainrun torch --nnodes 2 --node-rank 0 --master-addr n-worker-1 t.py",
        "[n-worker-2] second line",
        "[n-worker-2] trainrun torch --nnodes 2 --node-rank 1 --master-addr n-worker-1 t.py",
    ]


def test_a_missing_cluster_is_named_with_the_ones_there_are(fake) -> None:
    with pytest.raises(ClusterError, match="--name = 'n': is not a running cluster of nodes .*invoke nodes.up"):
        nodes.status("n", client=fake)
    with pytest.raises(ClusterError, match="is missing"):
        nodes.run([], "n", fake)


def test_collection_offers_up_status_run_exec_down() -> None:
    assert set(Collection.from_module(nodes_tasks).task_names) == {"up", "status", "run", "exec", "down"}


@pytest.mark.parametrize(("options", "message"), [
    ({"count": "0"}, "error: --count = 0: is not a number of workers (valid: 1 to 64)"),
    ({"count": "two"}, "error: --count = 'two': is not a whole number"),
    ({"slots": "0"}, "error: --slots = 0: is not a number of ranks per worker"),
    ({"share": "/no/such/dir"}, "error: --share = '/no/such/dir': is not a directory"),
])
def test_up_task_exits_2_naming_the_bad_option_before_docker(options: dict, message: str, capsys, monkeypatch) -> None:
    monkeypatch.setattr("trainstack.clusters.nodes.runner.connect", lambda: pytest.fail("docker was asked"))
    with pytest.raises(SystemExit) as caught:
        nodes_tasks.up(Context(), **options)
    assert caught.value.code == 2
    assert message in capsys.readouterr().err


def test_run_without_a_command_exits_2(capsys) -> None:
    with pytest.raises(SystemExit) as caught:
        nodes_tasks.run(Context(remainder=""))
    assert caught.value.code == 2
    assert capsys.readouterr().err.startswith("error: command = '': is missing (valid: a command after `--`")
