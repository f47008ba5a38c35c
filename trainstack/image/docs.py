"""Tables for people: `invoke matrix` prints the version table, and the documentation's generated pages
(trainstack/docsite) hold it, the GPU flavor table and the workflow table, made from the matrix and
trainstack/image/workflows.py."""
from __future__ import annotations

import re
import shlex
from typing import Sequence

from trainrun.doctor import driver_minimum
from trainstack.image.matrix import Flavor, Matrix
from trainstack.image.naming import image_reference
from trainstack.image.published_images import GHCR_NAMESPACE, PUBLISHED_FLAVORS
from trainstack.image.workflows import Workflow

COLUMNS = ["python", "torch", "torchvision", "tensorflow", "horovod", "deepspeed", "pyspark", "java", "openmpi", "cuda",
           "cudnn", "nccl"]


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    """A Markdown (GFM) table; a `|` inside a cell is escaped."""
    def line(cells: list[str]) -> str:
        return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"

    return "\n".join([line(header), "|" + "---|" * len(header), *(line(row) for row in rows)])


def flavor_table(matrix: Matrix, gpu_only: bool = False) -> str:
    """A Markdown table: one row per flavor, one column per component ("absent" where the matrix says the flavor
    cannot hold it)."""
    flavors = [f for f in matrix.flavors.values() if f.gpu or not gpu_only]
    return markdown_table(["flavor", *COLUMNS, "base image"],
                           [[f.name, *(_cell(f, c) for c in COLUMNS), f.base_image] for f in flavors])


def _cell(flavor: Flavor, component: str) -> str:
    if flavor.version(component):
        return str(flavor.version(component))
    return "absent" if any(entry["package"] == component for entry in flavor.absent) else "-"


def _holds(flavor: Flavor) -> str:
    frameworks = [f"PyTorch {flavor.version('torch')}"]
    frameworks.append(f"TensorFlow {flavor.version('tensorflow')}" if flavor.version("tensorflow") else "no TensorFlow")
    operations = flavor.field("horovod", "gpu_operations")
    frameworks.append(f"Horovod {flavor.version('horovod')}" + (f" ({operations.upper()})" if operations else ""))
    return ", ".join(frameworks)


def _image_for_users(matrix: Matrix, flavor: str) -> str:
    """The name the users' pages give a flavor's image: the published one (what `docker pull` gives), or for a
    flavor CI does not publish the one `invoke build` tags."""
    return image_reference(matrix.image_name, flavor, GHCR_NAMESPACE if flavor in PUBLISHED_FLAVORS else None)


def gpu_flavor_table(matrix: Matrix) -> str:
    """A Markdown table: per GPU flavor what it holds and why, its CUDA stack, the oldest NVIDIA driver
    that runs it, and the line that starts it."""
    rows = []
    for flavor in (f for f in matrix.flavors.values() if f.gpu):
        cuda = flavor.version("cuda")
        stack = f"CUDA {cuda}, cuDNN {flavor.version('cudnn')}, NCCL {flavor.version('nccl')}"
        run = f"`docker run --rm -it --gpus all --shm-size 8g {_image_for_users(matrix, flavor.name)}`"
        if flavor.name not in PUBLISHED_FLAVORS:
            run += f" (not published: built here by `invoke build --flavor {flavor.name}`)"
        rows.append([flavor.name, _holds(flavor), " ".join(flavor.description.split()), stack,
                     f">= {driver_minimum(cuda)}", run])
    return markdown_table(["flavor", "holds", "why", "stack", "NVIDIA driver", "run"], rows)


def workflow_table(workflows: Sequence[Workflow]) -> str:
    """A Markdown table: each workflow users bring, and the command that runs it in the image."""
    return markdown_table(["workflow", "what users bring", "command in the image"],
                          [[w.name, w.origin, f"`{shlex.join(w.command)}`"] for w in workflows])


def rules_table(matrix: Matrix) -> str:
    """A Markdown table: each rule of the matrix, when it applies, what it requires and why."""
    def specs(specifiers: dict[str, str]) -> str:
        return ", ".join(f"`{key} {spec}`" for key, spec in specifiers.items())

    rows = [[f"`{rule.id}`", specs(rule.when), specs(rule.require), rule.reason] for rule in matrix.rules]
    return markdown_table(["rule", "when", "requires", "why"], rows)


