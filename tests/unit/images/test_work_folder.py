"""images/scripts/work_folder.py, which the image's entrypoint runs before any command: which uid a container
started as root takes, the ACL that lets it write a folder of root's, and the one-line refusals. The image tier
runs it for real on host folders of root's and of uid 2000 (tests/image/test_work_folder_owner.py)."""
from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest
from file_modules import load_file_module

from trainrun import image_contract
from trainstack.image.matrix import REPO_ROOT

SCRIPTS = REPO_ROOT / "images" / "scripts"
work_folder = load_file_module(SCRIPTS / "work_folder.py")
Folder = work_folder.Folder
as_root = pytest.mark.skipif(os.getuid() != 0, reason="changes owners and asks as other uids: needs root")

MOUNTINFO = """\
22 1 0:21 / / rw,relatime - overlay overlay rw
31 22 8:1 /srv/my\\040data /home/trainer/work rw,relatime - ext4 /dev/sda1 rw
32 22 8:1 /srv/keys /home/trainer/.ssh ro,relatime - ext4 /dev/sda1 rw
"""


def test_the_script_names_the_contract():
    assert (work_folder.USER, work_folder.HOME, work_folder.WORK) == (
        image_contract.IMAGE_USER, image_contract.IMAGE_HOME, image_contract.NOTEBOOK_DIR)
    assert image_contract.MLFLOW_STORE == f"sqlite:///{work_folder.WORK}/{work_folder.MLFLOW_DB}"
    entrypoint = (SCRIPTS / "trainstack-entrypoint").read_text(encoding="utf-8")
    assert f"work_folder={image_contract.IMAGE_SCRIPTS_DIR}/work_folder.py\n" in entrypoint
    assert f"HOME={image_contract.IMAGE_HOME} USER={image_contract.IMAGE_USER} " in entrypoint


def test_mount_options_are_the_mount_points():
    assert work_folder.mount_options("/home/trainer/work", MOUNTINFO) == ["rw", "relatime"]
    assert work_folder.mount_options("/home/trainer/.ssh", MOUNTINFO) == ["ro", "relatime"]
    assert work_folder.mount_options("/home/trainer", MOUNTINFO) is None
    spaced = MOUNTINFO.replace("/home/trainer/work", "/home/trainer/my\\040work")
    assert work_folder.mount_options("/home/trainer/my work", spaced) == ["rw", "relatime"]
    # Mounted twice, the last mount hides the first.
    twice = MOUNTINFO + "40 31 8:1 /other /home/trainer/work ro,relatime - ext4 /dev/sda1 rw\n"
    assert work_folder.mount_options("/home/trainer/work", twice) == ["ro", "relatime"]


def mounted(uid: int, gid: int | None = None, mode: int = 0o755, read_only: bool = False) -> Folder:
    return Folder("/home/trainer/work", uid, uid if gid is None else gid, stat.S_IFDIR | mode, True, read_only)


IMAGE_FOLDER = Folder("/home/trainer/work", 1000, 1000, stat.S_IFDIR | 0o755, False, False)


@pytest.mark.parametrize("env, work, expected", [
    ({}, mounted(2000), (2000, 2000)),  # the folder's owner and group
    ({}, mounted(2000, 0), (2000, 1000)),  # a group of root's is not taken
    ({}, mounted(0), (1000, 1000)),  # root's folder: the image's user, never root
    ({}, mounted(1000), (1000, 1000)),
    ({"NB_UID": "3000"}, mounted(2000), (3000, 1000)),
    ({"NB_UID": "2000"}, mounted(2000, 2500), (2000, 2500)),
    ({"NB_UID": "3000", "NB_GID": "100"}, mounted(2000), (3000, 100)),
    ({"NB_GID": "3000"}, mounted(2000), (2000, 3000)),
    ({"NB_UID": "3000"}, IMAGE_FOLDER, (3000, 1000)),
    ({"NB_UID": "3000"}, None, (3000, 1000)),
    ({"NB_UID": ""}, mounted(2000), (2000, 2000)),  # empty is unset
    ({}, IMAGE_FOLDER, None),  # `--user root` alone: root stays root
    ({}, None, None),
])
def test_target_ids(env, work, expected):
    assert work_folder.target_ids(env, work, 1000, 1000) == expected


@pytest.mark.parametrize("env, expected", [
    ({"NB_UID": "0"}, "error: NB_UID = '0': no process of the image's user runs as root (valid: "),
    ({"NB_UID": "abc"}, "error: NB_UID = 'abc': is not a number (valid: a whole number, e.g. NB_UID=$(id -u); "),
    ({"NB_GID": "-1"}, "error: NB_GID = '-1': is not a number (valid: a whole number, e.g. NB_GID=$(id -g); "),
])
def test_bad_ids_are_refused_in_one_line(env, expected):
    with pytest.raises(work_folder.Refused) as refused:
        work_folder.target_ids(env, mounted(2000), 1000, 1000)
    assert str(refused.value).startswith(expected) and "\n" not in str(refused.value)


