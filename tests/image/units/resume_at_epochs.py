"""In the image: an example that checkpoints at each epoch's end with its library's own checkpoints, unchanged,
stopped mid-training and started again: Lightning's (examples/lightning_mnist.py: ModelCheckpoint, `last.ckpt`) or
DeepSpeed's (examples/deepspeed_zero_mnist.py: ZeRO checkpoints, `zero/latest`). Unbroken: one run. Stopped: SIGTERM
to `trainrun torch` once the first epoch's checkpoint is written, as Slurm's time limit or requeue stops a step; then
the same line again, which must resume. Prints one JSON line of what each run showed, for
tests/image/test_resume_in_image.py.

    python resume_at_epochs.py lightning|deepspeed WORK_FOLDER"""
import glob
import json
import os
import re
import signal
import subprocess
import sys
import time

EXAMPLES = "/opt/trainstack/examples"
# 188 steps an epoch on each of 2 ranks: the stop lands in the second epoch or later.
TRAIN_SIZE, BATCH, EPOCHS = 12000, 32, 4
STEPS_PER_EPOCH = -(-TRAIN_SIZE // 2 // BATCH)
RESUMED = re.compile(r"resumed from step (\d+) \(")
EXAMPLE_ARGS = {
    "lightning": [f"{EXAMPLES}/lightning_mnist.py", "--batch-size", str(BATCH)],
    # the config's micro batch is 32
    "deepspeed": [f"{EXAMPLES}/deepspeed_zero_mnist.py", "--deepspeed", "--deepspeed_config",
                  f"{EXAMPLES}/deepspeed_zero2.json"],
}
# The file that appears once an epoch's checkpoint is complete, and the steps of the checkpoints a folder holds.
WRITTEN = {"lightning": "last.ckpt", "deepspeed": "zero/latest"}


def saved_steps(kind, folder):
    if kind == "lightning":
        return sorted(int(re.search(r"step=(\d+)\.ckpt$", path)[1]) for path in glob.glob(f"{folder}/epoch=*.ckpt"))
    epochs = (re.fullmatch(r"epoch-(\d+)", os.path.basename(path)) for path in glob.glob(f"{folder}/zero/epoch-*"))
    return sorted(int(epoch[1]) * STEPS_PER_EPOCH for epoch in epochs if epoch)


def training(kind, folder):
    return subprocess.Popen(["trainrun", "torch", "--nproc-per-node", "2", *EXAMPLE_ARGS[kind], "--checkpoint-dir",
                             folder, "--train-size", str(TRAIN_SIZE), "--epochs", str(EPOCHS)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def summary(output):
    line = next(line for line in reversed(output.splitlines()) if '{"workflow"' in line)
    return json.loads(line[line.index("{"):])


def main():
    kind, work = sys.argv[1:]
    unbroken = training(kind, f"{work}/unbroken")
    unbroken_out, _ = unbroken.communicate(timeout=600)
    stopped = training(kind, f"{work}/stopped")
    while not os.path.exists(f"{work}/stopped/{WRITTEN[kind]}"):
        if stopped.poll() is not None:
            break
        time.sleep(0.02)
    started = time.monotonic()
    stopped.send_signal(signal.SIGTERM)
    stopped_out, _ = stopped.communicate(timeout=120)
    stop_seconds = time.monotonic() - started
    saved = saved_steps(kind, f"{work}/stopped")
    again = training(kind, f"{work}/stopped")
    started = time.monotonic()
    again_out, _ = again.communicate(timeout=600)
    resumed = RESUMED.search(again_out)
    print(json.dumps({
        "final_step": STEPS_PER_EPOCH * EPOCHS, "steps_per_epoch": STEPS_PER_EPOCH,
        "unbroken": {"code": unbroken.returncode, "summary": summary(unbroken_out), "tail": unbroken_out[-1500:]},
        "stopped": {"code": stopped.returncode, "seconds": round(stop_seconds, 1), "saved": saved,
                    "tail": stopped_out[-1500:]},
        "again": {"code": again.returncode, "resumed_from": int(resumed[1]) if resumed else None,
                  "seconds": round(time.monotonic() - started, 1), "summary": summary(again_out),
                  "tail": again_out[-1500:]},
    }))


if __name__ == "__main__":
    main()
