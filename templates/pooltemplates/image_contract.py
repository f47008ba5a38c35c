"""Generated from launcher/trainrun/image_contract.py, where each name is explained; do not edit.
pooltemplates does not depend on trainrun, so it carries this copy; tests/unit/launcher/
test_image_contract.py fails when it is stale and regenerates it with UPDATE_GOLDEN=1."""
from __future__ import annotations

VENV_DIR = "/opt/venv"
MANIFEST_PATH = "/etc/trainstack/manifest.json"
# The image's CycloneDX SBOM, written beside the manifest at build time (images/scripts/write_sbom.py).
SBOM_PATH = "/etc/trainstack/sbom.cdx.json"
# Which distributions each layer of the venv holds, with its files and bytes (images/scripts/venv_layers.py).
VENV_LAYERS_PATH = "/etc/trainstack/venv-layers.json"
CONSTRAINTS_PATH = "/etc/trainstack/constraints.txt"
EXAMPLES_DIR = "/opt/trainstack/examples"
DISCOVERY_SCRIPT_PATH = "/opt/trainstack/discover-gpus.sh"
IMAGE_SCRIPTS_DIR = "/opt/trainstack/bin"
# sshd as the image's user for multi-node MPI (images/scripts/trainstack-sshd), on PATH under this name; its
# port, and where it reads the public keys allowed to log in (a mounted secret or volume).
SSHD_COMMAND = "trainstack-sshd"
SSHD_PORT = 2222
SSH_KEYS_DIR = "/etc/trainstack/ssh"
# Login shells (bash -l, su -, ssh) read the image's environment from here.
LOGIN_PROFILE_PATH = "/etc/profile.d/trainstack.sh"
# Spark's writable places for any user of the image (the pyspark package, SPARK_HOME, belongs to root).
SPARK_WORKER_DIR = "/tmp/spark/work"
SPARK_LOG_DIR = "/tmp/spark/logs"
# The image's training user (useradd in images/Dockerfile.j2), its uid and its home.
IMAGE_USER = "trainer"
IMAGE_USER_UID = 1000
IMAGE_HOME = f"/home/{IMAGE_USER}"
# JupyterLab's work folder (`lab` role), meant for a mounted volume, as docker-stacks' /home/jovyan/work.
NOTEBOOK_DIR = f"{IMAGE_HOME}/work"
JUPYTER_PORT = 8888
# MLflow's tracking server beside JupyterLab (`lab` with MLFLOW_PORT set).
MLFLOW_PORT = 5000
# The MLflow tracking store that server shows, and the examples and the pool log to: a SQLite file in the work folder.
MLFLOW_STORE = f"sqlite:///{NOTEBOOK_DIR}/mlflow.db"
# The IPython extension every kernel of the image loads (launcher/trainrun/notebook).
IPYTHON_EXTENSION = "trainrun.notebook"
# Triton's kernel cache: somewhere any user of the image can write, whatever its home (TRITON_CACHE_DIR overrides).
TRITON_CACHE_DIR = "/tmp/triton-cache"
# Ray on Spark's start hook in every image (RAY_ON_SPARK_START_HOOK), and under trainrun ray on any host.
RAY_ON_SPARK_START_HOOK = "trainrun.backends.spark.ray_start_hook.TrainstackStartHook"
# torch.utils.cpp_extension's build folder (DeepSpeed's JIT-built ops), likewise (TORCH_EXTENSIONS_DIR overrides).
TORCH_EXTENSIONS_DIR = "/tmp/torch-extensions"
# Where the image keeps the sources of the two distributions it installs.
LOCAL_PACKAGE_DIRS = {"launcher": "/opt/trainstack/src/launcher", "templates": "/opt/trainstack/src/templates"}
# Folders of the image's file system that a cluster's folders are bound onto at the same path, where a runtime cannot
# make a mount point in the read-only image (Charliecloud): homes, temporary folders, Slurm's spool (srun's PMIx
# folder).
MOUNT_POINTS = ("/home", "/root", "/tmp", "/var/tmp", "/var/spool", "/mnt", "/srv")
