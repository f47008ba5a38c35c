"""DeepSpeed launched the ways its users launch it, in the image (issue 29): torchrun through `trainrun torch ...
--deepspeed --deepspeed_config ds.json` (the config checked before any rank starts), DeepSpeed's own launcher on one
node (`deepspeed --num_accelerators 2` on CPU: the CPU accelerator counts NUMA nodes, so the count is given) and
across two containers from a hostfile over the image's sshd (`deepspeed --hostfile ... --launcher openmpi`: the
image has Open MPI and mpi4py, not pdsh); trainrun's config check agrees with DeepSpeed's own; a DeepSpeed rank
killed mid-step ends the job within the lifecycle's bound with nothing left (the fault matrix's deepspeed row)."""
from __future__ import annotations

import io
import json
import re
import shutil
import tempfile
import time
import uuid
from pathlib import Path

import pytest
from fault_harness import once_more_after_gloo_abort

from trainstack.clusters import nodes

pytestmark = pytest.mark.timeout(1200)

ROOT = Path(__file__).resolve().parents[2]
UNITS_DIR = Path(__file__).parent / "units"
STEP = ["/units/ds_step.py", "--deepspeed", "--deepspeed_config", "/units/ds_zero2.json"]
RANK_LINE = re.compile(r"ds rank (\d)/2 on (\S+) stage 2 accelerator cpu backend gloo loss \S+ -> \S+ falls True")
BOUND = 30.0


def ranks(output: str) -> dict[int, str]:
    """Rank -> host of the ranks that trained and saw their loss fall."""
    return {int(rank): host for rank, host in RANK_LINE.findall(output)}


def test_the_image_has_deepspeed_with_its_cpu_accelerator(in_image):
    output = in_image.run(["python", "-c", "import deepspeed; from deepspeed.accelerator import get_accelerator; "
                           "print(deepspeed.__version__, get_accelerator().device_name())"])
    assert output.split()[-2:] == ["0.19.8", "cpu"], output


def test_trainrun_torch_runs_deepspeed_with_the_config_checked(in_image):
    output = in_image.run(["trainrun", "torch", "--nproc-per-node", "2", *STEP])
    assert sorted(ranks(output)) == [0, 1], output[-4000:]
    assert ("trainrun: DeepSpeed config /units/ds_zero2.json checked: ZeRO stage 2, train_micro_batch_size_per_gpu 8"
            in output), output[-4000:]
    dry_run = in_image.run(["trainrun", "torch", "--nproc-per-node", "2", "--dry-run", *STEP])
    assert "note: DeepSpeed config /units/ds_zero2.json checked: ZeRO stage 2" in dry_run, dry_run


@pytest.mark.parametrize("config,expected", [
    ('{"train_batch_size": 16, "zero_optimization": {"stage": 4}}',
     "trainrun: /tmp/ds.json: zero_optimization.stage = 4: is not a ZeRO stage (valid: the integer 0, 1, 2 or 3)"),
    ('{"train_batch_size": 16,\n "zero_optimization": {"stage": 2}\n',  # neither JSON nor hjson: no closing brace
     "trainrun: /tmp/ds.json: line 3 column 1 = '(the end of the file)': is not valid JSON (Expecting ',' delimiter)"),
    ('{"train_batch_size": 30, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2}',
     "trainrun: /tmp/ds.json: train_batch_size = 30: is not train_micro_batch_size_per_gpu (4) x "
     "gradient_accumulation_steps (2) x 2 ranks (valid: 16)"),
], ids=["stage-4", "not-json", "batch"])
def test_a_bad_config_is_one_line_before_any_rank_starts(in_image, config, expected):
    script = (f"printf '%s' '{config}' > /tmp/ds.json; start=$(date +%s%N); "
              f"trainrun torch --nproc-per-node 2 /units/ds_step.py --deepspeed --deepspeed_config /tmp/ds.json; "
              "code=$?; echo \"exit $code after $(( ($(date +%s%N) - start) / 1000000 )) ms\"")
    output = in_image.run(["sh", "-c", script])
    lines = output.strip().splitlines()
    assert lines[-2].startswith(expected) and "(valid: " in lines[-2], output
    assert lines[-1].startswith("exit 2 after "), output
    assert int(lines[-1].split()[-2]) < 10000, output  # trainrun's start, no rank's
    assert len(lines) == 2, output  # the line alone: no rank started


