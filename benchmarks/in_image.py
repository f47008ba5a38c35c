"""Running a benchmark script inside a built image, with the image's own Python and packages: this checkout is
mounted read-only at /src, a folder the image's user may write at /out, and the script leaves its JSON result
there. The script's output streams here as it runs."""
from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def result_from_image(image: str, script: str, args: list[str], timeout: float, **create: Any) -> Any:
    """Runs `python /src/benchmarks/SCRIPT ARGS --out /out/result.json` in a throwaway container of `image`
    (`create`: further containers.create arguments; its `volumes` join the two mounts); returns the result read."""
    from trainstack import docker_client

    with tempfile.TemporaryDirectory(prefix="trainstack-benchmark-") as out_dir:
        os.chmod(out_dir, 0o777)  # the image's user writes the result
        volumes = {str(ROOT): {"bind": "/src", "mode": "ro"}, out_dir: {"bind": "/out", "mode": "rw"},
                   **create.pop("volumes", {})}
        command = ["python", f"/src/benchmarks/{script}", *args, "--out", "/out/result.json"]
        status, _ = docker_client.run_container(docker_client.connect(), {
            "image": image, "command": command, "volumes": volumes, **create}, out=sys.stdout, timeout=timeout)
        result = Path(out_dir) / "result.json"
        if not result.exists():
            raise SystemExit(f"{script} in {image} exited {status} without a result")
        return json.loads(result.read_text())
