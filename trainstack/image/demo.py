"""Trains the example model inside a built image: the project's main job, end to end."""
from __future__ import annotations

import sys

from trainrun.image_contract import EXAMPLES_DIR
from trainstack import docker_client
from trainstack.errors import TrainstackError

EXAMPLE = f"{EXAMPLES_DIR}/horovod_torch_mnist.py"


def train_command(processes: int = 2) -> list[str]:
    """The Horovod + PyTorch example under `trainrun mpi`, as `invoke train` runs it in the image."""
    return ["trainrun", "mpi", "-np", str(processes), "python", EXAMPLE, "--checkpoint-dir", "/tmp/checkpoints"]


def train_in_image(image: str, processes: int = 2) -> None:
    """Runs the Horovod + PyTorch example with `trainrun mpi`, streaming its output; raises if it fails."""
    client = docker_client.connect()
    command = train_command(processes)
    print(f"$ docker run --rm --shm-size 1g {image} {' '.join(command)}", file=sys.stderr)
    status, _ = docker_client.run_container(client, {"image": image, "command": command, "shm_size": "1g"},
                                            out=sys.stdout)
    if status != 0:
        raise TrainstackError(f"train: the example exited {status} in {image}")
