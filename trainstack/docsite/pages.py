"""The documentation generated from the code: whole pages, and tables between `<!-- NAME:start -->` and
`<!-- NAME:end -->` markers inside hand-written ones (the README's versions table among them), and the commands and
notebook cells the quickstarts and guides show (trainstack.docsite.shown). `invoke docs` writes
them; `stale()` names every file whose text differs from what the code gives now, at its first differing line,
which `invoke docs --check` and a unit test fail on."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from trainrun.image_contract import MANIFEST_PATH, VENV_DIR, VENV_LAYERS_PATH

REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Generated:
    path: str  # relative to the repository
    marker: str | None  # None: the whole file is generated
    source: str  # what it is generated from
    render: Callable[[], str]


@dataclass(frozen=True)
class Stale:
    path: str
    line: int
    expected: str
    found: str

    def __str__(self) -> str:
        return (f"{self.path}:{self.line}: stale generated text (the code gives {self.expected!r}, the file has "
                f"{self.found!r}): run `invoke docs`")


def _matrix():
    from trainstack.image.matrix import load_matrix

    return load_matrix()


def _flavor_table() -> str:
    from trainstack.image.docs import flavor_table

    return flavor_table(_matrix())


def _gpu_flavor_table() -> str:
    from trainstack.image.docs import gpu_flavor_table

    return gpu_flavor_table(_matrix())


def _workflow_table() -> str:
    from trainstack.image.docs import workflow_table
    from trainstack.image.workflows import WORKFLOWS

    return workflow_table(WORKFLOWS)


def _templates_table() -> str:
    from pooltemplates.loading import packaged_templates, read_template
    from trainstack.image.docs import markdown_table

    return markdown_table(["template", "pool"], [[f"`{name}`", " ".join(read_template(name).description.split())]
                                                 for name in packaged_templates()])


def _patches_table() -> str:
    from trainstack.image.docs import patch_table

    return patch_table(_matrix())


def _components_table() -> str:
    from trainstack.image.docs import component_table

    return component_table(_matrix())


def _readme_get_the_images() -> str:
    from trainstack.image.published_images import readme_commands

    return readme_commands()


def _site_links() -> str:
    from trainstack.docsite.site_links import site_links

    return site_links(REPO_ROOT / "docs")


# The golden notes of tests/unit/images/test_release_notes.py, which the release notes page shows as its example.
RELEASE_NOTES_GOLDEN = "tests/unit/images/golden/release-notes.md"


def _release_notes_example() -> str:
    return "```markdown\n" + (REPO_ROOT / RELEASE_NOTES_GOLDEN).read_text(encoding="utf-8") + "```"


ALLREDUCE_RESULTS = "benchmarks/results/allreduce_cpu.json"


def allreduce_tables(results: Path = REPO_ROOT / ALLREDUCE_RESULTS) -> str:
    """A run of benchmarks/allreduce_cpu.py (its results file): per container, busbw in GB/s and its ratio to Gloo's
    per size, as the launcher guide shows it and the benchmark prints it."""
    import json

    from trainstack.image.docs import markdown_table

    measured = json.loads(results.read_text(encoding="utf-8"))
    command = [part for part in measured["command"] if part != "--update-results"]
    parts = [f"Measured {measured['measured_at']} in `{measured['image']['tag']}` ({measured['machine']}, load "
             f"average {measured['load_average_1m']['start']} at the start), the median of {measured['rounds']} "
             f"rounds: `{' '.join(command)}`, which ran for {round(measured['seconds'] / 60)} minutes and writes its "
             f"results to a scratch file it names (`--update-results` writes these, `{ALLREDUCE_RESULTS}`)."]
    for environment, found in measured["results"].items():
        sizes = list(next(iter(found["rows"].values()))["sizes"])
        rows = [[name, *(f"{cell['busbw_gbps']:.2f} ({cell['ratio_to_gloo']:.2f}x)" if cell["ratio_to_gloo"]
                         else f"{cell['busbw_gbps']:.2f}" if cell["busbw_gbps"] else "failed"
                         for cell in row["sizes"].values())]
                for name, row in found["rows"].items()]
        goal = found["goal"]
        parts += ["", f"**{environment}** (`{measured['environments'][environment]['docker_run_options']}`"
                      f"): busbw GB/s (ratio to Gloo); goal for `{goal['row']}`: at least "
                      f"{goal['ratio_to_gloo_at_least']}x at every size, lowest {goal['lowest_ratio']}x",
                  "", markdown_table(["configuration", *sizes], rows)]
    return "\n".join(parts)


def _matrix_page() -> str:
    from trainstack.image.docs import flavor_details, flavor_table, gpu_flavor_table, rules_table, venv_layers_table

    matrix = _matrix()
    lines = ["(matrix)=", "# The version matrix", "",
             "Every version in the images comes from `images/matrix.yaml`, checked against its schema "
             "(`images/matrix.schema.json`) and its rules before any docker call; `invoke build --set KEY=VALUE` "
             "overrides a version or setting and is checked the same way. The image's own "
             f"`{MANIFEST_PATH}` records what was really installed, checked against the matrix after "
             "every build. Building with other versions: {doc}`/contributing/building`.", "",
             "## Flavors", "", flavor_table(matrix), "", "## GPU flavors", "", gpu_flavor_table(matrix), ""]
    for flavor in matrix.flavors.values():
        lines += [f"(matrix-{flavor.name})=", f"## `{flavor.name}`", "", flavor_details(flavor), ""]
    lines += ["(matrix-venv-layers)=", "## The venv's layers", "",
              f"The image's `{VENV_DIR}` reaches the image as these layers, in this order (the matrix's `venv_layers`): "
              "the builder moves each distribution's files, as its RECORD lists them, into its layer's folder, "
              "compiles every pyc again as a checked-hash pyc and gives every file one mtime and owner "
              "(`images/scripts/venv_layers.py`), so a layer whose distributions did not change has the same digest "
              "in every build. A pull re-sends a changed layer and every layer above it. Each image lists its layers' "
              f"distributions and sizes in `{VENV_LAYERS_PATH}`.", "", venv_layers_table(matrix), ""]
    lines += ["(matrix-rules)=", "## Rules", "",
              "Each rule applies when every component under *when* is present and matches its version specifier "
              "(`*`: any version); then every component under *requires* must be present and match. A flavor or an "
              "override that breaks one is refused, naming the rule and its reason.", "", rules_table(matrix), ""]
    return "\n".join(lines)


def _trainrun_page() -> str:
    from trainrun.arguments import build_parser
    from trainstack.docsite.cli_reference import cli_reference

    return cli_reference(build_parser(), "`trainrun` command line",
                         "Every option of `trainrun` and its subcommands, from its argparse parser "
                         "(`trainrun --help`, `trainrun BACKEND --help`). How the launcher works: "
                         "{doc}`/guides/launcher`.", "trainrun")


def _pooltemplates_page() -> str:
    from pooltemplates.cli import _parser
    from trainstack.docsite.cli_reference import cli_reference

    return cli_reference(_parser(), "`pooltemplates` command line",
                         "The templates' own command line (`pooltemplates` or `python -m pooltemplates`), installed "
                         "in every image; from the repository the same commands are the `invoke template.*` tasks "
                         "({doc}`tasks`). The templates: {doc}`/guides/templates`.", "pooltemplates")


def _tasks_page() -> str:
    from trainstack.docsite.task_reference import load_collection, task_reference

    return task_reference(load_collection(REPO_ROOT / "tasks.py"),
                          "Every task of the repository's `invoke` collection (`tasks.py`) with its options, from the "
                          "tasks themselves (`invoke --list`, `invoke --help TASK`). Each reports bad input as "
                          "`error: ...` with exit code 2. Options that depend on the machine default to "
                          "`TRAINSTACK_BASE_IMAGE`, `TRAINSTACK_WHEELHOUSE` and `TRAINSTACK_CA_BUNDLE`, which "
                          "`./dev` writes to `.trainstack.env`.")


def _template_fields_page() -> str:
    from trainstack.docsite.template_reference import template_fields_table

    return "\n".join([
        "(template-fields)=", "# Template fields", "",
        "Every field a pool template's YAML and `--set KEY=VALUE` accept, from the schema "
        "(`templates/pooltemplates/schema.py`) and the rules' bounds (`validation.py`). *Targets whose output it "
        "changes* is measured: a template with every field set is rendered for each target, then again with the one "
        "field changed. `NAME` stands for any variable or Spark conf key. The rules between fields, and what each "
        "target does: {doc}`/guides/templates`.", "", template_fields_table(), ""])


def _contract_page() -> str:
    import trainrun.image_contract as contract
    from trainstack.docsite.contract_reference import constants_table, entrypoint_roles, environment_table
    from trainstack.image.dockerfile import runtime_env

    roles, about = entrypoint_roles(REPO_ROOT / "images" / "scripts" / "trainstack-entrypoint")
    return "\n".join([
        "(image-contract)=", "# The in-image contract", "",
        "What a trainstack image promises the code that runs in it and beside it: paths, ports and names (from "
        f"`{contract.__name__}`, which the Dockerfile, the image's verification, trainrun and the host tooling all "
        "read), the environment every process starts with, and the roles of its entrypoint.", "",
        "## Paths, ports and names", "", constants_table(contract), "",
        "## Environment", "",
        "Set in the image (`ENV`) for every process, and again in `/etc/profile.d/trainstack.sh` for login shells, "
        "with `PIP_CONSTRAINT` naming the constraints file (from `trainstack/image/dockerfile.py`):", "",
        environment_table(runtime_env()), "",
        "## Entrypoint roles", "",
        f"`trainstack-entrypoint` (under tini) takes these first arguments as roles: "
        f"{', '.join(f'`{role}`' for role in roles)}. {about}", ""])


def _tags_page() -> str:
    import inspect

    from trainstack.image import naming
    from trainstack.image.docs import markdown_table
    from trainstack.image.registry import CERTS_DIR, PASSWORD_ENV, USER_ENV

    def prose(function: Callable[..., object]) -> str:
        return " ".join(inspect.getdoc(function).split())

    example_labels = {naming.CREATED_LABEL: "2026-11-26T01:02:03Z",
                      naming.REVISION_LABEL: "01a534e1e3b0c7d65a2c9d8f3b7a4e5c6d7f8a9b"}
    flavors = list(_matrix().flavors.values())
    example = naming.image_tags(naming.matrix_manifest(flavors[0]), example_labels)
    kinds = [
        ["immutable", f"`{example[0]}`", "never",
         f"the content tag, the UTC date of the label `{naming.CREATED_LABEL}` as "
         f"{naming.DATE_FORMAT.replace('%Y', 'YYYY').replace('%m', 'MM').replace('%d', 'DD')}, and the first "
         f"{naming.SHORT_REVISION} hex digits of the label `{naming.REVISION_LABEL}` (the commit built)"],
        ["content", f"`{example[1]}`", "to each newer build holding these versions",
         "the image's manifest: flavor, CUDA, Python, torch and TensorFlow major.minor, Horovod's version"],
        ["flavor", f"`{example[2]}`", "to each newer build of the flavor", "the flavor's name"],
    ]
    content_tags = {flavor.name: naming.content_tag(naming.matrix_manifest(flavor)) for flavor in flavors}
    rows = [[f"`{name}`", f"`{tag}`", f"`{tag}-YYYY.MM.DD-COMMIT`"] for name, tag in content_tags.items()]
    return "\n".join([
        "(tags)=", "# Image tags", "",
        "The tags `invoke build` gives an image and `invoke push` pushes, as `trainstack/image/naming.py` makes "
        "them: the rules below are its functions' own words, the tags its functions applied to the matrix's "
        "flavors. The example is a `cpu` build of 2026-11-26 from commit `01a534e`.", "",
        markdown_table(["tag", "example", "moves", "made from"], kinds), "",
        prose(naming.image_tags), "",
        prose(naming.immutable_tag), "",
        "## Every flavor's tags", "",
        "The content tags of the versions `images/matrix.yaml` pins; a build with `--set` gets the tags of what it "
        "installed.", "",
        markdown_table(["flavor tag", "content tag", "immutable tag"], rows), "",
        "## Pushing", "",
        "`invoke push --registry HOST[:PORT][/PATH] [--flavor F]` checks, before the daemon pushes a layer, that "
        "the registry answers, that it takes the credentials, and that the image's immutable tag is absent there "
        "or names this very image (the manifest's config digest is the image ID). An immutable tag that names "
        "another image is refused in one line naming the reference, the registry's manifest and image digests, "
        "this image's ID and what to do; pushing the same image again changes nothing. A build from the same "
        "commit on the same day is another image with the same immutable tag, so it is refused too: commit, "
        "then build again. Two pushes racing for one tag are not caught (the registry's API has no conditional "
        "write). The push prints each reference, then `REGISTRY/trainstack@sha256:...`, the manifest every tag "
        "names.", "",
        "Beside the image's tags stand tags that are not images: after the tags, `invoke push` pushes the image's "
        "SBOM as an OCI artifact referring to its digest, which a registry without the referrers API lists in the "
        "index tagged `sha256-<hex of the digest>` (the OCI distribution spec's referrers tag schema), and "
        "`--sign-key` adds cosign's signature tag, `sha256-<hex of the digest>.sig`. `invoke pull` leaves the tags "
        f"matching `{naming.ATTACHMENT_TAG.pattern}` out of those it names ({{ref}}`building-push`).", "",
        f"Credentials: `${USER_ENV}` with `${PASSWORD_ENV}` when set (both), else what `docker login REGISTRY` "
        "stored (the docker config file and its credential helpers); a registry that refuses them stops the push "
        "with one line naming the user and where the credentials came from. TLS as dockerd: the system's CAs and "
        f"`{CERTS_DIR}/HOST:PORT/ca.crt`; a registry dockerd counts as insecure (any on a loopback address, or "
        "named by `--insecure-registry`) is asked over https without verifying its certificate, then over http, "
        "as dockerd does.", "",
        "## Pulling", "",
        "`docker pull REGISTRY/trainstack:IMMUTABLE-TAG`, or by the digest `invoke push` printed, gives the same "
        "image whatever was pushed later. `invoke pull --registry REGISTRY [--tag TAG | --flavor F]` asks the "
        "registry first: a tag (or digest) it does not hold is refused, naming the tags it holds.", ""])


GENERATED: tuple[Generated, ...] = (
    Generated("README.md", "matrix-table", "images/matrix.yaml", _flavor_table),
    Generated("README.md", "get-the-images", "trainstack/image/published_images.py", _readme_get_the_images),
    Generated("README.md", "site-links", "docs/index.md and the section indexes", _site_links),
    Generated("docs/guides/gpu.md", "gpu-flavors-table", "images/matrix.yaml", _gpu_flavor_table),
    Generated("docs/guides/launcher.md", "allreduce-cpu-tables", ALLREDUCE_RESULTS, allreduce_tables),
    Generated("docs/reference/workflows.md", "workflows-table", "trainstack/image/workflows.py", _workflow_table),
    Generated("docs/guides/templates.md", "templates-table", "templates/pooltemplates/pools/", _templates_table),
    Generated("docs/contributing/patches.md", "patches-table", "images/matrix.yaml", _patches_table),
    Generated("docs/contributing/building.md", "components-table", "trainstack/image/components.py",
              _components_table),
    Generated("docs/reference/release-notes.md", "release-notes-example", RELEASE_NOTES_GOLDEN, _release_notes_example),
    Generated("docs/reference/matrix.md", None, "images/matrix.yaml", _matrix_page),
    Generated("docs/reference/trainrun.md", None, "launcher/trainrun/arguments.py", _trainrun_page),
    Generated("docs/reference/pooltemplates.md", None, "templates/pooltemplates/cli.py", _pooltemplates_page),
    Generated("docs/reference/tasks.md", None, "tasks.py", _tasks_page),
    Generated("docs/reference/template-fields.md", None, "templates/pooltemplates/schema.py", _template_fields_page),
    Generated("docs/reference/image-contract.md", None, "launcher/trainrun/image_contract.py", _contract_page),
    Generated("docs/reference/tags.md", None, "trainstack/image/naming.py", _tags_page),
)

HEADER = "<!-- Generated by `invoke docs` from {source}: change that, not this page. -->\n"


def _replace_between(text: str, path: str, marker: str, content: str) -> str:
    start, end = f"<!-- {marker}:start -->", f"<!-- {marker}:end -->"
    before, found_start, rest = text.partition(start)
    _, found_end, after = rest.partition(end)
    if not found_start or not found_end:
        raise ValueError(f"{path} lacks the {start} ... {end} markers")
    return f"{before}{start}\n{content}\n{end}{after}"


def expected_texts(repo: Path = REPO_ROOT) -> dict[str, str]:
    """Each generated file's text as the code gives it now."""
    texts: dict[str, str] = {}
    for item in GENERATED:
        if item.marker is None:
            texts[item.path] = HEADER.format(source=item.source) + item.render()
        else:
            file = repo / item.path
            if item.path not in texts and not file.exists():
                raise ValueError(f"{item.path} is missing; it holds the generated {item.marker} table")
            current = texts.get(item.path) or file.read_text(encoding="utf-8")
            texts[item.path] = _replace_between(current, item.path, item.marker, item.render())
    from trainstack.docsite import shown

    for path in shown.pages(repo):
        texts[path] = shown.fill(texts.get(path) or (repo / path).read_text(encoding="utf-8"), path)
    return texts


def stale(repo: Path = REPO_ROOT) -> list[Stale]:
    """Every generated file that differs from what the code gives, at its first differing line."""
    found = []
    for path, expected in expected_texts(repo).items():
        file = repo / path
        current = file.read_text(encoding="utf-8") if file.exists() else ""
        if current != expected:
            want, have = expected.splitlines(), current.splitlines()
            line = next((n for n, (a, b) in enumerate(zip(want, have)) if a != b), min(len(want), len(have)))
            found.append(Stale(path, line + 1, want[line] if line < len(want) else "(end of file)",
                               have[line] if line < len(have) else "(end of file)"))
    return found


def write(repo: Path = REPO_ROOT) -> list[str]:
    """Writes every generated file that differs; returns their paths."""
    changed = []
    for path, expected in expected_texts(repo).items():
        file = repo / path
        if not file.exists() or file.read_text(encoding="utf-8") != expected:
            file.parent.mkdir(parents=True, exist_ok=True)
            file.write_text(expected, encoding="utf-8")
            changed.append(path)
    return changed

