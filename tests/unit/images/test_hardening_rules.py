"""No setuid/setgid files: the Dockerfile's late step that removes the bits, and the verification that fails
a build on any such file left (its parsing, and its run as root in the image, with docker faked)."""
import json
from pathlib import Path

import pytest

from trainrun.image_contract import CONSTRAINTS_PATH, MANIFEST_PATH, SBOM_PATH
from trainstack import docker_client
from trainstack.errors import TrainstackError
from trainstack.image import build
from trainstack.image.dockerfile import render_dockerfile
from trainstack.image.manifest import SETID_FIND, setid_problems
from trainstack.image.matrix import load_matrix

STRIP_STEP = " && find / -xdev -type f -perm /6000 -exec chmod a-s {} + \\"
GOLDEN_SBOM = Path(__file__).parent / "golden" / "sbom.cdx.json"
# What `find ... -printf '%m %u:%g %p\n'` lists in Debian bookworm with openssh-client, before the step.
BOOKWORM_SETID = """4755 root:root /usr/bin/su
4755 root:root /usr/bin/mount
2755 root:shadow /usr/bin/chage
6755 root:root /usr/local/bin/both
4755 root:root /usr/lib/openssh/ssh-keysign
"""


def test_setid_files_are_problems_naming_each():
    problems = setid_problems(0, BOOKWORM_SETID)
    assert [problem.split(" (mode")[0] for problem in problems] == [
        "/usr/bin/su is setuid", "/usr/bin/mount is setuid", "/usr/bin/chage is setgid",
        "/usr/local/bin/both is setuid and setgid", "/usr/lib/openssh/ssh-keysign is setuid"]
    assert problems[2].startswith("/usr/bin/chage is setgid (mode 2755, root:shadow): the training user needs no")


def test_no_setid_files_is_no_problem():
    assert setid_problems(0, "") == []
    assert setid_problems(0, "\n") == []


def test_a_path_with_spaces_is_named_whole():
    assert setid_problems(0, "4755 root:root /opt/odd dir/tool\n")[0].startswith("/opt/odd dir/tool is setuid")


def test_an_allowed_file_needs_a_reason_and_passes():
    assert setid_problems(0, BOOKWORM_SETID, {"/usr/bin/su": "reason", "/usr/bin/mount": "reason",
                                              "/usr/bin/chage": "reason", "/usr/local/bin/both": "reason",
                                              "/usr/lib/openssh/ssh-keysign": "reason"}) == []


def test_a_listing_that_failed_is_a_problem():
    assert setid_problems(1, "find: '/x': Permission denied\n") == [
        "listing setuid/setgid files failed (find exit 1): [\"find: '/x': Permission denied\"]"]


def test_the_check_and_the_step_look_for_the_same_bits():
    assert SETID_FIND[:7] == ["find", "/", "-xdev", "-type", "f", "-perm", "/6000"]
    assert " ".join(SETID_FIND[:7]) in STRIP_STEP


@pytest.mark.parametrize("flavor", ["cpu", "gpu", "gpu-cu13"])
def test_the_bits_go_in_the_last_run_of_the_image_after_the_sbom(flavor):
    image = render_dockerfile(load_matrix().flavor(flavor)).split("# --- the image ---")[1]
    last_run = image[image.rindex("\nRUN "):]
    assert STRIP_STEP in last_run and last_run.index(STRIP_STEP) > last_run.index("write_sbom.py")
    assert image.count(STRIP_STEP) == 1
    assert image.index(f"write_sbom.py --flavor {flavor} --out {SBOM_PATH}") < image.index(STRIP_STEP)
    assert image.index(STRIP_STEP) < image.index("USER trainer")


class FakeImage:
    """Answers verify_image's commands as a cpu image would, with `setid` what its find lists."""

    def __init__(self, setid: str, sbom: str | None):
        self.setid, self.sbom = setid, sbom
        self.root_commands: list[list[str]] = []

    def run_in_image(self, client, image, command, timeout=300):
        if command == ["cat", MANIFEST_PATH]:
            return 0, json.dumps({"flavor": "cpu"})
        if command == ["cat", CONSTRAINTS_PATH]:
            return 0, "horovod==0.28.1\ntorch==2.13.0+cpu\n"
        if command == ["cat", SBOM_PATH]:
            return (0, self.sbom) if self.sbom is not None else (1, f"cat: {SBOM_PATH}: No such file or directory")
        if command == ["pip", "check"]:
            return 0, "No broken requirements found.\n"
        return 0, ""

    def run_container(self, client, create, out=None, timeout=None):
        assert create["user"] == "root"  # the training user cannot read every folder
        self.root_commands.append(create["command"])
        return 0, self.setid


@pytest.fixture
def fake_image(monkeypatch):
    def make(setid: str, sbom: str | None = GOLDEN_SBOM.read_text()) -> FakeImage:
        fake = FakeImage(setid, sbom)
        monkeypatch.setattr(docker_client, "run_in_image", fake.run_in_image)
        monkeypatch.setattr(docker_client, "run_container", fake.run_container)
        monkeypatch.setattr(build, "manifest_mismatches", lambda flavor, manifest, installed: [])
        return fake

    return make


def test_verification_fails_on_a_setid_file(fake_image):
    fake = fake_image("4755 root:root /usr/bin/su\n")
    with pytest.raises(TrainstackError, match=r"verify: the image does not match the matrix:\n  /usr/bin/su is setuid"):
        build.verify_image(None, "sha256:fake", load_matrix().flavor("cpu"))
    assert fake.root_commands == [SETID_FIND]


def test_verification_fails_without_an_sbom(fake_image):
    fake_image("", sbom=None)
    with pytest.raises(TrainstackError, match=f"the image has no SBOM at {SBOM_PATH}"):
        build.verify_image(None, "sha256:fake", load_matrix().flavor("cpu"))


def test_verification_passes_a_clean_image(fake_image):
    fake_image("")
    assert build.verify_image(None, "sha256:fake", load_matrix().flavor("cpu")) == {"flavor": "cpu"}
