"""trainrun's command line, for the CLI, the notebook magic and the docs alike: its parser, to which each
subcommand's module adds its own (add_parser), the options every backend takes and the job they describe, the
types option values are read with (counts, seconds), and argparse's errors (an unknown option, a missing value, a
value of the wrong type, no backend) as one line in the project's format, `trainrun: option = value: rule (valid:
...)`, with a suggestion for a misspelled option, raised as the project's UsageError (exit code 2)."""
from __future__ import annotations

import argparse
import ast
import difflib
import importlib
import re
import sys
from typing import TYPE_CHECKING, NoReturn, Sequence

from . import __version__
from .errors import UsageError
from .plan import DEFAULT_EXIT_BARRIER_TIMEOUT, RunOptions
from .validate import timeout

if TYPE_CHECKING:
    from .job import MpiJob, RayJob, SparkJob, SparkPoolJob, TorchJob

EXAMPLES = """examples:
  trainrun mpi -np 2 python train.py                      # the mpirun line horovodrun builds
  trainrun mpi --gloo -np 2 python train.py               # Horovod's Gloo controller
  trainrun mpi -np 2 -H worker-1:1,worker-2:1 --ssh-port 2222 -i KEY python train.py   # ranks on other hosts
  trainrun torch --nproc-per-node 2 train.py --lr 0.1     # torch.distributed.run
  trainrun spark --num-processes 2 --template local-pool train.py   # a Spark barrier stage
  trainrun spark-pool --template local-pool -- python train.py   # in salloc/sbatch: a Spark pool for one command
  trainrun ray python driver.py                           # a Ray cluster here (or in salloc/sbatch) for a driver
  trainrun mpi -np 2 --dry-run --json python train.py     # the plan, nothing started
  trainrun doctor                                         # preflight checks
  trainrun selftest                                       # GPUs, allreduce sweeps and torch.compile, measured
"""
# The module of each subcommand, which adds its parser (add_parser(subparsers)); `trainrun --help` lists them in
# this order.
SUBCOMMANDS = {"mpi": "trainrun.backends.mpi", "torch": "trainrun.backends.torch", "spark": "trainrun.backends.spark",
               "spark-pool": "trainrun.backends.spark.pool_job", "ray": "trainrun.backends.ray",
               "doctor": "trainrun.doctor", "selftest": "trainrun.selftest"}

# The other launchers' spellings of an option, and the one each backend takes instead.
OTHER_SPELLINGS = {
    "torch": {"-np": "--nproc-per-node", "--num-processes": "--nproc-per-node", "--num-proc": "--nproc-per-node",
              "-H": "--nnodes with --master-addr", "--hosts": "--nnodes with --master-addr"},
    "spark": {"--nproc-per-node": "--num-processes", "--nproc_per_node": "--num-processes", "-m": "-- -m MODULE"},
    "mpi": {"--nproc-per-node": "-np", "--nproc_per_node": "-np"},
}
# Options whose value is a launcher's own argument list, which often starts with a dash.
PASS_THROUGH = ("--mpi-args", "--mpi_args", "--torchrun-args", "--torchrun_args")
_TYPE_ERROR = re.compile(r"argument (?P<names>\S+): expected (?P<valid>.*), got (?P<value>'.*')$")
_CHOICE_ERROR = re.compile(r"argument (?P<names>\S+): invalid choice: (?P<value>'.*') \(choose from (?P<valid>.*)\)$")
_EXPECTED_ONE = re.compile(r"argument (?P<names>\S+): expected one argument$")
_NOT_ALLOWED = re.compile(r"argument (?P<names>\S+): not allowed with argument (?P<other>\S+)$")


def positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return int(text)


def non_negative(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}")
    return int(text)


def seconds(text: str) -> float:
    return timeout("--timeout", text)


def connect_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 1 <= value <= 300:
        raise argparse.ArgumentTypeError(f"expected seconds from 1 to 300, got {text!r}")
    return value


def barrier_seconds(text: str) -> float:
    return timeout("--exit-barrier-timeout", text)


def build_parser(command: str | None = None) -> "TrainrunParser":
    """`trainrun`'s parser. Given the subcommand a command line starts with, only that subcommand's parser is
    added, which is all its parse needs: a launch imports and builds no other backend's options (nor doctor's
    imports). Without one, or with a name that is no subcommand's, every subcommand's parser is added."""
    parser = TrainrunParser(
        prog="trainrun", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="One launcher over mpirun (Horovod), torch.distributed.run and Spark barrier jobs. "
                    "Every rank sees RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT.",
        epilog=EXAMPLES)
    parser.add_argument("--version", action="version", version=f"trainrun {__version__}")
    sub = parser.add_subparsers(dest="backend", required=True, metavar="{" + ",".join(SUBCOMMANDS) + "}")
    for name, module in SUBCOMMANDS.items():
        if command not in SUBCOMMANDS or command == name:
            importlib.import_module(module).add_parser(sub)
    return parser


