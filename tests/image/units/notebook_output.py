"""Runs, headless in the image's own kernel, one cell per way of starting ranks from a notebook, each rank printing a
marker; prints a JSON list with the text each cell showed (its streams, results and errors)."""
import json

from notebook_cells import run_cells

CELLS = [
    """import trainrun

def hello():
    import os
    print(f"marker trainrun.run rank {os.environ['RANK']}", flush=True)

trainrun.run(hello, backend="torch", num_processes=2)""",
    """from trainrun import HorovodRunner

def hello_horovod():
    import horovod.torch as hvd
    hvd.init()
    print(f"marker HorovodRunner rank {hvd.rank()}", flush=True)

HorovodRunner(np=2).run(hello_horovod)""",
    """from pyspark.ml.torch.distributor import TorchDistributor

def hello_distributor():
    import os
    print(f"marker TorchDistributor rank {os.environ['RANK']}", flush=True)

TorchDistributor(num_processes=2, local_mode=False, use_gpu=False).run(hello_distributor)""",
    """from spark_tensorflow_distributor import MirroredStrategyRunner

def hello_mirrored():
    import json, os
    print(f"marker MirroredStrategyRunner rank {json.loads(os.environ['TF_CONFIG'])['task']['index']}", flush=True)

MirroredStrategyRunner(num_slots=2, use_gpu=False).run(hello_mirrored)""",
    """!mpirun -np 2 python -c "import os; print('marker mpirun rank', os.environ['OMPI_COMM_WORLD_RANK'])\"""",
    """%%trainrun spark --num-processes 2
import os
print(f"marker trainrun spark rank {os.environ['RANK']}", flush=True)""",
]


print(json.dumps(run_cells(CELLS)))
