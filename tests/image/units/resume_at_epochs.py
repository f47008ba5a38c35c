"""In the image: an example that checkpoints at each epoch's end, unchanged,
stopped mid-training and started again: Lightning's (examples/lightning_mnist.py: ModelCheckpoint, `last.ckpt`),
DeepSpeed's (examples/deepspeed_zero_mnist.py: ZeRO checkpoints, `zero/latest`), the Hugging Face Trainer's
(examples/hf_causal_lm.py: `checkpoint-STEP` folders), or Horovod's Keras example's (examples/horovod_keras_mnist.py:
trainrun.checkpoint's `step-N` folders, under `trainrun mpi`). Unbroken: one run. Stopped: SIGTERM to trainrun once
the first epoch's checkpoint is written, as Slurm's time limit or requeue stops a step; then the same line again,
which must resume. Prints one JSON line of what each run showed, for tests/image/test_resume_in_image.py.

    python resume_at_epochs.py lightning|deepspeed|hf|horovod-keras WORK_FOLDER"""
import glob
import json
import os
import re
import signal
import subprocess
import sys
import time

EXAMPLES = "/opt/trainstack/examples"
BATCH, EPOCHS = 32, 4
# Enough data for the stop to land in the second epoch or later: 188 steps an epoch on each of 2 ranks (the Trainer's
# tiny GPT-2 steps are slower: 32).
TRAIN_SIZE = {"lightning": 12000, "deepspeed": 12000, "hf": 2000, "horovod-keras": 12000}
RESUMED = re.compile(r"resumed from step (\d+) \(")
EXAMPLE_ARGS = {
    "lightning": [f"{EXAMPLES}/lightning_mnist.py", "--batch-size", str(BATCH)],
    # the config's micro batch is 32
    "deepspeed": [f"{EXAMPLES}/deepspeed_zero_mnist.py", "--deepspeed", "--deepspeed_config",
                  f"{EXAMPLES}/deepspeed_zero2.json"],
    "hf": [f"{EXAMPLES}/hf_causal_lm.py", "--batch-size", str(BATCH)],
    "horovod-keras": [f"{EXAMPLES}/horovod_keras_mnist.py", "--batch-size", str(BATCH)],
}
# The files that appear once an epoch's checkpoint is complete.
WRITTEN = {"lightning": "last.ckpt", "deepspeed": "zero/latest", "hf": "checkpoint-*/trainer_state.json",
           "horovod-keras": "step-*"}


def steps_per_epoch(kind):
    per_rank = TRAIN_SIZE[kind] // 2
    return per_rank // BATCH if kind == "horovod-keras" else -(-per_rank // BATCH)  # Keras: whole batches


def saved_steps(kind, folder):
    """The steps of the complete checkpoints the folder holds."""
    if kind == "lightning":
        return sorted(int(re.search(r"step=(\d+)\.ckpt$", path)[1]) for path in glob.glob(f"{folder}/epoch=*.ckpt"))
    if kind == "hf":
        return sorted(int(path.split("/")[-2].removeprefix("checkpoint-"))
                      for path in glob.glob(f"{folder}/{WRITTEN['hf']}"))
    if kind == "horovod-keras":
        return sorted(int(os.path.basename(path).removeprefix("step-")) for path in glob.glob(f"{folder}/step-*"))
    epochs = (re.fullmatch(r"epoch-(\d+)", os.path.basename(path)) for path in glob.glob(f"{folder}/zero/epoch-*"))
    return sorted(int(epoch[1]) * steps_per_epoch(kind) for epoch in epochs if epoch)


def training(kind, folder):
    launcher = ["mpi", "-np", "2", "python"] if kind.startswith("horovod") else ["torch", "--nproc-per-node", "2"]
    return subprocess.Popen(["trainrun", *launcher, *EXAMPLE_ARGS[kind], "--checkpoint-dir",
                             folder, "--train-size", str(TRAIN_SIZE[kind]), "--epochs", str(EPOCHS)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def summary(output):
    line = next(line for line in reversed(output.splitlines()) if '{"workflow"' in line)
    return json.loads(line[line.index("{"):])


def main():
    kind, work = sys.argv[1:]
    unbroken = training(kind, f"{work}/unbroken")
    unbroken_out, _ = unbroken.communicate(timeout=600)
    stopped = training(kind, f"{work}/stopped")
    while not glob.glob(f"{work}/stopped/{WRITTEN[kind]}"):
        if stopped.poll() is not None:
            break
        time.sleep(0.02)
    started = time.monotonic()
    stopped.send_signal(signal.SIGTERM)
    stopped_out, _ = stopped.communicate(timeout=120)
    stop_seconds = time.monotonic() - started
    saved = saved_steps(kind, f"{work}/stopped")
    if kind == "hf":  # what a kill during the next save leaves: the folder without its trainer_state.json
        partial = f"{work}/stopped/checkpoint-{saved[-1] + steps_per_epoch(kind)}"
        os.makedirs(partial, exist_ok=True)
        with open(f"{partial}/model.safetensors", "wb") as cut_off:
            cut_off.write(b"\0" * 100)
    again = training(kind, f"{work}/stopped")
    started = time.monotonic()
    again_out, _ = again.communicate(timeout=600)
    resumed = RESUMED.search(again_out)
    print(json.dumps({
        "final_step": steps_per_epoch(kind) * EPOCHS, "steps_per_epoch": steps_per_epoch(kind),
        "unbroken": {"code": unbroken.returncode, "summary": summary(unbroken_out), "tail": unbroken_out[-1500:]},
        "stopped": {"code": stopped.returncode, "seconds": round(stop_seconds, 1), "saved": saved,
                    "tail": stopped_out[-1500:]},
        "again": {"code": again.returncode, "resumed_from": int(resumed[1]) if resumed else None,
                  "seconds": round(time.monotonic() - started, 1), "summary": summary(again_out),
                  "tail": again_out[-1500:]},
    }))


if __name__ == "__main__":
    main()
