"""One command that proves a GPU host without docker (a cloud VM, an HPC node): the flavor's Horovod built against the
host's torch, CUDA and NCCL, then the launcher and the examples on the GPU.

    python benchmarks/gpu_host.py [--flavor gpu-cu13] [--sdist horovod-0.28.1.tar.gz] [--work DIR]
                                  [--out FILE | --update-results]

Run it with the host's Python, the one with torch. It:
- reads the flavor's Horovod version, patches and build environment (horovod_build_env) from the component the
  Dockerfile renders (trainstack/image/horovod_source.py), and adapts them to the host: its site-packages, its nvcc
  and the NCCL wheel torch loads (the links the flavor's builder makes, cuda_build.py), the GPU's compute capability
  only, and the frameworks and MPI the host has; each adaptation is a note in the report;
- builds Horovod from the sdist (--sdist, else the sdist cache, else `pip download`) with `pip install --no-index
  --no-deps --no-build-isolation` into a venv of its own (WORK/venv) that sees the host's packages, so the host's
  environment is left as it was, and installs trainrun from launcher/ there;
- runs `horovodrun --check-build`, `trainrun doctor`, `trainrun selftest` (torch and Horovod over NCCL), the Horovod
  example under `trainrun mpi -np 1` and `trainrun mpi --gloo -np 1`, and the DDP, Lightning and DeepSpeed examples
  (`trainrun torch --nproc-per-node 1`) where those import.
Every step's failure is one line in the report, and the next step still runs. Writes the report (a scratch file, or
with --update-results benchmarks/results/gpu_host.json: benchmarks/results_file.py) and prints a table; exits 1 when
a step failed. Without a GPU it says so in one line and exits 1, writing nothing; --cpu instead runs every step with
the cpu flavor's recipe on the CPU path, to check the script itself on a machine without a GPU.

Besides the host's Python packages (torch; setuptools, packaging and pip; cloudpickle, psutil and PyYAML for Horovod
and trainrun; PyYAML, jsonschema and packaging for reading the matrix) it needs only this checkout and the Horovod
sdist: no index is asked. docs/guides/gpu.md says what to copy to a host without network.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[1]
# trainstack reads the matrix; it imports trainrun (launcher/) and pooltemplates (templates/) from the checkout;
# results_file is beside this script.
for _path in (REPO, REPO / "launcher", REPO / "templates", REPO / "benchmarks"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import results_file  # noqa: E402

RESULTS_NAME = "gpu_host.json"
EXAMPLES = REPO / "examples"
# Seconds each step may take: together well inside 8 minutes on a 16-core host (the build took 112 s there).
BUILD_TIMEOUT = 330
STEP_TIMEOUT = 150
# What the host is asked, with its own Python: torch's build, its GPUs and NCCL, and which frameworks import.
PROBE = r"""
import importlib, json, site, sys, sysconfig
facts = {"python": sys.executable, "python_version": sys.version.split()[0],
         "site_packages": [p for p in dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"],
                                                     *site.getsitepackages()])],
         "modules": {}}
