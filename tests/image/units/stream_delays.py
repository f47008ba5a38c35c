"""How soon each rank's line reaches the notebook cell: runs, in a real kernel (jupyter_client), one cell per way of
starting ranks named on the command line; each rank prints `stream-probe first <time.time()>` (a plain print, no
flush, as users write it), sleeps, prints `stream-probe second ...`. Prints `stream-delays: ` and a JSON object:
per way, for every first line, its delay (when the kernel's stream message carrying it arrived here, minus the time
in the line) and how long before the cell's end it arrived (tests/support/notebook_streaming.py reads it). Used by
tests/integration/test_notebook_streaming.py and tests/image/test_notebook_streaming_in_image.py."""
import json
import os
import re
import sys
import time

from jupyter_client.manager import start_new_kernel

SLEEP_SECONDS = 4
RANK_BODY = f"""import os, time
rank = os.environ.get("RANK") or os.environ.get("OMPI_COMM_WORLD_RANK") or "?"
print("stream-probe first", rank, time.time())
time.sleep({SLEEP_SECONDS})
print("stream-probe second", rank, time.time())"""
FUNCTION = "def probe():\n" + "".join(f"    {line}\n" for line in RANK_BODY.splitlines())
SPARK = "from pyspark.sql import SparkSession\nspark = SparkSession.builder.master('local[2]').getOrCreate()\n"
CELLS = {
    "mpi": "%%trainrun mpi -np 2\n" + RANK_BODY,
    "torch": "%%trainrun torch --nproc-per-node 2\n" + RANK_BODY,
    "spark": "%%trainrun spark --num-processes 2\n" + RANK_BODY,
    "trainrun.run": "import trainrun\n" + FUNCTION + "trainrun.run(probe, num_processes=2)",
    "trainrun.run(spark=session)": SPARK + "import trainrun\n" + FUNCTION
    + "trainrun.run(probe, num_processes=2, spark=spark)",
    "HorovodRunner": "from trainrun import HorovodRunner\n" + FUNCTION + "HorovodRunner(np=2).run(probe)",
    "TorchDistributor-local": SPARK + "from pyspark.ml.torch.distributor import TorchDistributor\n" + FUNCTION
    + "TorchDistributor(num_processes=2, local_mode=True, use_gpu=False).run(probe)",
    "TorchDistributor": SPARK + "from pyspark.ml.torch.distributor import TorchDistributor\n" + FUNCTION
    + "TorchDistributor(num_processes=2, local_mode=False, use_gpu=False).run(probe)",
    "DeepspeedTorchDistributor": SPARK + "from pyspark.ml.deepspeed.deepspeed_distributor import "
    "DeepspeedTorchDistributor\n" + FUNCTION
    + "DeepspeedTorchDistributor(numGpus=2, nnodes=1, localMode=True, useGpu=False).run(probe)",
}
# Before the result (the kernel's own stderr, Spark's progress bar among it, shares the output); a twin of
# tests/support/notebook_streaming.py's.
RESULT_PREFIX = "stream-delays: "
FIRST_LINE = re.compile(r"stream-probe first (\S+) (\d+\.\d+)")


def run_cell(client, code: str, timeout: float = 400) -> tuple[list[tuple[float, str]], float, str | None]:
    """The cell's stream texts with their arrival times, when it ended, and its error (if any)."""
    msg_id = client.execute(code)
    texts, error = [], None
    while True:
        msg = client.get_iopub_msg(timeout=timeout)
        arrived = time.time()
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        if msg["msg_type"] == "stream":
            texts.append((arrived, msg["content"]["text"]))
        elif msg["msg_type"] == "error":
            error = f"{msg['content']['ename']}: {msg['content']['evalue']}"
        elif msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            return texts, arrived, error


def measure(ways: list[str]) -> dict:
    manager, client = start_new_kernel(kernel_name="python3")
    try:
        run_cell(client, "%load_ext trainrun.notebook")
        results = {}
        for way in ways:
            texts, ended, error = run_cell(client, CELLS[way])
            firsts = [{"rank": match.group(1), "delay": round(arrived - float(match.group(2)), 3),
                       "before_end": round(ended - arrived, 3)}
                      for arrived, text in texts for match in FIRST_LINE.finditer(text)]
            results[way] = {"firsts": firsts, "error": error, "shown": "".join(text for _, text in texts)[-3000:]}
        return results
    finally:
        manager.shutdown_kernel(now=True)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    print(RESULT_PREFIX + json.dumps(measure(sys.argv[1:])), flush=True)
