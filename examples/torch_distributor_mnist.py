"""PySpark's own TorchDistributor, called the way Databricks and PySpark users call it.

    python torch_distributor_mnist.py [--master URL] [--local-mode] [--script] [--epochs E] [--checkpoint-dir DIR]
        [--tracking-uri URI]

Function form: `TorchDistributor(...).run(train_fn, lr, epochs, checkpoint_dir)` with the imports inside the
function; helper modules reach the ranks through PYTHONPATH. At each epoch's end rank 0 writes a checkpoint
(trainrun.checkpoint: the model, the optimizer, the losses so far); a run started again resumes from the newest, which
rank 0 reads and broadcasts, and says so in one line. A relative --checkpoint-dir is each rank's own (an executor's
work folder): give a folder rank 0 finds again, such as the pool's work folder, to resume. Script form (`--script`):
`TorchDistributor(...).run("ddp_torch_mnist.py", "--lr=0.04", ...)`, whose rank 0 prints the summary.
With `--tracking-uri` (e.g. sqlite:////home/trainer/work/mlflow.db), rank 0 alone logs to MLflow, as Databricks'
guide does it: one run in `--experiment` with the parameters, the loss of every epoch and the accuracy.
"""
import argparse
import json
import os

from pyspark.ml.torch.distributor import TorchDistributor
from pyspark.sql import SparkSession

HERE = os.path.dirname(os.path.abspath(__file__))


def train_fn(lr: float, epochs: int, checkpoint_dir: str, tracking_uri: str | None = None,
             experiment: str | None = None) -> dict:
    import os

    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader, TensorDataset
    from torch.utils.data.distributed import DistributedSampler

    from digit_net import DigitNet
    from synthetic_digits import make_digits
    from trainrun import checkpoint

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(42)
    torch.set_num_threads(1)
    images, labels = make_digits(3000, seed=0)
    train_set = TensorDataset(torch.from_numpy(images), torch.from_numpy(labels))
    sampler = DistributedSampler(train_set)
    loader = DataLoader(train_set, batch_size=32, sampler=sampler)
    model = DistributedDataParallel(DigitNet())
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    # Rank 0 reads the newest checkpoint and broadcasts it: the other ranks need not see its folder.
    resumed = checkpoint.latest(checkpoint_dir) if rank == 0 else None
    saved = [torch.load(resumed.path / "state.pt") if resumed else None]
    dist.broadcast_object_list(saved, src=0)
    first_epoch, losses = 0, []
    if saved[0] is not None:
        model.module.load_state_dict(saved[0]["model"])
        optimizer.load_state_dict(saved[0]["optimizer"])
        first_epoch, losses = saved[0]["epoch"], saved[0]["losses"]
    if resumed:
        print(resumed.message(), flush=True)
    tracking = rank == 0 and tracking_uri is not None
    if tracking:
        import mlflow

        mlflow.set_tracking_uri(tracking_uri)
        mlflow.set_experiment(experiment)
        run = mlflow.start_run()
        mlflow.log_params({"lr": lr, "epochs": epochs, "world_size": dist.get_world_size()})
    for epoch in range(first_epoch, epochs):
        sampler.set_epoch(epoch)
        total = torch.zeros(1)
        for batch_images, batch_labels in loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(batch_images), batch_labels)
            loss.backward()
            optimizer.step()
            total += loss.detach()
        dist.all_reduce(total)
        losses.append(total.item() / dist.get_world_size() / len(loader))
        if tracking:
            mlflow.log_metric("loss", losses[-1], step=epoch)
        if rank == 0:
            with checkpoint.writing(checkpoint_dir, (epoch + 1) * len(loader)) as folder:
                torch.save({"model": model.module.state_dict(), "optimizer": optimizer.state_dict(),
                            "epoch": epoch + 1, "losses": losses}, folder / "state.pt")
    test_images, test_labels = make_digits(1000, seed=1)
    with torch.no_grad():
        predictions = model.module(torch.from_numpy(test_images)).argmax(dim=1)
    accuracy = (predictions == torch.from_numpy(test_labels)).float().mean().item()
    if tracking:
        mlflow.log_metric("accuracy", accuracy)
        mlflow.end_run()
    ranks = torch.ones(1)
    dist.all_reduce(ranks)
    dist.barrier()  # all ranks tear the process group down together (see ddp_torch_mnist.py)
    dist.destroy_process_group()
    return {"rank": rank, "ranks": int(ranks.item()), "losses": losses, "accuracy": accuracy,
            "local_rank": int(os.environ["LOCAL_RANK"]), **({"run_id": run.info.run_id} if tracking else {})}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--master", default=os.environ.get("MASTER", "local[2]"),
                        help="Spark master (default: $MASTER, which spark-submit reads too, else local[2])")
    parser.add_argument("--local-mode", action="store_true")
    parser.add_argument("--script", action="store_true")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--checkpoint-dir", default="checkpoints",
                        help="where rank 0 writes its checkpoints and resumes from (default: checkpoints, relative "
                             "to each rank's folder)")
    parser.add_argument("--tracking-uri", help="MLflow's tracking URI, which rank 0 logs the run to")
    parser.add_argument("--experiment", default="torch-distributor")
    args = parser.parse_args()

    # The helper modules train_fn imports must be on the path of the processes torchrun starts: on the
    # driver in local mode, in the executors otherwise (every container of the image has them at HERE;
    # addPyFile would reach Spark's own Python workers only, not torchrun's children).
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [HERE, os.environ.get("PYTHONPATH")]))
    spark = (SparkSession.builder.master(args.master).appName("torch-distributor-example")
             .config("spark.executorEnv.PYTHONPATH", HERE).getOrCreate())
    distributor = TorchDistributor(num_processes=2, local_mode=args.local_mode, use_gpu=False)
    if args.script:
        # The ranks' output reaches this driver; rank 0 prints the script's own summary line.
        distributor.run(os.path.join(HERE, "ddp_torch_mnist.py"), "--lr=0.04", f"--epochs={args.epochs}",
                        f"--checkpoint-dir={args.checkpoint_dir}")
    else:
        result = distributor.run(train_fn, 0.04, args.epochs, args.checkpoint_dir, args.tracking_uri, args.experiment)
        print(json.dumps({"workflow": "torch-distributor", **result, "local_mode": args.local_mode}), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