def add_option(parser: argparse.ArgumentParser | argparse._ArgumentGroup, *names: str, **kwargs) -> None:
    """An option under its names and, as torchrun accepts, their underscore spellings (--nproc_per_node)."""
    spellings = [*names, *("--" + name[2:].replace("-", "_") for name in names
                           if name.startswith("--") and "-" in name[2:])]
    parser.add_argument(*spellings, **kwargs)


def add_container_options(group: argparse._ArgumentGroup) -> None:
    """--container-runtime and --container-image (trainrun.containers), in a backend's Slurm options."""
    from .containers import RUNTIMES

    add_option(group, "--container-runtime", metavar="RUNTIME",
               help=f"run every task in the image: {', '.join(RUNTIMES[1:])} (default host: the nodes' own Python)")
    add_option(group, "--container-image", metavar="IMAGE",
               help="the image's name (Pyxis, Apptainer, Podman), or its file: invoke export's .sqsh (Pyxis, "
                    "Charliecloud) or a .sif (Apptainer)")


def add_job_options(parser: argparse.ArgumentParser, launcher: str) -> None:
    """The options every backend's parser takes, after its own: the plan printed, the run options (trainrun.plan
    RunOptions) and the program every rank runs (`launcher` says how the backend takes it)."""
    add_option(parser, "--dry-run", action="store_true",
               help="print the plan (argv, env, Spark conf) and start nothing")
    parser.add_argument("--json", action="store_true", help="with --dry-run: print the plan as JSON")
    parser.add_argument("--timeout", type=seconds, metavar="SECONDS",
                        help="stop the whole job after SECONDS and exit 124")
    add_option(parser, "--exit-barrier-timeout", type=barrier_seconds, default=DEFAULT_EXIT_BARRIER_TIMEOUT,
               metavar="SECONDS", help="once a rank has exited 0, stop the job (exit 124, naming the ranks that hung) "
                                       "if the others have not exited within SECONDS (default 300, as torchrun)")
    parser.add_argument("--verbose", action="store_true",
                        help="print the plan before starting the job (spark: Spark's own log lines too)")
    add_option(parser, "--timestamp-output", action="store_true",
               help="prefix each output line with the time it arrived (HH:MM:SS.mmm)")
    add_option(parser, "--no-tag-output", dest="tag_output", action="store_false",
               help="do not prefix each output line with its rank (the default with more than one rank)")
    parser.add_argument("command", nargs=argparse.REMAINDER, metavar="PROGRAM ...",
                        help=f"what every rank runs, with its arguments (a `--` before it is optional); {launcher}")


def job_from_args(args: argparse.Namespace) -> "MpiJob | TorchJob | SparkJob | SparkPoolJob | RayJob":
    """The job a backend's parsed options describe: the options every backend takes are read here, the backend's
    own by the job_from_args its parser names (args.make_job)."""
    if args.json and not args.dry_run:
        raise UsageError("--json", True, valid="together with --dry-run")
    command = args.command[1:] if args.command[:1] == ["--"] else list(args.command)
    if not command:
        raise UsageError("command", "", valid=f"a program and its arguments, e.g. trainrun {args.backend} ... train.py")
    run = RunOptions(timeout=args.timeout, exit_barrier_timeout=args.exit_barrier_timeout,
                     timestamp_output=args.timestamp_output, verbose=args.verbose)
    return args.make_job(args, command, run)


class TrainrunParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line naming the option, the value and what would be valid: it raises
    them (UsageError) where argparse would print and exit."""

    def parse_known_args(self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None):
        self._given = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> NoReturn:
        raise self.usage_error(message)

    def usage_error(self, message: str) -> UsageError:
        """The error argparse reports as `message`: an unknown option (with the closest) comes first, whatever
        argparse found (a required option is reported missing when it is only misspelled: --np for -np)."""
        given = getattr(self, "_given", [])
        if self._is_backend_parser():
            backend, options = self, given
        elif given[:1] and given[0] in self._backends():
            backend, options = self._backend_parser(given[0]), given[1:]
        else:
            return _no_backend(given, list(self._backends()))
        unknown = backend.first_unknown_option(options)
        if unknown is not None:
            return backend.unknown_option(unknown)
        return self._from_argparse(message, given)

    def _is_backend_parser(self) -> bool:
        return self._subparsers is None

    def _backends(self) -> dict[str, "TrainrunParser"]:
        """The subcommands' parsers by name: mpi, torch, spark, spark-pool, ray, doctor, selftest."""
        return next(a for a in self._actions if isinstance(a, argparse._SubParsersAction)).choices

    def _backend_parser(self, name: str) -> "TrainrunParser":
        return self._backends()[name]

    def option_strings(self) -> list[str]:
        return [name for action in self._actions for name in action.option_strings]

    def first_unknown_option(self, tokens: Sequence[str]) -> str | None:
        """The first option among `tokens` (up to the program) that this parser does not take."""
        takes_value = {name for action in self._actions if action.nargs is None and action.option_strings
                       for name in action.option_strings}
        known = self.option_strings()
        skip = False
        for token in tokens:
            if skip:
                skip = False
                continue
            if token == "--" or not token.startswith("-") or token == "-":
                return None
            name = token.partition("=")[0]
            matches = [option for option in known if option == name or (name.startswith("--") and
                                                                         option.startswith(name))]
            if not matches:
                return name
            skip = "=" not in token and any(match in takes_value for match in matches)
        return None

    def unknown_option(self, option: str) -> UsageError:
        backend = self.prog.split()[-1]
        options = [name for name in self.option_strings() if "_" not in name]  # not torchrun's underscore spellings
        suggestion = OTHER_SPELLINGS.get(backend, {}).get(option) or next(
            iter(difflib.get_close_matches(option, options, n=1)), None)
        rule = f"is not an option of {self.prog}" + (f"; did you mean {suggestion}?" if suggestion else "")
        return UsageError("option", option, rule, valid=f"the options `{self.prog} --help` lists")

    def _from_argparse(self, message: str, given: Sequence[str]) -> UsageError:
        """argparse's message, reworded: a value of the wrong type, a choice, a missing value, two exclusive options."""
        if match := _TYPE_ERROR.match(message):
            return UsageError(_first(match["names"]), ast.literal_eval(match["value"]), valid=match["valid"])
        if match := _CHOICE_ERROR.match(message):
            valid = ", ".join(choice.strip().strip("'") for choice in match["valid"].split(","))  # quoted before 3.12.8
            return UsageError(_first(match["names"]), ast.literal_eval(match["value"]), valid=valid)
        if match := _EXPECTED_ONE.match(message):
            option = _first(match["names"])
            value = _given_value(match["names"], given)
            if option in PASS_THROUGH and value is not None:
                return UsageError(option, value, "is read as an option of trainrun's own",
                                  valid=f"{option}={value} or {option}='{value} ...', with `=`")
            return UsageError(option, "", "needs a value", valid=self._usage_of(match["names"]))
        if match := _NOT_ALLOWED.match(message):
            option, other = _first(match["names"]), _first(match["other"])
            value = _given_value(match["names"], given) if self._takes_value(match["names"]) else True
            return UsageError(option, value, f"is not allowed with {other}",
                              valid=f"either {other} or {option}, not both")
        required = "the following arguments are required: "
        if message.startswith(required):
            options = message[len(required):].split(", ")
            return UsageError(_first(options[0]), "", "is required", valid=self._usage_of(options[0]))
        return UsageError("arguments", " ".join(given), message, valid="see trainrun --help")

    def _takes_value(self, names: str) -> bool:
        action = next((a for a in self._actions if "/".join(a.option_strings) == names), None)
        return action is not None and action.nargs != 0

    def _usage_of(self, names: str) -> str:
        """`-np N: the number of ranks`, for the option argparse names as `-np/--num-processes`."""
        action = next((a for a in self._actions if "/".join(a.option_strings) == names), None)
        if action is None:
            return f"{_first(names)} VALUE"
        return f"{_first(names)} {action.metavar or 'VALUE'}: {action.help}"


def _no_backend(given: Sequence[str], backends: list[str]) -> UsageError:
    first = given[0] if given else ""
    valid = ", ".join(backends) + ", e.g. trainrun mpi -np 2 python train.py"
    if first and not first.startswith("-"):
        close = difflib.get_close_matches(first, backends, n=1)
        rule = f"is not a backend; did you mean {close[0]}?" if close else "is not a backend"
        return UsageError("backend", first, rule, valid=valid)
    return UsageError("backend", "", f"is missing before {first}" if first else "is missing", valid=valid)


def _given_value(names: str, given: Sequence[str]) -> str | None:
    """The value given to the option argparse names as `-H/--hosts`: after it, or after its `=`."""
    spellings = names.split("/")
    for index, token in enumerate(given):
        name, equals, value = token.partition("=")
        if equals and name in spellings:
            return value
        if token in spellings and index + 1 < len(given):
            return given[index + 1]
    return None


def _first(names: str) -> str:
    return names.split("/")[0]
