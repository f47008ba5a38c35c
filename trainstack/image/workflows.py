"""The training workflows users bring from other platforms, as they run in our image.

Each one runs an example from /opt/trainstack/examples and ends with a JSON summary line from
rank 0 (ranks that took part, loss per epoch, held-out accuracy); the image tests assert on it
and benchmarks/workflows.py times it. The MLflow rows' rank 0 also logs one run to a SQLite store in the
work folder, which the image tests read back.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass

from trainrun.image_contract import EXAMPLES_DIR, MLFLOW_STORE

CHECKPOINTS = "/tmp/checkpoints"


@dataclass(frozen=True)
class Workflow:
    name: str
    origin: str
    command: list[str]
    min_accuracy: float = 0.9
    writes_checkpoint: bool = True
    # The MLflow experiment in MLFLOW_STORE where rank 0 logs one run, and the name of its loss metric.
    experiment: str | None = None
    loss_metric: str = "loss"


def _example(script: str, *args: str) -> list[str]:
    return [f"{EXAMPLES_DIR}/{script}", *args]


WORKFLOWS = [
    Workflow("horovod-torch-trainrun", "Horovod images, Databricks ML (Horovod + PyTorch)",
             ["trainrun", "mpi", "-np", "2", "python",
              *_example("horovod_torch_mnist.py", "--checkpoint-dir", CHECKPOINTS)]),
    Workflow("horovod-torch-mpirun", "Horovod images: `mpirun -np 2 python train.py`",
             ["mpirun", "-np", "2", "python", *_example("horovod_torch_mnist.py", "--checkpoint-dir", CHECKPOINTS)]),
    Workflow("horovod-keras", "Horovod images, Databricks ML (horovod.tensorflow.keras, Keras 3)",
             ["trainrun", "mpi", "-np", "2", "python",
              *_example("horovod_keras_mnist.py", "--checkpoint-dir", CHECKPOINTS)]),
    Workflow("horovod-keras-mpirun", "Horovod images: `mpirun -np 2 python train_keras.py` (Keras 3)",
             ["mpirun", "-np", "2", "python", *_example("horovod_keras_mnist.py", "--checkpoint-dir", CHECKPOINTS)]),
    Workflow("horovod-keras-legacy", "Keras 2 code (`TF_USE_LEGACY_KERAS=1`, tf_keras) through Horovod",
             ["env", "TF_USE_LEGACY_KERAS=1", "trainrun", "mpi", "-np", "2", "python",
              *_example("horovod_keras_mnist.py", "--checkpoint-dir", CHECKPOINTS)]),
    Workflow("ddp-torchrun", "torchrun (`trainrun torch`)",
             ["trainrun", "torch", "--nproc-per-node", "2",
              *_example("ddp_torch_mnist.py", "--checkpoint-dir", CHECKPOINTS)]),
    Workflow("ddp-distributed-launch", "`python -m torch.distributed.launch` (legacy --local-rank argument)",
             ["python", "-m", "torch.distributed.launch", "--nproc-per-node", "2",
              *_example("ddp_torch_mnist.py", "--checkpoint-dir", CHECKPOINTS)]),
    Workflow("torch-distributor-local", "PySpark TorchDistributor(local_mode=True)",
             ["python", *_example("torch_distributor_mnist.py", "--local-mode")], writes_checkpoint=False),
    Workflow("torch-distributor", "PySpark TorchDistributor(local_mode=False) on local[2]",
             ["python", *_example("torch_distributor_mnist.py")], writes_checkpoint=False),
    Workflow("torch-distributor-script", "PySpark TorchDistributor(local_mode=False).run(\"train.py\", \"--lr=0.04\")",
             ["python", *_example("torch_distributor_mnist.py", "--script")]),
    Workflow("deepspeed-zero2-torchrun", "DeepSpeed ZeRO-2 under torchrun (`--deepspeed --deepspeed_config ds.json`)",
             ["trainrun", "torch", "--nproc-per-node", "2",
              *_example("deepspeed_zero_mnist.py", "--checkpoint-dir", CHECKPOINTS, "--deepspeed",
                        "--deepspeed_config", f"{EXAMPLES_DIR}/deepspeed_zero2.json")]),
    Workflow("deepspeed-zero3-launcher", "DeepSpeed ZeRO-3 under its own launcher, on CPU (`deepspeed "
             "--num_accelerators 2`)",
             ["deepspeed", "--num_accelerators", "2",
              *_example("deepspeed_zero_mnist.py", "--checkpoint-dir", CHECKPOINTS, "--deepspeed",
                        "--deepspeed_config", f"{EXAMPLES_DIR}/deepspeed_zero3.json")]),
    Workflow("deepspeed-distributor-local", "PySpark DeepspeedTorchDistributor(localMode=True, deepspeedConfig=dict), "
             "ZeRO-3, a function",
             ["python", *_example("deepspeed_distributor_mnist.py", "--local-mode")]),
    Workflow("deepspeed-distributor-local-cluster", "PySpark DeepspeedTorchDistributor(localMode=False), ZeRO-3, a "
             "function, on local-cluster[2,1,1024]: each rank in its own executor",
             ["python", *_example("deepspeed_distributor_mnist.py", "--master", "local-cluster[2,1,1024]")]),
    Workflow("deepspeed-distributor-script", "PySpark DeepspeedTorchDistributor(localMode=False, deepspeedConfig=path)"
             ".run(\"train.py\") on local[2], ZeRO-2",
             ["python", *_example("deepspeed_distributor_mnist.py", "--script", "--zero-stage", "2")]),
    Workflow("horovod-spark-estimator", "Databricks ML horovod.spark TorchEstimator: fit, transform, evaluate",
             ["python", *_example("horovod_spark_estimator_mnist.py")]),
    Workflow("horovod-spark-keras-estimator", "Databricks ML horovod.spark KerasEstimator (Keras 3): fit, transform, evaluate",
             ["python", *_example("horovod_spark_keras_estimator_mnist.py")]),
    Workflow("horovod-spark-keras-estimator-legacy", "The KerasEstimator with Keras 2 (`TF_USE_LEGACY_KERAS=1`)",
             ["env", "TF_USE_LEGACY_KERAS=1", "python", *_example("horovod_spark_keras_estimator_mnist.py")]),
    Workflow("tf-distributor", "Databricks ML spark-tensorflow-distributor MirroredStrategyRunner(num_slots=2)",
             ["python", *_example("tf_distributor_mnist.py", "--checkpoint-dir", CHECKPOINTS)]),
    Workflow("horovod-runner", "Databricks HorovodRunner(np=2).run(train, **kwargs) (trainrun.HorovodRunner)",
             ["python", *_example("horovod_runner_mnist.py", "--checkpoint-dir", CHECKPOINTS)]),
    Workflow("trainrun-run-torch", "trainrun.run(train, ..., backend=\"torch\", num_processes=2)",
             ["python", *_example("trainrun_run_mnist.py", "--checkpoint-dir", CHECKPOINTS)]),
    Workflow("ray-on-spark", "Databricks ML: Ray on Spark, setup_ray_cluster(max_worker_nodes=2) and a Ray Train "
             "TorchTrainer with 2 workers, under spark-submit on local-cluster[2,2,2048]",
             ["spark-submit", "--master", "local-cluster[2,2,2048]", *_example("ray_on_spark_mnist.py")],
             writes_checkpoint=False),
    Workflow("ray-train-trainrun", "Ray Train's TorchTrainer with 2 workers, its driver's `ray.init()` on the Ray "
             "cluster `trainrun ray` starts (a head node in the container, token-authenticated)",
             ["trainrun", "ray", "python", *_example("ray_train_mnist.py")], writes_checkpoint=False),
    Workflow("ray-train-on-spark-trainrun", "The same driver on Ray on Spark that `trainrun ray --master` starts on "
             "local-cluster[2,2,2048]: a Ray worker node in each executor, sized as the executor",
             ["trainrun", "ray", "--master", "local-cluster[2,2,2048]", "python", *_example("ray_train_mnist.py")],
             writes_checkpoint=False),
    Workflow("lightning-trainrun", "PyTorch Lightning Trainer(strategy=\"ddp\", devices=2) under torchrun "
             "(`trainrun torch`)",
             ["trainrun", "torch", "--nproc-per-node", "2",
              *_example("lightning_mnist.py", "--checkpoint-dir", CHECKPOINTS)]),
    Workflow("lightning-distributor-local", "PyTorch Lightning under PySpark TorchDistributor(local_mode=True), "
             "a function",
             ["python", *_example("lightning_distributor_mnist.py", "--local-mode")]),
    Workflow("lightning-distributor-local-cluster", "PyTorch Lightning (devices=1, num_nodes=2) under PySpark "
             "TorchDistributor(local_mode=False) on local-cluster[2,1,1024]: each rank in its own executor",
             ["python", *_example("lightning_distributor_mnist.py", "--master", "local-cluster[2,1,1024]")]),
    Workflow("hf-trainer-trainrun", "Hugging Face Trainer, a causal LM from GPT2Config, under torchrun "
             "(`trainrun torch`)",
             ["trainrun", "torch", "--nproc-per-node", "2",
              *_example("hf_causal_lm.py", "--checkpoint-dir", CHECKPOINTS)]),
    Workflow("hf-trainer-distributor", "Hugging Face Trainer under PySpark TorchDistributor(local_mode=False) on "
             "local[2], a function",
             ["python", *_example("hf_distributor_causal_lm.py")], writes_checkpoint=False),
    Workflow("hf-trainer-deepspeed-trainrun", "Hugging Face Trainer with DeepSpeed ZeRO-2 "
             "(TrainingArguments(deepspeed=\"ds.json\")) under torchrun (`trainrun torch`)",
             ["trainrun", "torch", "--nproc-per-node", "2",
              *_example("hf_causal_lm.py", "--checkpoint-dir", CHECKPOINTS,
                        "--deepspeed", f"{EXAMPLES_DIR}/deepspeed_zero2.json")]),
    Workflow("hf-trainer-deepspeed-distributor", "Hugging Face Trainer with DeepSpeed ZeRO-2 under PySpark "
             "TorchDistributor(local_mode=False) on local[2]",
             ["python", *_example("hf_distributor_causal_lm.py",
                                  "--deepspeed", f"{EXAMPLES_DIR}/deepspeed_zero2.json")], writes_checkpoint=False),
    Workflow("accelerate-launch", "A plain accelerate loop: `accelerate launch --cpu --num_processes 2` (on CPUs, "
             "through mpirun and a hostfile)",
             ["accelerate", "launch", "--cpu", "--num_processes", "2",
              "--mpirun_hostfile", f"{EXAMPLES_DIR}/localhost_hostfile",
              *_example("accelerate_causal_lm.py", "--checkpoint-dir", CHECKPOINTS)]),
    Workflow("peft-lora", "PEFT LoRA fine-tune of the causal LM under the Trainer (`trainrun torch`), the adapter "
             "saved and loaded back",
             ["trainrun", "torch", "--nproc-per-node", "2",
              *_example("peft_lora_causal_lm.py", "--checkpoint-dir", CHECKPOINTS)]),
    Workflow("mlflow-lightning-autolog", "MLflow autologging of a Lightning Trainer (`mlflow.pytorch.autolog()`), "
             "DDP under torchrun, rank 0 logging",
             ["trainrun", "torch", "--nproc-per-node", "2",
              *_example("mlflow_lightning_autolog.py", "--checkpoint-dir", CHECKPOINTS, "--tracking-uri",
                        MLFLOW_STORE)],
             writes_checkpoint=False, experiment="lightning-autolog", loss_metric="train_loss"),
    Workflow("mlflow-transformers-autolog", "MLflow autologging of a Hugging Face Trainer "
             "(`mlflow.transformers.autolog()`), a ResNet from its config under torchrun",
             ["trainrun", "torch", "--nproc-per-node", "2",
              *_example("mlflow_transformers_autolog.py", "--checkpoint-dir", CHECKPOINTS, "--tracking-uri",
                        MLFLOW_STORE)],
             writes_checkpoint=False, experiment="transformers-autolog"),
    Workflow("torch-distributor-mlflow", "PySpark TorchDistributor on local[2], rank 0 logging to MLflow",
             ["python", *_example("torch_distributor_mnist.py", "--tracking-uri", MLFLOW_STORE)],
             writes_checkpoint=False, experiment="torch-distributor"),
    Workflow("horovod-runner-mlflow", "Databricks HorovodRunner(np=2), rank 0 logging to MLflow",
             ["python", *_example("horovod_runner_mnist.py", "--checkpoint-dir", CHECKPOINTS, "--tracking-uri",
                                  MLFLOW_STORE)],
             experiment="horovod-runner"),
]


# The rank tags launchers put before each line: Open MPI's --tag-output ([1,0]<stdout>:), horovodrun's
# ([0]<stdout>:), MPICH's -prepend-rank ([0] ), torchrun's --tee ([default0]:) and trainrun spark's ([rank 0] ).
RANK_TAG = re.compile(r"^(\[\d+(,\d+)?\]<std(out|err)>:|\[\d+\] |\[default\d+\]:|\[rank \d+\] )")


def untagged_lines(output: str) -> list[str]:
    return [RANK_TAG.sub("", line).strip() for line in output.splitlines()]


def summary(output: str) -> dict:
    """The last JSON object line the workflow printed."""
    for line in reversed(untagged_lines(output)):
        if line.startswith("{") and line.endswith("}"):
            return json.loads(line)
    raise ValueError("the workflow printed no JSON summary line")
