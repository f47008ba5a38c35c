"""The image's site hook for trainers set up for another number of processes than the ranks started
(images/site-packages/trainstack_framework_ranks.py): loaded by its .pth at every start, it wraps Lightning's
Trainer.fit, TrainingArguments.__post_init__, Accelerator.__init__ and accelerate launch's simple launcher as their
modules load, and ends the process with one line when the numbers disagree. Here stand-in packages with the same
module paths take the frameworks' place; the frameworks themselves, under trainrun, TorchDistributor and a
%%trainrun cell: tests/image/test_lightning_hf.py."""
import ast
import subprocess
import sys
from pathlib import Path

import pytest

SITE_PACKAGES = Path(__file__).resolve().parents[3] / "images" / "site-packages"
# A fresh interpreter reading the hooks' folder as a site dir (its .pth files included), with the stand-ins first on
# its path, runs the statement given.
PROBE = """
import site, sys
site.addsitedir(sys.argv[1])
sys.path[:0] = [sys.argv[2]]
exec(sys.argv[3])
"""
LIGHTNING_TRAINER = '''
class Trainer:
    def __init__(self, devices=1, num_nodes=1):
        self.num_devices, self.num_nodes = devices, num_nodes

    def fit(self, model):
        """Fits the model."""
        print("fit", model)
'''
TRAINING_ARGUMENTS = '''
import types
from dataclasses import dataclass


@dataclass
class TrainingArguments:
    use_cpu: bool = False

    def __post_init__(self):
        self.world_size = 2 if self.use_cpu else 1
        self.device = types.SimpleNamespace(type="cpu")
'''
ACCELERATOR = '''
import types


class Accelerator:
    def __init__(self, cpu=False):
        self.num_processes = 2 if cpu else 1
        self.device = types.SimpleNamespace(type="cpu")
'''
LAUNCH = '''
def simple_launcher(args):
    print("launched", args.num_processes)
'''
STAND_INS = {
    "lightning/pytorch/trainer/trainer.py": LIGHTNING_TRAINER,
    "pytorch_lightning/trainer/trainer.py": LIGHTNING_TRAINER,
    "transformers/training_args.py": TRAINING_ARGUMENTS,
    "accelerate/accelerator.py": ACCELERATOR,
    "accelerate/commands/launch.py": LAUNCH,
}
TWO_RANKS = {"WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2"}


