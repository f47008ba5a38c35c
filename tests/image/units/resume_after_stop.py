"""In the image: an example that checkpoints, unchanged, stopped mid-training and started again. The Horovod examples
checkpoint through trainrun.checkpoint (`step-N` folders; examples/horovod_torch_mnist.py every 10 steps and at each
epoch's end, examples/horovod_keras_mnist.py at each epoch's end), the others with their library's own checkpoints at
each epoch's end: Lightning's (examples/lightning_mnist.py: ModelCheckpoint, `last.ckpt`), DeepSpeed's
(examples/deepspeed_zero_mnist.py: ZeRO checkpoints, `zero/latest`), the Hugging Face Trainer's
(examples/hf_causal_lm.py: `checkpoint-STEP` folders; examples/peft_lora_causal_lm.py: the adapter's, in `lora/`) and
accelerate's (examples/accelerate_causal_lm.py: `accelerator.save_state` into trainrun.checkpoint's `step-N`).
Unbroken: one run. Stopped: SIGTERM to trainrun (`trainrun mpi -np 2`, `trainrun torch --nproc-per-node 2`,
`accelerate launch --cpu --num_processes 2`) once the first checkpoint is written, as Slurm's time limit or requeue
stops a step; then the same line again, which must resume. Prints one JSON line of what each run showed, for
tests/image/test_resume_in_image.py.

The function forms of the Spark distributors and of trainrun.run (examples/horovod_runner_mnist.py,
trainrun_run_mnist.py, torch_distributor_mnist.py, tf_distributor_mnist.py) checkpoint at each epoch's end; their
stopped run is one that ends an epoch early (`--epochs` one less), then the same line with every epoch, which must
resume from the last.

    python resume_after_stop.py horovod-torch|horovod-keras|lightning|deepspeed|hf|accelerate|peft|FUNCTION_FORM WORK
"""
import glob
import json
import os
import re
import signal
import subprocess
import sys
import time

EXAMPLES = "/opt/trainstack/examples"
BATCH = 32
# Enough data for the stop to land mid-training: 188 steps an epoch on each of 2 ranks (the Trainer's tiny GPT-2
# steps are slower: 32).
TRAIN_SIZE = {"horovod-torch": 12000, "horovod-keras": 12000, "lightning": 12000, "deepspeed": 12000, "hf": 2000,
              "accelerate": 2000, "peft": 2000}  # the last two: their examples' own, fixed
EPOCHS = {"horovod-torch": 3, "horovod-keras": 4, "lightning": 4, "deepspeed": 4, "hf": 4, "accelerate": 4, "peft": 4}
RESUMED = re.compile(r"resumed from step (\d+) \(")
EXAMPLE_ARGS = {
    "horovod-torch": [f"{EXAMPLES}/horovod_torch_mnist.py", "--batch-size", str(BATCH), "--checkpoint-every", "10"],
    "lightning": [f"{EXAMPLES}/lightning_mnist.py", "--batch-size", str(BATCH)],
    # the config's micro batch is 32
    "deepspeed": [f"{EXAMPLES}/deepspeed_zero_mnist.py", "--deepspeed", "--deepspeed_config",
                  f"{EXAMPLES}/deepspeed_zero2.json"],
    "hf": [f"{EXAMPLES}/hf_causal_lm.py", "--batch-size", str(BATCH)],
    "horovod-keras": [f"{EXAMPLES}/horovod_keras_mnist.py", "--batch-size", str(BATCH)],
    "accelerate": [f"{EXAMPLES}/accelerate_causal_lm.py", "--batch-size", str(BATCH)],
    "peft": [f"{EXAMPLES}/peft_lora_causal_lm.py", "--batch-size", str(BATCH)],
}
# Examples whose data size is their own (no --train-size).
FIXED_SIZE = ("accelerate", "peft")
# The function forms, started as `python EXAMPLE`: their train function runs on 2 ranks (HorovodRunner(np=2),
# trainrun.run, TorchDistributor and MirroredStrategyRunner on local[2]). 3000 samples and batches of 32.
FUNCTION_FORMS = {
    "horovod-runner": f"{EXAMPLES}/horovod_runner_mnist.py",
    "trainrun-run": f"{EXAMPLES}/trainrun_run_mnist.py",
    "torch-distributor": f"{EXAMPLES}/torch_distributor_mnist.py",
    "tf-distributor": f"{EXAMPLES}/tf_distributor_mnist.py",
}
FUNCTION_FORM_EPOCHS = 3
# The files that appear once a checkpoint is complete.
WRITTEN = {"horovod-torch": "step-*", "horovod-keras": "step-*", "lightning": "last.ckpt", "deepspeed": "zero/latest",
           "hf": "checkpoint-*/trainer_state.json", "accelerate": "step-*",
           "peft": "lora/checkpoint-*/trainer_state.json"}


