"""What ranks print reaches the notebook cell that started them, however the cell started them."""
import json

import pytest

pytestmark = pytest.mark.timeout(900)

WAYS = ["trainrun.run", "HorovodRunner", "TorchDistributor", "MirroredStrategyRunner", "mpirun", "trainrun spark"]


def test_every_ranks_output_reaches_the_cell_that_ran_it(in_image, image_flavor) -> None:
    if "tensorflow" not in image_flavor.components:
        pytest.skip("MirroredStrategyRunner needs TensorFlow")
    output = in_image.run(["python", "/units/notebook_output.py"], timeout=800, env={"OMP_NUM_THREADS": "1"})
    # The unit's last line of its own; a JVM still ending may print Spark's progress bar ([Stage 1:===> ...]) after it.
    cells = json.loads(next(line for line in reversed(output.splitlines()) if line.startswith('["')))
    for way, shown in zip(WAYS, cells):
        for rank in (0, 1):
            assert f"marker {way} rank {rank}" in shown, \
                f"{way}: rank {rank}'s line is not in its cell:\n{without_java_frames(shown)[-6000:]}"


def without_java_frames(shown: str) -> str:
    """The cell's text less the JVM's stack frames, which would otherwise fill the report and push the ranks' own
    Python tracebacks out of it."""
    return "\n".join(line for line in shown.splitlines()
                     if not line.startswith("\tat ") and not line.lstrip().startswith("... "))