def test_an_acl_keeps_the_entries_and_adds_the_user():
    fresh = work_folder.acl_with_user(None, 0o750, 1000)
    assert fresh == bytes.fromhex("02000000" "0100 0700 ffffffff" "0200 0700 e8030000" "0400 0500 ffffffff"
                                  "1000 0700 ffffffff" "2000 0000 ffffffff".replace(" ", ""))
    again = work_folder.acl_with_user(fresh, 0o750, 2000)
    assert again == fresh[:20] + bytes.fromhex("0200 0700 d0070000".replace(" ", "")) + fresh[20:]
    assert work_folder.acl_with_user(again, 0o750, 2000) == again


def test_passwd_fields_are_rewritten_in_place(tmp_path):
    passwd = tmp_path / "passwd"
    passwd.write_text("root:x:0:0:root:/root:/bin/bash\ntrainer:x:1000:1000::/home/trainer:/bin/bash\n")
    inode = passwd.stat().st_ino
    work_folder.set_ids(str(passwd), "trainer", {2: 123456, 3: 100})
    assert passwd.read_text() == "root:x:0:0:root:/root:/bin/bash\ntrainer:x:123456:100::/home/trainer:/bin/bash\n"
    assert passwd.stat().st_ino == inode


@pytest.fixture
def open_tmp():
    """A folder other uids can reach (pytest's tmp_path is root's alone, mode 700)."""
    path = tempfile.mkdtemp(prefix="trainstack-work-folder-", dir="/tmp")
    os.chmod(path, 0o755)
    yield Path(path)
    shutil.rmtree(path)


def folder_at(path, read_only: bool = False) -> Folder:
    info = os.stat(path)
    return Folder(str(path), info.st_uid, info.st_gid, info.st_mode, True, read_only)


@as_root
def test_root_folder_gets_an_acl_entry_and_keeps_its_owner(open_tmp):
    work = open_tmp / "work"
    work.mkdir(mode=0o755)
    (work / "mlflow.db").write_bytes(b"")
    assert not work_folder.can_write(str(work), 1000, 1000)
    work_folder.check_as_root(folder_at(work), 1000, 1000)
    assert work_folder.can_write(str(work), 1000, 1000)
    assert work_folder.can_write(str(work / "mlflow.db"), 1000, 1000)
    assert not work_folder.can_write(str(work), 2000, 2000)
    assert (work.stat().st_uid, stat.S_IMODE(work.stat().st_mode) & 0o707) == (0, 0o705)
    written = subprocess.run(["setpriv", "--reuid=1000", "--regid=1000", "--clear-groups", "touch",
                              str(work / "made")], capture_output=True, text=True)
    assert written.returncode == 0, written.stderr
    assert (work / "made").stat().st_uid == 1000


@as_root
@pytest.mark.parametrize("owner, mode, uid, fix", [
    (2000, 0o555, 2000, "(valid: chmod u+w FOLDER on the host)"),
    (2000, 0o755, 3000, "(valid: NB_UID unset, to run as the owner, uid 2000; or chown 3000 FOLDER on the host)"),
])
def test_a_folder_the_user_cannot_write_is_refused_in_one_line(open_tmp, owner, mode, uid, fix):
    work = open_tmp / "work"
    work.mkdir()
    os.chown(work, owner, owner)
    work.chmod(mode)
    with pytest.raises(work_folder.Refused) as refused:
        work_folder.check_as_root(folder_at(work), uid, uid)
    assert str(refused.value) == (f"error: work folder = '{work}': the mounted folder belongs to uid {owner} (gid "
                                  f"{owner}, mode {mode:03o}) and trainer (uid {uid}) cannot write to it {fix}")


@as_root
def test_a_read_only_mount_is_left_alone(open_tmp):
    work = open_tmp / "work"
    work.mkdir(mode=0o755)
    work_folder.check_as_root(folder_at(work, read_only=True), 1000, 1000)
    assert not work_folder.can_write(str(work), 1000, 1000)


@as_root
def test_the_home_follows_the_user_but_not_what_is_mounted_in_it(tmp_path):
    home = tmp_path / "home"
    (home / ".local").mkdir(parents=True)
    (home / ".bashrc").write_text("")
    (home / "root-file").write_text("")
    for path in (home, home / ".local", home / ".bashrc"):
        os.chown(path, 1000, 1000)
    os.symlink("/etc/passwd", home / "link")
    os.lchown(home / "link", 1000, 1000)
    work_folder.reown_home((1000, 1000), (2000, 3000), str(home))
    owners = {path.name: (path.lstat().st_uid, path.lstat().st_gid) for path in [home, *home.iterdir()]}
    assert owners == {"home": (2000, 3000), ".local": (2000, 3000), ".bashrc": (2000, 3000), "root-file": (0, 0),
                      "link": (2000, 3000)}
    assert os.stat("/etc/passwd").st_uid == 0
