"""In the image: the Horovod example (examples/horovod_torch_mnist.py, unchanged) stopped mid-training and started
again. Unbroken: one run. Stopped: SIGTERM to `trainrun mpi` once its first checkpoint is written, as Slurm's time
limit or requeue stops a step; then the same line again, which must resume. Prints one JSON line of what each run
showed, for tests/image/test_resume_in_image.py."""
import glob
import json
import os
import re
import signal
import subprocess
import sys
import time

EXAMPLE = "/opt/trainstack/examples/horovod_torch_mnist.py"
# 188 steps an epoch on each of 2 ranks, 564 in all: long enough for the stop to land mid-training.
TRAIN_SIZE, BATCH, EPOCHS = 12000, 32, 3
FINAL_STEP = -(-TRAIN_SIZE // 2 // BATCH) * EPOCHS
RESUMED = re.compile(r"resumed from step (\d+) \(")


def training(folder):
    return subprocess.Popen(["trainrun", "mpi", "-np", "2", "python", EXAMPLE, "--checkpoint-dir", folder,
                             "--checkpoint-every", "10", "--train-size", str(TRAIN_SIZE), "--batch-size", str(BATCH),
                             "--epochs", str(EPOCHS)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def summary(output):
    line = next(line for line in reversed(output.splitlines()) if '{"workflow"' in line)
    return json.loads(line[line.index("{"):])


def main():
    work = sys.argv[1]
    unbroken = training(f"{work}/unbroken")
    unbroken_out, _ = unbroken.communicate(timeout=600)
    stopped = training(f"{work}/stopped")
    while not glob.glob(f"{work}/stopped/step-*"):
        if stopped.poll() is not None:
            break
        time.sleep(0.02)
    started = time.monotonic()
    stopped.send_signal(signal.SIGTERM)
    stopped_out, _ = stopped.communicate(timeout=120)
    stop_seconds = time.monotonic() - started
    saved = sorted(int(os.path.basename(path).removeprefix("step-")) for path in glob.glob(f"{work}/stopped/step-*"))
    again = training(f"{work}/stopped")
    started = time.monotonic()
    again_out, _ = again.communicate(timeout=600)
    resumed = RESUMED.search(again_out)
    print(json.dumps({
        "final_step": FINAL_STEP,
        "unbroken": {"code": unbroken.returncode, "summary": summary(unbroken_out)},
        "stopped": {"code": stopped.returncode, "seconds": round(stop_seconds, 1), "saved": saved,
                    "tail": stopped_out[-1500:]},
        "again": {"code": again.returncode, "resumed_from": int(resumed[1]) if resumed else None,
                  "seconds": round(time.monotonic() - started, 1), "summary": summary(again_out),
                  "tail": again_out[-1500:]},
    }))


if __name__ == "__main__":
    main()