def steps_per_epoch(kind):
    per_rank = TRAIN_SIZE[kind] // 2
    return per_rank // BATCH if kind == "horovod-keras" else -(-per_rank // BATCH)  # Keras: whole batches


def saved_steps(kind, folder):
    """The steps of the complete checkpoints the folder holds."""
    if kind == "lightning":
        return sorted(int(re.search(r"step=(\d+)\.ckpt$", path)[1]) for path in glob.glob(f"{folder}/epoch=*.ckpt"))
    if kind in ("hf", "peft"):
        return sorted(int(path.split("/")[-2].removeprefix("checkpoint-"))
                      for path in glob.glob(f"{folder}/{WRITTEN[kind]}"))
    if kind.startswith("horovod") or kind == "accelerate":
        return sorted(int(os.path.basename(path).removeprefix("step-")) for path in glob.glob(f"{folder}/step-*"))
    epochs = (re.fullmatch(r"epoch-(\d+)", os.path.basename(path)) for path in glob.glob(f"{folder}/zero/epoch-*"))
    return sorted(int(epoch[1]) * steps_per_epoch(kind) for epoch in epochs if epoch)


def training(kind, folder):
    if kind == "accelerate":
        launcher = ["accelerate", "launch", "--cpu", "--num_processes", "2", "--mpirun_hostfile",
                    f"{EXAMPLES}/localhost_hostfile"]
    elif kind.startswith("horovod"):
        launcher = ["trainrun", "mpi", "-np", "2", "python"]
    else:
        launcher = ["trainrun", "torch", "--nproc-per-node", "2"]
    size = [] if kind in FIXED_SIZE else ["--train-size", str(TRAIN_SIZE[kind])]
    return subprocess.Popen([*launcher, *EXAMPLE_ARGS[kind], "--checkpoint-dir", folder, *size,
                             "--epochs", str(EPOCHS[kind])],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)


def summary(output):
    line = next(line for line in reversed(output.splitlines()) if '{"workflow"' in line)
    return json.loads(line[line.index("{"):])


def without_java_frames(output):
    return "\n".join(line for line in output.splitlines() if not line.startswith("\tat "))


def function_form(kind, folder, epochs):
    return subprocess.run(["python", FUNCTION_FORMS[kind], "--checkpoint-dir", folder, "--epochs", str(epochs)],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)


def function_form_main(kind, work):
    unbroken = function_form(kind, f"{work}/unbroken", FUNCTION_FORM_EPOCHS)
    stopped = function_form(kind, f"{work}/stopped", FUNCTION_FORM_EPOCHS - 1)
    started = time.monotonic()
    again = function_form(kind, f"{work}/stopped", FUNCTION_FORM_EPOCHS)
    resumed = RESUMED.search(again.stdout)
    runs = {"unbroken": unbroken, "stopped": stopped, "again": again}
    print(json.dumps({
        "epochs": FUNCTION_FORM_EPOCHS, "again_seconds": round(time.monotonic() - started, 1),
        "resumed_from": int(resumed[1]) if resumed else None,
        **{name: {"code": run.returncode, "summary": summary(run.stdout) if run.returncode == 0 else None,
                  "tail": without_java_frames(run.stdout)[-3000:]} for name, run in runs.items()},
    }))


def main():
    kind, work = sys.argv[1:]
    if kind in FUNCTION_FORMS:
        function_form_main(kind, work)
        return
    unbroken = training(kind, f"{work}/unbroken")
    unbroken_out, _ = unbroken.communicate(timeout=600)
    stopped = training(kind, f"{work}/stopped")
    while not glob.glob(f"{work}/stopped/{WRITTEN[kind]}"):
        if stopped.poll() is not None:
            break
        time.sleep(0.02)
    started = time.monotonic()
    if kind == "accelerate":  # `accelerate launch` ends at SIGTERM and leaves its mpirun running: the whole group, as
        os.killpg(stopped.pid, signal.SIGTERM)  # Slurm and a terminal's Ctrl-C signal it
    else:
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
    resumed = RESUMED.findall(again_out)  # the PEFT example's base resumes first, at its end
    print(json.dumps({
        "final_step": steps_per_epoch(kind) * EPOCHS[kind], "steps_per_epoch": steps_per_epoch(kind),
        "unbroken": {"code": unbroken.returncode, "summary": summary(unbroken_out), "tail": unbroken_out[-1500:]},
        "stopped": {"code": stopped.returncode, "seconds": round(stop_seconds, 1), "saved": saved,
                    "tail": stopped_out[-1500:]},
        "again": {"code": again.returncode, "resumed_from": int(resumed[-1]) if resumed else None,
                  "seconds": round(time.monotonic() - started, 1), "summary": summary(again_out),
                  "tail": again_out[-1500:]},
    }))


if __name__ == "__main__":
    main()
