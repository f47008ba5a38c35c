"""Each rank's line reaches the notebook cell within a second of the rank printing it, in the image's own kernel,
under the launchers the host test cannot run (HorovodRunner needs Horovod, DeepspeedTorchDistributor DeepSpeed)
and the others as a user of the image meets them (units/stream_delays.py times the kernel's stream messages)."""
import json

import pytest
from notebook_streaming import check_streamed, result_of

pytestmark = pytest.mark.timeout(900)

WAYS = ["HorovodRunner", "TorchDistributor", "TorchDistributor-local", "mpi", "torch", "spark", "trainrun.run",
        "trainrun.run(spark=session)"]


@pytest.fixture(scope="module")
def delays(in_image) -> dict:
    has_deepspeed = in_image.run_status(["python", "-c", "import deepspeed"])[0] == 0
    ways = [*WAYS, *(["DeepspeedTorchDistributor"] if has_deepspeed else [])]
    output = in_image.run(["python", "/units/stream_delays.py", *ways], timeout=850, env={"OMP_NUM_THREADS": "1"})
    measured = result_of(output)
    print(json.dumps({way: result["firsts"] for way, result in measured.items()}, indent=1))
    return measured


@pytest.mark.parametrize("way", [*WAYS, "DeepspeedTorchDistributor"])
def test_each_ranks_first_line_reaches_the_cell_within_a_second(delays, way) -> None:
    if way not in delays:
        pytest.skip(f"{way} needs DeepSpeed, which this image does not have")
    check_streamed(way, delays[way])