def test_the_config_check_agrees_with_deepspeeds_own(in_image):
    output = in_image.run(["python", "/units/ds_config_parity.py"])
    reports = {line.split(" ", 1)[0]: json.loads(line.split(" ", 1)[1]) for line in output.splitlines()
               if line.startswith(("parity {", "removed {"))}
    parity = reports["parity"]
    differ = {name: verdict for name, verdict in parity.items() if verdict["trainrun"] != verdict["deepspeed"]}
    stricter = {"trainrun": True, "deepspeed": False}  # a stage DeepSpeed coerces: "2", 2.0, true
    assert differ == {name: stricter for name in ("stage as a string", "stage as a float", "stage as a bool")}
    assert parity["stage 4"] == {"trainrun": True, "deepspeed": True} and not parity["good"]["deepspeed"]
    assert reports["removed"] == {"top_level": True, "zero": True}, "trainrun's removed fields differ from DeepSpeed's"


# --num_gpus, the older name of the same count, under `invoke test --long` (CI's hour).
@pytest.mark.parametrize("count", ["--num_accelerators", pytest.param("--num_gpus", marks=pytest.mark.long)])
def test_the_deepspeed_launcher_on_one_node_runs_two_cpu_ranks(in_image, count):
    output = in_image.run(["deepspeed", count, "2", *STEP])
    assert sorted(ranks(output)) == [0, 1], output[-4000:]


def test_a_deepspeed_rank_killed_mid_step_ends_the_job_within_30s_leaving_nothing(in_image, tmp_path):
    """The fault matrix's deepspeed row: benchmarks/faults.py in the image (the host has no DeepSpeed)."""
    tmp_path.chmod(0o777)  # the image's user writes the report
    status, output = in_image.run_status(
        ["python", "/src/benchmarks/faults.py", "--backends", "deepspeed", "--scenarios", "rank-killed-by-sigkill",
         "--label", "image test", "--out", "/out/faults.json"],
        timeout=600, volumes={str(ROOT): {"bind": "/src", "mode": "ro"}, str(tmp_path): {"bind": "/out", "mode": "rw"}})
    report = json.loads((tmp_path / "faults.json").read_text())
    row = report["results"]["rank-killed-by-sigkill/deepspeed"]
    assert row["met"] and status == 0, json.dumps(row, indent=2) + output[-3000:]
    assert row["exit_code"] == 137 and row["processes_left"] == 0, row
    assert row["trainrun_message"].startswith("trainrun: rank 1 was killed by SIGKILL"), row


# --- across two containers -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def cluster(docker_client, image):
    share = Path(tempfile.mkdtemp(prefix="trainstack-ds-share-"))
    share.chmod(0o755)
    for name in ("ds_step.py", "ds_zero2.json"):
        shutil.copyfile(UNITS_DIR / name, share / name)
        (share / name).chmod(0o644)
    name = f"tsds-{uuid.uuid4().hex[:6]}"
    try:
        yield nodes.up(count=2, image=image.id, name=name, share=str(share), client=docker_client)
    finally:
        nodes.down(name, client=docker_client)
        shutil.rmtree(share, ignore_errors=True)


# What a user of the image writes once in the launcher's ~/.ssh/config (docs/guides/deepspeed.md): the workers'
# sshd port, the cluster's key and the workers' host keys, for DeepSpeed's ssh check and mpirun's daemons alike.
SSH_CONFIG = ("Host *\\n  Port 2222\\n  IdentityFile /etc/trainstack/ssh/id_ed25519\\n"
              "  UserKnownHostsFile /etc/trainstack/ssh/known_hosts\\n  StrictHostKeyChecking yes\\n")


def test_the_deepspeed_launcher_runs_ranks_in_two_containers_from_a_hostfile(docker_client, cluster):
    first = cluster["workers"][0]["name"]
    script = (f"mkdir -p ~/.ssh && printf '{SSH_CONFIG}' > ~/.ssh/config && chmod 600 ~/.ssh/config && "
              f"cat /etc/trainstack/ssh/hostfile && deepspeed --hostfile /etc/trainstack/ssh/hostfile "
              f"--launcher openmpi --master_addr {first} /job/ds_step.py --deepspeed --deepspeed_config "
              "/job/ds_zero2.json")

    def run() -> tuple[int, str]:
        out = io.StringIO()
        return nodes.run(["sh", "-c", script], cluster["nodes"], docker_client, out), out.getvalue()
    started = time.monotonic()
    code, output = once_more_after_gloo_abort(run, "the deepspeed launcher across two containers")
    assert code == 0, output[-4000:]
    assert ranks(output) == {0: first, 1: cluster["workers"][1]["name"]}, output[-4000:]
    print(f"deepspeed --hostfile across two containers: {time.monotonic() - started:.1f} s")
