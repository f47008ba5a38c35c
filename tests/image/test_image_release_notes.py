"""`invoke release-notes` on the built image: against itself nothing changed, with its ID and every SBOM component
counted; a reference this engine does not hold is refused naming the image; and the manifest records its build's
patches and rules as the build context has them."""
import json
import subprocess
import sys

from trainrun.image_contract import MANIFEST_PATH, SBOM_PATH
from trainstack.image.build_context import build_record
from trainstack.image.matrix import REPO_ROOT, load_matrix


def invoke(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=300)


def test_release_notes_of_the_image_against_itself(image, in_image):
    reference = in_image.image
    components = len(json.loads(in_image.run(["cat", SBOM_PATH]))["components"])
    result = invoke("release-notes", reference, reference)
    assert result.returncode == 0, result.stderr
    notes = result.stdout
    assert notes.startswith(f"# Release notes: `{reference}` → `{reference}`\n")
    assert f"| image ID | `{image.id}` | `{image.id}` |" in notes
    assert "No version changed." in notes
    assert f"{components} components in `from`, {components} in `to`: 0 added, 0 removed, 0 changed." in notes


def test_a_reference_not_here_is_refused_naming_the_image(in_image):
    result = invoke("release-notes", "trainstack:no-such-tag", in_image.image)
    assert result.returncode == 2
    [line] = result.stderr.splitlines()
    assert line.startswith("error: --from-image = 'trainstack:no-such-tag': is not an image here (valid: ")
    assert in_image.image in line.partition("(valid: ")[2].rstrip(")").split(", ")


def test_the_manifest_records_the_patches_and_rules_of_its_build(in_image, image_flavor):
    manifest = json.loads(in_image.run(["cat", MANIFEST_PATH]))
    record = build_record(image_flavor, load_matrix().rules)
    assert {"patches": manifest.get("patches"), "rules": manifest.get("rules")} == record