@pytest.fixture(scope="module")
def stand_ins(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("stand-ins")
    for name, source in STAND_INS.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
        for package in path.relative_to(root).parents[:-1]:
            (root / package / "__init__.py").touch()
    return root


def probe(stand_ins: Path, statement: str, env: dict[str, str]) -> tuple[int, str, str]:
    done = subprocess.run([sys.executable, "-I", "-c", PROBE, str(SITE_PACKAGES), str(stand_ins), statement],
                          capture_output=True, text=True, env=env)
    return done.returncode, done.stdout, done.stderr


@pytest.mark.parametrize("package", ["lightning.pytorch", "pytorch_lightning"])
def test_a_lightning_fit_on_other_devices_than_the_ranks_ends_with_one_line(stand_ins, package):
    fit = f"from {package}.trainer.trainer import Trainer; Trainer(devices=4).fit('model')"
    assert probe(stand_ins, fit, TWO_RANKS) == (
        1, "", "trainstack: Trainer(devices=4, num_nodes=1) = 4 processes: not the 2 ranks started (WORLD_SIZE=2) "
               "(valid: devices x num_nodes = 2, e.g. devices=2, num_nodes=1)\n")


def test_a_lightning_fit_on_the_ranks_started_or_outside_a_launcher_fits(stand_ins):
    fit = "from lightning.pytorch.trainer.trainer import Trainer; Trainer(devices={}, num_nodes={}).fit('model')"
    assert probe(stand_ins, fit.format(1, 2), {"WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "1"}) == (0, "fit model\n", "")
    assert probe(stand_ins, fit.format(4, 1), {}) == (0, "fit model\n", "")


def test_training_arguments_or_an_accelerator_alone_in_each_rank_end_it_with_one_line(stand_ins):
    arguments = "from transformers.training_args import TrainingArguments; TrainingArguments({})"
    assert probe(stand_ins, arguments.format(""), TWO_RANKS) == (
        1, "", "trainstack: TrainingArguments trains on 1 process: not the 2 ranks started (WORLD_SIZE=2); without "
               "GPUs, and without TrainingArguments(use_cpu=True), each rank would train alone (valid: "
               "TrainingArguments(use_cpu=True) on CPUs)\n")
    assert probe(stand_ins, arguments.format("use_cpu=True"), TWO_RANKS) == (0, "", "")
    accelerator = "from accelerate.accelerator import Accelerator; Accelerator({})"
    code, _, said = probe(stand_ins, accelerator.format(""), TWO_RANKS)
    assert (code, said.count("\n")) == (1, 1) and "Accelerator trains on 1 process: not the 2 ranks" in said, said
    assert probe(stand_ins, accelerator.format("cpu=True"), TWO_RANKS) == (0, "", "")


def test_accelerate_launch_of_processes_it_would_not_start_ends_with_one_line(stand_ins):
    launch = ("import argparse; from accelerate.commands.launch import simple_launcher; "
              "simple_launcher(argparse.Namespace(num_processes={}, mpirun_hostfile={!r}))")
    code, _, said = probe(stand_ins, launch.format(2, None), {})
    assert (code, said.startswith("trainstack: accelerate launch --num_processes = 2: starts 1 process")) == (1, True)
    assert probe(stand_ins, launch.format(2, "hosts"), {}) == (0, "launched 2\n", "")
    assert probe(stand_ins, launch.format(1, None), {}) == (0, "launched 1\n", "")


def test_the_wrapped_modules_keep_their_source_and_other_imports_pass_by(stand_ins):
    statement = ("import inspect, json, sys; from lightning.pytorch.trainer import trainer; "
                 "finders = [getattr(finder, '__name__', type(finder).__name__) for finder in sys.meta_path]; "
                 "print('FrameworkImportWatch' in finders[:finders.index('PathFinder')], "
                 "inspect.getsource(trainer.Trainer.fit).split()[1], "
                 "trainer.Trainer.fit.__doc__, type(json.__spec__.loader).__name__)")
    assert probe(stand_ins, statement, {}) == (0, "True fit(self, Fits the model. SourceFileLoader\n", "")


def test_the_suggested_split_needs_the_ranks_per_node(stand_ins):
    problems = ("import trainstack_framework_ranks as hook; "
                "print(hook.lightning_problem(1, 1, {'WORLD_SIZE': '4', 'LOCAL_WORLD_SIZE': '2'})); "
                "print(hook.lightning_problem(1, 1, {'WORLD_SIZE': '3', 'LOCAL_WORLD_SIZE': '2'})); "
                "print(hook.lightning_problem(2, 2, {'WORLD_SIZE': '4'}))")
    code, said, _ = probe(stand_ins, problems, {})
    assert code == 0 and [line.rpartition(" (valid: ")[2] for line in said.splitlines()] == [
        "devices x num_nodes = 4, e.g. devices=2, num_nodes=2)", "devices x num_nodes = 3)", "None"], said


def test_loading_it_at_startup_imports_nothing_site_has_not():
    """It loads in every Python of the image; functools and importlib.machinery wait for a framework's import."""
    statement = ("import sys; sys.path.insert(0, sys.argv[1]); before = set(sys.modules); "
                 "import trainstack_framework_ranks; print(sorted(set(sys.modules) - before))")
    done = subprocess.run([sys.executable, "-I", "-c", statement, str(SITE_PACKAGES)], capture_output=True, text=True,
                          check=True)
    assert set(ast.literal_eval(done.stdout)) <= {"trainstack_framework_ranks", "__future__"}, done.stdout