try:
    import torch
    facts["torch"] = torch.__version__
    facts["torch_cuda"] = torch.version.cuda
    facts["gpus"] = [{"name": torch.cuda.get_device_name(i),
                      "capability": "%d%d" % torch.cuda.get_device_capability(i)}
                     for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []
    facts["nccl"] = ".".join(map(str, torch.cuda.nccl.version())) if facts["gpus"] else None
except Exception as exc:
    facts["torch_error"] = f"{type(exc).__name__}: {exc}"
for name in ("tensorflow", "lightning", "deepspeed", "cloudpickle", "psutil", "yaml", "jsonschema", "packaging",
             "setuptools", "pip"):
    try:
        importlib.import_module(name)
        facts["modules"][name] = None
    except Exception as exc:
        facts["modules"][name] = f"{type(exc).__name__}: {exc}".splitlines()[0]
print(json.dumps(facts))
"""


@dataclass
class HostFacts:
    """What the recipe adapts the flavor's build to: the host's Python, torch, GPUs, NCCL, nvcc and MPI."""

    python: str
    python_version: str = ""
    site_packages: list[str] = field(default_factory=list)
    torch: str | None = None
    torch_cuda: str | None = None
    torch_error: str | None = None
    gpus: list[dict[str, str]] = field(default_factory=list)
    nccl: str | None = None
    # {module: None when it imports, else its error's first line}
    modules: dict[str, str | None] = field(default_factory=dict)
    cuda_home: str | None = None
    nvcc_version: str | None = None
    # Where nvcc was looked for, in order, when none of the CUDA major torch was built with was found.
    cuda_searched: list[str] = field(default_factory=list)
    mpicxx: str | None = None
    cpus: int = 1

    def imports(self, module: str) -> bool:
        return module in self.modules and self.modules[module] is None

    @property
    def cuda_major(self) -> str | None:
        return self.torch_cuda.split(".")[0] if self.torch_cuda else None

    def site_with(self, relative: str) -> str | None:
        """The site-packages folder that holds `relative` (nvidia/nccl, torch), else None."""
        return next((folder for folder in self.site_packages if (Path(folder) / relative).exists()), None)


@dataclass
class Recipe:
    """The flavor's Horovod build as this host runs it."""

    flavor: str
    version: str
    patches: list[str]
    env: dict[str, str]
    # {link to make: what it points to}, as the flavor's builder makes them (cuda_build.CudaBuild.links)
    links: dict[str, str] = field(default_factory=dict)
    # Each way the host's build differs from the image's, one line each.
    notes: list[str] = field(default_factory=list)
    # What stops the build on this host, one line each; empty when it can run.
    problems: list[str] = field(default_factory=list)


@dataclass
class Step:
    name: str
    status: str  # passed, failed or skipped
    line: str
    seconds: float = 0.0
    command: list[str] | None = None
    details: dict[str, Any] = field(default_factory=dict)


def no_gpu_reason(facts: HostFacts) -> str | None:
    """The one line that says this is no GPU host, or None when torch sees a GPU."""
    if facts.torch is None:
        return f"no GPU check possible: torch does not import with {facts.python} ({facts.torch_error})"
    if not facts.torch_cuda:
        return f"no GPU: torch {facts.torch} at {facts.python} is a CPU build"
    if not facts.gpus:
        return f"no GPU: torch {facts.torch} (CUDA {facts.torch_cuda}) sees no CUDA device"
    return None


def choose_flavor(gpu_flavors: dict[str, str], facts: HostFacts) -> str:
    """The GPU flavor whose CUDA major is torch's ({flavor: its CUDA version})."""
    for name, cuda in gpu_flavors.items():
        if cuda.split(".")[0] == facts.cuda_major:
            return name
    raise ValueError(f"no GPU flavor has CUDA {facts.cuda_major} (torch {facts.torch}); the matrix's: "
                     + ", ".join(f"{name} (CUDA {cuda})" for name, cuda in gpu_flavors.items()))


def derive_recipe(source: Any, flavor_site_packages: str, flavor_links: dict[str, str], build_prefix: str,
                  flavor_cuda_home: str | None, facts: HostFacts, work: Path) -> Recipe:
    """The flavor's build (source: horovod_source.HorovodSource) adapted to the host; pure, for the unit tests.

    flavor_links and build_prefix are the flavor's builder links and their prefix (cuda_build), which move to
    WORK/cuda-build; flavor_site_packages, the image's site-packages, becomes the host's."""
    env = dict(source.build_env)
    recipe = Recipe(flavor=source.flavor, version=source.version, patches=list(source.patches), env=env)
    host_site = facts.site_with("nvidia/nccl") or facts.site_with("torch") or (facts.site_packages or [""])[0]
    prefix = str(work / "cuda-build")

    def moved(value: str) -> str:
        return value.replace(flavor_site_packages, host_site).replace(build_prefix, prefix)

    for name, value in env.items():
        env[name] = moved(value)
    if facts.torch is None:
        recipe.problems.append(f"torch does not import ({facts.torch_error}): Horovod's PyTorch extension needs it")
    if "HOROVOD_CUDA_HOME" in env:
        home = facts.cuda_home
        if home is None:
            recipe.problems.append(f"no nvcc of CUDA {facts.cuda_major} (torch's): looked in "
                                   + ", ".join(facts.cuda_searched or ["nothing"])
                                   + "; set CUDA_HOME, or put the cuda-toolkit wheels in WORK/cuda-build as the "
                                     "flavor's builder does")
        else:
            env["HOROVOD_CUDA_HOME"] = env["CUDA_HOME"] = home
            if flavor_cuda_home and home != moved(flavor_cuda_home):
                recipe.notes.append(f"nvcc {facts.nvcc_version} from {home} (the image's builder: "
                                    f"{flavor_cuda_home})")
        for link, target in flavor_links.items():
            if flavor_cuda_home and link.startswith(flavor_cuda_home) and home != moved(flavor_cuda_home):
                continue  # the toolkit wheel's own links; a host's toolkit has lib64 and libcudart.so already
            recipe.links[moved(link)] = moved(target)
        nccl = Path(host_site) / "nvidia" / "nccl"
        if not (nccl / "include" / "nccl.h").is_file() or not (nccl / "lib" / "libnccl.so.2").is_file():
            recipe.problems.append(f"no NCCL wheel beside torch: {nccl}/include/nccl.h and lib/libnccl.so.2 "
                                   "(pip's nvidia-nccl-cu*), which torch and the image's Horovod load")
        capabilities = sorted({gpu["capability"] for gpu in facts.gpus})
        if capabilities:
            image_list = env.get("HOROVOD_BUILD_CUDA_CC_LIST", "Horovod's default")
            env["HOROVOD_BUILD_CUDA_CC_LIST"] = ",".join(capabilities)
            recipe.notes.append(f"HOROVOD_BUILD_CUDA_CC_LIST={env['HOROVOD_BUILD_CUDA_CC_LIST']}, this host's GPUs "
                                f"only (the image's: {image_list})")
    if env.get("HOROVOD_WITH_TENSORFLOW") and not facts.imports("tensorflow"):
        del env["HOROVOD_WITH_TENSORFLOW"]
        env["HOROVOD_WITHOUT_TENSORFLOW"] = "1"
        recipe.notes.append("without TensorFlow: it does not import here (the image builds its extension)")
    if env.get("HOROVOD_WITH_MPI") and facts.mpicxx is None:
        del env["HOROVOD_WITH_MPI"]
        env["HOROVOD_WITHOUT_MPI"] = "1"
        recipe.notes.append("without MPI: no mpicxx on PATH (the image builds the MPI controller; "
                            "`trainrun mpi` without --gloo fails here)")
    env["MAKEFLAGS"] = f"-j{facts.cpus}"
    return recipe


def horovod_check_build(output: str) -> tuple[str, dict[str, list[str]]]:
    """`horovodrun --check-build`'s ticked items per section, and one line of them."""
    sections: dict[str, list[str]] = {}
    current = None
    for raw in output.splitlines():
        line = raw.strip()
        if line.endswith(":") and not line.startswith("["):
            current = line[:-1]
            sections[current] = []
        elif current and (match := re.match(r"\[(X| )\]\s+(.+)", line)) and match[1] == "X":
            sections[current].append(match[2])
    operations = sections.get("Available Tensor Operations", [])
    controllers = sections.get("Available Controllers", [])
    frameworks = sections.get("Available Frameworks", [])
    return (f"{', '.join(operations) or 'no'} operations; {', '.join(controllers) or 'no'} controllers; "
            f"{', '.join(frameworks) or 'no'} frameworks"), sections


def example_summary(output: str) -> dict[str, Any] | None:
    """The JSON summary line rank 0 of an example prints ({"workflow": ..., "accuracy": ...}), else None."""
    for line in reversed(output.splitlines()):
        start = line.find('{"workflow"')
        if start >= 0:
            try:
                return json.loads(line[start:])
            except ValueError:
                continue
    return None


def example_line(summary: dict[str, Any] | None) -> str:
    if summary is None:
        return "no summary line"
    parts = [f"{summary['workflow']}"]
    if "ranks" in summary:
        parts.append(f"{summary['ranks']} rank(s)")
    if "accuracy" in summary:
        parts.append(f"accuracy {summary['accuracy']:.3f}")
    return ", ".join(parts)


def selftest_line(report: dict[str, Any]) -> str:
    if not report.get("ok"):
        return "; ".join(report.get("failures") or ["failed"])
    sweeps = [f"{sweep['title']} ({sweep['transport']}) {len(sweep['results'])} sizes exact"
              for sweep in report.get("allreduce", []) if sweep.get("results")]
    return f"{report.get('path')} path: " + ("; ".join(sweeps) or "no sweep")


def doctor_line(report: dict[str, Any]) -> str:
    failing = [f"{check['name']}: {check['detail']}" for check in report.get("checks", [])
               if check.get("status") == "fail"]
    warned = [check["name"] for check in report.get("checks", []) if check.get("status") == "warn"]
    if failing:
        return "; ".join(failing)
    return "ready to train" + (f" (warnings: {', '.join(warned)})" if warned else "")


def last_line(output: str) -> str:
    lines = [line.strip() for line in output.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else "no output"


_EXCEPTION = re.compile(r"(?:^|[\s>:])((?:[\w.]+(?:Error|Exception)|error): .+)$")


def failure_line(code: int, output: str) -> str:
    """`exit CODE: ` and the last exception a rank raised (behind a launcher's tag), else the last line; with the
    launcher's own last line after it when that is another."""
    last = last_line(output)
    raised = [match[1].strip() for line in output.splitlines() if (match := _EXCEPTION.search(line.rstrip()))]
    if raised and raised[-1] != last:
        return f"exit {code}: {raised[-1][:200]} ({last[:150]})"
    return f"exit {code}: {last}"


def build_report(facts: HostFacts, recipe: Recipe | None, steps: list[Step], started: datetime,
                 seconds: float) -> dict[str, Any]:
    failed = [step.name for step in steps if step.status == "failed"]
    return {
        "benchmark": "the flavor's Horovod built on a GPU host, then trainrun and the examples there",
        "measured_at": started.isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {facts.cpus} cores, " + ", ".join(gpu["name"] for gpu in facts.gpus),
        "seconds": round(seconds, 1),
        "ok": not failed,
        "failed": failed,
        "host": asdict(facts),
        "recipe": asdict(recipe) if recipe else None,
        "steps": [asdict(step) for step in steps],
    }


def format_table(steps: list[Step]) -> str:
    width = max([len(step.name) for step in steps] + [4])
    rows = [f"{'step':<{width}}  {'status':<7}  {'s':>6}  result"]
    rows += [f"{step.name:<{width}}  {step.status:<7}  {step.seconds:>6.1f}  {step.line}" for step in steps]
    return "\n".join(rows)


# --- what touches the host ---

def probe_host(python: str, work: Path) -> HostFacts:
    result = subprocess.run([python, "-c", PROBE], capture_output=True, text=True, timeout=120)
    if result.returncode != 0:
        return HostFacts(python=python, torch_error=last_line(result.stderr))
    facts = HostFacts(**json.loads(result.stdout.strip().splitlines()[-1]))
    facts.cpus = os.cpu_count() or 1
    facts.mpicxx = shutil.which("mpicxx") or shutil.which("mpic++")
    find_nvcc(facts, work)
    return facts


def nvcc_release(nvcc: Path) -> str | None:
    try:
        output = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True, timeout=60).stdout
    except OSError:
        return None
    match = re.search(r"release (\d+\.\d+)", output)
    return match[1] if match else None


def find_nvcc(facts: HostFacts, work: Path) -> None:
    """The CUDA home whose nvcc is torch's CUDA major: $HOROVOD_CUDA_HOME, $CUDA_HOME, nvcc on PATH,
    /usr/local/cuda-X.Y, /usr/local/cuda, and WORK/cuda-build/nvidia/cuN (the flavor's toolkit wheels)."""
    if not facts.cuda_major:
        return
    candidates = [os.environ.get("HOROVOD_CUDA_HOME"), os.environ.get("CUDA_HOME")]
    on_path = shutil.which("nvcc")
    candidates.append(str(Path(on_path).resolve().parent.parent) if on_path else None)
    candidates += [f"/usr/local/cuda-{facts.torch_cuda}", "/usr/local/cuda"]
    candidates.append(str(work / "cuda-build" / "nvidia" / f"cu{facts.cuda_major}"))
    for home in dict.fromkeys(filter(None, candidates)):
        facts.cuda_searched.append(home)
        release = nvcc_release(Path(home) / "bin" / "nvcc") if (Path(home) / "bin" / "nvcc").exists() else None
        if release and release.split(".")[0] == facts.cuda_major:
            facts.cuda_home, facts.nvcc_version = home, release
            return


def run_step(name: str, command: list[str], env: dict[str, str], cwd: Path, timeout: float,
             judge: Callable[[int, str], tuple[bool, str, dict[str, Any]]], log: Path) -> Step:
    """Runs `command`; judge(exit code, output) gives (passed, the step's line, details). Its output goes to `log`."""
    started = time.monotonic()
    cwd.mkdir(parents=True, exist_ok=True)
    try:
        # A session of its own, so that a step past its time ends with everything it started (mpirun's ranks).
        process = subprocess.Popen(command, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True, start_new_session=True)
    except OSError as exc:
        return Step(name, "failed", f"cannot run {command[0]}: {exc}", round(time.monotonic() - started, 1), command)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        log.write_text(stdout + stderr)
        return Step(name, "failed", f"timed out after {timeout:.0f} s ({log})", round(time.monotonic() - started, 1),
                    command)
    code, output = process.returncode, stdout + stderr
    log.write_text(output)
    try:
        passed, line, details = judge(code, output)
    except Exception as exc:  # a judge that cannot read the output is that step's failure, not the script's
        passed, details = False, {}
        line = f"exit {code}; unreadable output ({type(exc).__name__}: {exc}): {last_line(output)}"
    return Step(name, "passed" if passed else "failed", line, round(time.monotonic() - started, 1), command, details)


def judge_by_exit(code: int, output: str) -> tuple[bool, str, dict[str, Any]]:
    return code == 0, last_line(output) if code == 0 else failure_line(code, output), {}


def judge_json(line_of: Callable[[dict[str, Any]], str]) -> Callable[[int, str], tuple[bool, str, dict[str, Any]]]:
    def judge(code: int, output: str) -> tuple[bool, str, dict[str, Any]]:
        start = output.find("{")
        try:
            report, _ = json.JSONDecoder().raw_decode(output[start:]) if start >= 0 else (None, 0)
        except ValueError:
            report = None
        if not isinstance(report, dict):
            return False, f"no JSON report; {failure_line(code, output)}", {}
        return code == 0 and bool(report.get("ok")), line_of(report), report
    return judge


def judge_example(code: int, output: str) -> tuple[bool, str, dict[str, Any]]:
    summary = example_summary(output)
    if code != 0 or summary is None:
        return False, failure_line(code, output), summary or {}
    return True, example_line(summary), summary


def judge_check_build(code: int, output: str) -> tuple[bool, str, dict[str, Any]]:
    line, sections = horovod_check_build(output)
    return code == 0, line if code == 0 else failure_line(code, output), sections


def make_venv(facts: HostFacts, venv: Path) -> Path:
    """A venv of its own whose Python also sees the host's site-packages (a .pth), so what is installed here leaves
    the host's environment as it was; its site-packages. Made anew each run: no Horovod of an earlier run answers
    for a build that failed."""
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([facts.python, "-m", "venv", "--without-pip", str(venv)], check=True, capture_output=True)
    site = Path(subprocess.run([str(venv / "bin" / "python"), "-c",
                                "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    # addsitedir, not bare paths: the host's own .pth files there (editable installs, setuptools') apply too.
    (site / "trainstack-host-site-packages.pth").write_text(
        f"import site; list(map(site.addsitedir, {facts.site_packages!r}))\n")
    return site


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--flavor", help="the GPU flavor whose Horovod to build (default: the one of torch's CUDA)")
    parser.add_argument("--cpu", action="store_true",
                        help="no GPU needed: the cpu flavor's recipe and every step's CPU path (checks the script)")
    parser.add_argument("--sdist", type=Path, help="Horovod's sdist (default: the sdist cache, else pip download)")
    parser.add_argument("--work", type=Path, default=Path("/tmp/trainstack-gpu-host"),
                        help="where the source, the venv, the logs and the checkpoints go")
    results_file.add_options(parser, RESULTS_NAME)
    args = parser.parse_args()
    started, clock = datetime.now(timezone.utc), time.monotonic()
    work = args.work.resolve()
    facts = probe_host(sys.executable, work)
    reason = no_gpu_reason(facts)
    if reason and not args.cpu:
        print(reason)
        return 1
    (work / "logs").mkdir(parents=True, exist_ok=True)
    steps: list[Step] = []
    recipe = None
    try:
        recipe, sdist = recipe_for_host(args.flavor or ("cpu" if args.cpu else None), args.sdist, facts, work)
        steps.append(Step("recipe", "passed" if not recipe.problems else "failed",
                          f"{recipe.flavor}: Horovod {recipe.version}, {len(recipe.patches)} patches"
                          + (f"; {'; '.join(recipe.problems)}" if recipe.problems else ""),
                          details={"sdist": str(sdist)}))
    except Exception as exc:  # the matrix or the sdist: one line, and the steps that need neither still run
        steps.append(Step("recipe", "failed", f"{type(exc).__name__}: {exc}".splitlines()[0]))
        sdist = None
    venv_site = make_venv(facts, work / "venv")
    bin_dir = work / "venv" / "bin"
    env = {**os.environ, "PATH": os.pathsep.join([str(bin_dir), str(Path(facts.python).parent),
                                                  os.environ.get("PATH", "")])}
    steps.append(build_step(recipe, sdist, facts, env, work))
    steps.append(run_step("install trainrun", [str(bin_dir / "python"), "-m", "pip", "install", "--no-index",
                                               "--no-deps", "--no-build-isolation", str(REPO / "launcher")],
                          env, work, STEP_TIMEOUT, judge_by_exit, work / "logs" / "trainrun-install.log"))
    steps.append(run_step("horovodrun --check-build", [str(bin_dir / "horovodrun"), "--check-build"], env, work,
                          STEP_TIMEOUT, judge_check_build, work / "logs" / "check-build.log"))
    trainrun = str(bin_dir / "trainrun")
    steps.append(run_step("trainrun doctor", [trainrun, "doctor", "--json"], env, work, STEP_TIMEOUT,
                          judge_json(doctor_line), work / "logs" / "doctor.log"))
    steps.append(run_step("trainrun selftest", [trainrun, "selftest", "--json"], env, work, STEP_TIMEOUT * 2,
                          judge_json(selftest_line), work / "logs" / "selftest.log"))
    checkpoints = work / "checkpoints"
    for name, launcher, script, extra, module in [
        ("horovod, trainrun mpi", ["mpi", "-np", "1", "--"], "horovod_torch_mnist.py", [], None),
        ("horovod, trainrun mpi --gloo", ["mpi", "--gloo", "-np", "1", "--"], "horovod_torch_mnist.py", [], None),
        ("ddp", ["torch", "--nproc-per-node", "1"], "ddp_torch_mnist.py", [], None),
        ("lightning", ["torch", "--nproc-per-node", "1"], "lightning_mnist.py", ["--devices", "1"], "lightning"),
        ("deepspeed zero-2", ["torch", "--nproc-per-node", "1"], "deepspeed_zero_mnist.py",
         ["--deepspeed", "--deepspeed_config", str(EXAMPLES / "deepspeed_zero2.json")], "deepspeed"),
    ]:
        if module and not facts.imports(module):
            steps.append(Step(name, "skipped", f"{module} does not import here ({facts.modules.get(module)})"))
            continue
        program = ["python", str(EXAMPLES / script)] if launcher[0] == "mpi" else [str(EXAMPLES / script)]
        slug = re.sub(r"\W+", "-", name).strip("-")
        # Each in a folder of its own under WORK (Lightning writes its logs where it runs), never in the checkout.
        steps.append(run_step(name, [trainrun, *launcher, *program, *extra, "--checkpoint-dir",
                                     str(checkpoints / slug)], env, work / "runs" / slug, STEP_TIMEOUT,
                              judge_example, work / "logs" / f"{slug}.log"))
    report = build_report(facts, recipe, steps, started, time.monotonic() - clock)
    report["venv_site_packages"] = str(venv_site)
    args.out = results_file.chosen(args, RESULTS_NAME)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(format_table(steps))
    print(f"{'passed' if report['ok'] else 'FAILED: ' + ', '.join(report['failed'])} in {report['seconds']:.0f} s; "
          f"report {args.out}, logs {work / 'logs'}")
    return 0 if report["ok"] else 1


def recipe_for_host(flavor_name: str | None, sdist_path: Path | None, facts: HostFacts,
                    work: Path) -> tuple[Recipe, Path]:
    from trainstack.image import cuda_build
    from trainstack.image.horovod_source import cached_sdist, horovod_source
    from trainstack.image.matrix import load_matrix

    matrix = load_matrix()
    gpu_flavors = {name: str(matrix.flavor(name).version("cuda")) for name in matrix.flavors
                   if matrix.flavor(name).gpu}
    flavor = matrix.flavor(flavor_name or choose_flavor(gpu_flavors, facts))
    source = horovod_source(flavor)
    build = cuda_build.cuda_build(flavor)
    recipe = derive_recipe(source, flavor.site_packages, build.links if build else {}, cuda_build.CUDA_BUILD_PREFIX,
                           build.home if build else None, facts, work)
    sdist = sdist_path or cached_sdist(source.version)
    return recipe, sdist


def build_step(recipe: Recipe | None, sdist: Path | None, facts: HostFacts, env: dict[str, str], work: Path) -> Step:
    """The sdist unpacked and patched as the Dockerfile does, the flavor's links made, then pip builds it with the
    recipe's environment and nothing from an index."""
    if recipe is None or sdist is None:
        return Step("build horovod", "failed", "no recipe (see the recipe step)")
    if recipe.problems:
        return Step("build horovod", "failed", "; ".join(recipe.problems))
    from trainstack.image.horovod_source import unpack_and_patch
    from trainstack.image.matrix import PATCHES_DIR

    started = time.monotonic()
    source_dir = work / "src"
    shutil.rmtree(source_dir, ignore_errors=True)
    try:
        tree = unpack_and_patch(sdist, [PATCHES_DIR / patch for patch in recipe.patches], source_dir)
    except Exception as exc:
        return Step("build horovod", "failed", str(exc).splitlines()[0], time.monotonic() - started)
    for link, target in recipe.links.items():
        Path(link).parent.mkdir(parents=True, exist_ok=True)
        if Path(link).is_symlink() or Path(link).exists():
            Path(link).unlink()
        Path(link).symlink_to(target)
    build_env = {**env, **recipe.env}
    if "HOROVOD_CUDA_HOME" in recipe.env:
        # Horovod takes nvcc from PATH before $HOROVOD_CUDA_HOME/bin.
        build_env["PATH"] = os.pathsep.join([f"{recipe.env['HOROVOD_CUDA_HOME']}/bin", env["PATH"]])
    step = run_step("build horovod", [str(work / "venv" / "bin" / "python"), "-m", "pip", "install", "--no-index",
                                      "--no-deps", "--no-build-isolation", "-v", str(tree)],
                    build_env, tree, BUILD_TIMEOUT, judge_by_exit, work / "logs" / "build.log")
    step.seconds = round(time.monotonic() - started, 1)
    if step.status == "passed":
        step.line = f"built in {step.seconds:.0f} s on {facts.cpus} cores"
    else:
        errors = [line.strip() for line in (work / "logs" / "build.log").read_text(errors="replace").splitlines()
                  if "error" in line.lower() and line.strip()]
        step.line = (errors[0][:300] if errors else step.line) + f" (log: {work / 'logs' / 'build.log'})"
    return step


if __name__ == "__main__":
    raise SystemExit(main())
