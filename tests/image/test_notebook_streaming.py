"""Each rank's line reaches the notebook cell within a second of the rank printing it, in the image's own kernel,
under the launchers the host test cannot run (HorovodRunner needs Horovod, DeepspeedTorchDistributor DeepSpeed)
and the others as a user of the image meets them (units/stream_delays.py times the kernel's stream messages)."""
import json

import pytest

pytestmark = pytest.mark.timeout(900)

WAYS = ["HorovodRunner", "TorchDistributor", "TorchDistributor-local", "mpi", "torch", "spark", "trainrun.run",
        "trainrun.run(spark=session)"]
MAX_DELAY = 1.0


@pytest.fixture(scope="module")
def delays(in_image) -> dict:
    has_deepspeed = in_image.run_status(["python", "-c", "import deepspeed"])[0] == 0
    ways = [*WAYS, *(["DeepspeedTorchDistributor"] if has_deepspeed else [])]
    output = in_image.run(["python", "/units/stream_delays.py", *ways], timeout=850, env={"OMP_NUM_THREADS": "1"})
    measured = json.loads(output.strip().splitlines()[-1])
    print(json.dumps({way: result["firsts"] for way, result in measured.items()}, indent=1))
    return measured


@pytest.mark.parametrize("way", [*WAYS, "DeepspeedTorchDistributor"])
def test_each_ranks_first_line_reaches_the_cell_within_a_second(delays, way) -> None:
    if way not in delays:
        pytest.skip(f"{way} needs DeepSpeed, which this image does not have")
    result = delays[way]
    firsts = result["firsts"]
    assert result["error"] is None, result
    assert sorted(first["rank"] for first in firsts) == ["0", "1"], result["shown"]
    for first in firsts:
        assert first["delay"] < MAX_DELAY, f"{way}: rank {first['rank']}'s line took {first['delay']} s: {firsts}"
        assert first["before_end"] > 2, f"{way}: rank {first['rank']}'s line came with the cell's end: {firsts}"
