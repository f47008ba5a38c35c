"""`python -m pooltemplates render synapse-gpu-large --target synapse`: the invoke tasks, standalone."""
from invoke import Collection, Program

from pooltemplates import tasks

Program(namespace=Collection.from_module(tasks), name="pooltemplates",
        binary="python -m pooltemplates").run()