def venv_layers_table(matrix: Matrix) -> str:
    """A Markdown table: the venv's layers in the image's order, what each holds, in which flavors, and why."""
    rows = [[f"`{layer.name}`", "every other distribution, and the venv's own files" if layer.takes_the_rest
             else ", ".join(f"`{pattern}`" for pattern in layer.distributions),
             ", ".join(flavor.name for flavor in matrix.flavors.values() if layer in flavor.venv_layers),
             layer.reason] for layer in matrix.venv_layers]
    return markdown_table(["layer", "distributions", "flavors", "why here"], rows)


def flavor_details(flavor: Flavor) -> str:
    """Markdown: a flavor's components with their settings, its pinned packages, what it prunes and what it cannot
    hold, each with the matrix's reason."""
    def shown(value: object) -> str:
        if isinstance(value, list):
            return ", ".join(f"`{item}`" for item in value)
        if isinstance(value, dict):
            return ", ".join(f"`{key}={item}`" for key, item in value.items())
        return f"`{value}`"

    def settings(entry: dict) -> str:
        return "; ".join(f"{name}: {shown(value)}" for name, value in entry.items() if name != "version")

    parts = [" ".join(flavor.description.split()), "",
             markdown_table(["component", "version", "settings"],
                            [[name, str(entry.get("version", "")), settings(entry)]
                             for name, entry in flavor.components.items()]), "",
             markdown_table(["pinned package", "version"],
                            [[name + (" (installed without its dependencies)" if name in flavor.no_deps_packages
                                      else ""), str(version)] for name, version in flavor.python_packages.items()])]
    if flavor.prune:
        parts += ["", markdown_table(["pruned from site-packages", "why"],
                                     [[f"`{entry['glob']}`", " ".join(entry["reason"].split())]
                                      for entry in flavor.prune])]
    if flavor.absent:
        parts += ["", markdown_table(["absent package", "why", "instead"],
                                     [[entry["package"], " ".join(entry["reason"].split()),
                                       " ".join(entry["instead"].split())] for entry in flavor.absent])]
    return "\n".join(parts)


def patch_table(matrix: Matrix) -> str:
    """A Markdown table: each patch in images/patches/ (Horovod's, then PySpark's; linked to its section of the
    patches page), the flavors whose builder applies it, and its upstream reference."""
    from trainstack.image.components import build_components
    from trainstack.image.matrix import PATCHED_COMPONENTS, component_patch_files

    applied = {flavor.name: {patch for component in build_components(flavor) for patch in component.patches}
               for flavor in matrix.flavors.values()}
    rows = []
    for component in PATCHED_COMPONENTS:
        for patch in component_patch_files(component):
            flavors = [name for name, patches in applied.items() if patch in patches]
            anchor = "patch-" + re.sub(r"^[a-z]+-[0-9.]+-", "", patch.removesuffix(".patch"))
            rows.append([f"[`{patch}`](#{anchor})", ", ".join(flavors) or "none",
                         matrix.patch_upstream.get(patch, "none given")])
    return markdown_table(["patch", "applied by", "upstream"], rows)


def component_table(matrix: Matrix) -> str:
    """A Markdown table: the builder's components in build order, the flavors that have each, the build-context
    files its steps copy or read, how many patches it applies in each flavor, and the venv layers that take what it
    installs."""
    from trainstack.image.components import build_components

    by_flavor = {flavor.name: build_components(flavor) for flavor in matrix.flavors.values()}
    names: list[str] = []  # every flavor's components, each after the one it follows in some flavor
    for components in by_flavor.values():
        for position, component in enumerate(components):
            if component.name not in names:
                names.insert(names.index(components[position - 1].name) + 1 if position else 0, component.name)
    rows = []
    for name in names:
        present = {flavor: component for flavor, components in by_flavor.items()
                   for component in components if component.name == name}
        files = dict.fromkeys(path for c in present.values() for path in [*c.files, *c.written_files])
        layers = dict.fromkeys(layer for c in present.values() for layer in c.layers)
        rows.append([f"`{name}`", ", ".join(present),
                     ", ".join(f"`{path}`" for path in files) or "-",
                     ", ".join(f"{flavor} {len(c.patches)}" for flavor, c in present.items() if c.patches) or "-",
                     ", ".join(f"`{layer}`" for layer in layers) or "none (builder only)"])
    return markdown_table(["component", "flavors", "copies or reads", "patches", "venv layers"], rows)
