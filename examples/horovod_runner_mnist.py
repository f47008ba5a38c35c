"""Databricks' HorovodRunner recipe: `HorovodRunner(np=2).run(train, lr=..., epochs=...)` through trainrun.

    python horovod_runner_mnist.py [--np N] [--lr LR] [--epochs E] [--checkpoint-dir DIR] [--tracking-uri URI]

`train` is the classic Horovod + PyTorch loop with its imports inside it, since the function is
pickled and run by every rank. `--np -2` is HorovodRunner's local mode; here `--np 2` runs on this
host too (`HorovodRunner(np, spark=...)` runs it as a Spark barrier stage). At each epoch's end rank 0 writes a
checkpoint (trainrun.checkpoint: the model, the optimizer, the losses so far); a run started again resumes from the
newest, which rank 0 loads and broadcasts, and says so in one line. Rank 0 writes the final model; the driver prints
rank 0's return value as the JSON summary line. With `--tracking-uri` (e.g.
sqlite:////home/trainer/work/mlflow.db), rank 0 alone logs to MLflow, as Databricks' HorovodRunner guide does it: one
run in `--experiment` with the parameters, the loss of every epoch and the accuracy.
"""
import json
import os

from trainrun import HorovodRunner

from synthetic_digits import training_arguments

HERE = os.path.dirname(os.path.abspath(__file__))


def train(lr: float, epochs: int, batch_size: int, train_size: int, checkpoint_dir: str,
          tracking_uri: str | None = None, experiment: str | None = None) -> dict:
    import os

    import horovod.torch as hvd
    import torch
    import torch.nn.functional as F
    from torch.utils.data import DataLoader, TensorDataset
    from torch.utils.data.distributed import DistributedSampler

    from digit_net import DigitNet
    from synthetic_digits import make_digits
    from trainrun import checkpoint

    hvd.init()
    torch.manual_seed(42)
    torch.set_num_threads(1)
    device = torch.device("cpu")
    if torch.cuda.is_available():
        torch.cuda.set_device(hvd.local_rank())
        device = torch.device("cuda", hvd.local_rank())

    images, labels = make_digits(train_size, seed=0)
    train_set = TensorDataset(torch.from_numpy(images), torch.from_numpy(labels))
    sampler = DistributedSampler(train_set, num_replicas=hvd.size(), rank=hvd.rank())
    loader = DataLoader(train_set, batch_size=batch_size, sampler=sampler)

    model = DigitNet().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr * hvd.size(), momentum=0.9)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    # Rank 0 loads the newest checkpoint; the broadcasts give every rank its weights and momentum.
    first_epoch, epoch_losses = 0, []
    resumed = checkpoint.latest(checkpoint_dir) if hvd.rank() == 0 else None
    if resumed:
        saved = torch.load(resumed.path / "state.pt", map_location=device)
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        first_epoch, epoch_losses = saved["epoch"], saved["epoch_losses"]
        print(resumed.message(), flush=True)
    first_epoch, epoch_losses = hvd.broadcast_object((first_epoch, epoch_losses), root_rank=0, name="resumed")
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    tracking = hvd.rank() == 0 and tracking_uri is not None
    if tracking:
        import mlflow

        mlflow.set_tracking_uri(tracking_uri)
        mlflow.set_experiment(experiment)
        run = mlflow.start_run()
        mlflow.log_params({"lr": lr, "epochs": epochs, "batch_size": batch_size, "world_size": hvd.size()})

    for epoch in range(first_epoch, epochs):
        sampler.set_epoch(epoch)
        model.train()
        total = torch.zeros(1)
        for batch_images, batch_labels in loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(batch_images.to(device)), batch_labels.to(device))
            loss.backward()
            optimizer.step()
            total += loss.detach().cpu()
        epoch_losses.append(hvd.allreduce(total / len(loader), name="epoch_loss").item())
        if hvd.rank() == 0:
            print(f"epoch {epoch} loss {epoch_losses[-1]:.4f}", flush=True)
            with checkpoint.writing(checkpoint_dir, (epoch + 1) * len(loader)) as folder:
                torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch + 1,
                            "epoch_losses": epoch_losses}, folder / "state.pt")
        if tracking:
            mlflow.log_metric("loss", epoch_losses[-1], step=epoch)

    test_images, test_labels = make_digits(1000, seed=1)
    model.eval()
    with torch.no_grad():
        predictions = model(torch.from_numpy(test_images).to(device)).argmax(dim=1).cpu()
    accuracy = (predictions == torch.from_numpy(test_labels)).float().mean().item()
    ranks_seen = int(hvd.allreduce(torch.ones(1), name="ranks", op=hvd.Sum).item())
    if hvd.rank() == 0:
        os.makedirs(checkpoint_dir, exist_ok=True)
        model_file = os.path.join(checkpoint_dir, "model.pt")
        torch.save(model.state_dict(), model_file)
        print(f"rank {hvd.rank()} wrote {model_file}", flush=True)
    if tracking:
        mlflow.log_metric("accuracy", accuracy)
        mlflow.end_run()
    return {"ranks": ranks_seen, "losses": epoch_losses, "accuracy": accuracy,
            **({"run_id": run.info.run_id} if tracking else {})}


def main():
    parser = training_arguments(default_lr=0.02)
    parser.add_argument("--np", type=int, default=2, help="N processes; -N: HorovodRunner's local mode")
    parser.add_argument("--tracking-uri", help="MLflow's tracking URI, which rank 0 logs the run to")
    parser.add_argument("--experiment", default="horovod-runner")
    args = parser.parse_args()

    # The helper modules `train` imports must be importable by every rank.
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [HERE, os.environ.get("PYTHONPATH")]))
    result = HorovodRunner(np=args.np).run(train, lr=args.lr, epochs=args.epochs, batch_size=args.batch_size,
                                           train_size=args.train_size, checkpoint_dir=args.checkpoint_dir,
                                           tracking_uri=args.tracking_uri, experiment=args.experiment)
    print(json.dumps({"workflow": "horovod-runner", **result}), flush=True)


if __name__ == "__main__":
    main()
