from trainstack.image.docs import flavor_table, gpu_flavor_table, patch_table, markdown_table, workflow_table
from trainstack.image.matrix import load_matrix
from trainstack.image.workflows import WORKFLOWS


def test_workflow_table_has_a_row_per_workflow_with_its_command():
    table = workflow_table(WORKFLOWS)
    assert len(table.splitlines()) == 2 + len(WORKFLOWS)
    assert "| horovod-torch-mpirun | Horovod images: `mpirun -np 2 python train.py` | `mpirun -np 2 python " in table


def test_table_has_a_row_per_flavor():
    table = flavor_table(load_matrix())
    assert "| cpu | 3.11 | 2.13.0+cpu | absent | 2.21.0 | 0.28.1 | 0.19.8 | 4.3.0 |" in table
    assert "| gpu | 3.11 | 2.10.0 | 0.25.0 | 2.20.0 | 0.28.1 | 0.19.8 |" in table
    # DeepSpeed 0.19.8 has no CUDA 13 support: the matrix lists it as absent from gpu-cu13.
    assert "| gpu-cu13 | 3.11 | 2.15.0 | 0.29.2 | - | 0.28.1 | absent |" in table


def test_gpu_flavor_table_says_what_each_holds_and_the_driver_it_needs():
    rows = gpu_flavor_table(load_matrix()).splitlines()[2:]
    assert [row.split(" | ")[0] for row in rows] == ["| gpu", "| gpu-cu13"]
    gpu, cu13 = rows
    assert "PyTorch 2.10.0, TensorFlow 2.20.0, Horovod 0.28.1 (NCCL)" in gpu and ">= 525.60.13" in gpu
    assert "no TensorFlow" in cu13 and "only CUDA 12 builds" in cu13 and ">= 580" in cu13
    # The published gpu image by the name `docker pull` gives it; gpu-cu13, which CI does not publish, as built here.
    assert "`docker run --rm -it --gpus all --shm-size 8g ghcr.io/trainstack/trainstack:gpu`" in gpu
    assert ("`docker run --rm -it --gpus all --shm-size 8g trainstack:gpu-cu13` (not published: built here by `invoke "
            "build --flavor gpu-cu13`)") in cu13


def test_patch_table_names_the_flavors_applying_each_patch():
    rows = patch_table(load_matrix()).splitlines()[2:]
    shared = next(row for row in rows if "shared-cuda-runtime" in row)
    assert "(#patch-shared-cuda-runtime)" in shared and "| gpu, gpu-cu13 | none filed" in shared
    assert any("| cpu, gpu, gpu-cu13 |" in row for row in rows if "current-frameworks" in row)


def test_patch_table_gives_each_patch_its_upstream_reference():
    rows = patch_table(load_matrix()).splitlines()[2:]
    keras3 = next(row for row in rows if "keras3.patch" in row)
    assert keras3.endswith("| horovod/horovod#4290 (upstream's fix was withdrawn) |"), keras3
    rank0 = next(row for row in rows if "pyspark-4.3.0-distributor-rank0-output.patch" in row)
    assert "(#patch-distributor-rank0-output)" in rank0 and "| cpu, gpu, gpu-cu13 | none filed" in rank0, rank0


def test_a_pipe_inside_a_cell_is_escaped():
    assert markdown_table(["a"], [["x|y"]]).splitlines()[-1] == "| x\\|y |"
