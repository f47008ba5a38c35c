"""The work folder, writable whoever owns it: the image's entrypoint (images/scripts/trainstack-entrypoint) runs this
before any command, as docker-stacks' start.sh does for /home/jovyan/work.

  python -I -S work_folder.py root     started as root (`docker run --user root`): with a folder mounted at the work
                                       folder, or NB_UID/NB_GID set, the image's user takes NB_UID/NB_GID, else the
                                       mounted folder's owner (its uid and gid; root's folder keeps uid 1000); its
                                       home follows; a folder of root's that the user cannot write gets an ACL
                                       entry for that uid. Prints `UID GID`, the ids the entrypoint drops to before
                                       the command, or nothing when neither is given (root stays root, as asked).
  python -I -S work_folder.py check    started as any other user: a mounted work folder this user cannot write,
                                       or NB_UID/NB_GID that asks for another uid, is refused.

A refusal is one line on stderr naming the folder, its owner and the fix, and exit 2, before anything starts: never
a server that cannot save, nor MLflow's SQLite store retrying for minutes. A folder mounted read-only (`:ro`) is
left alone: it was meant for reading. No user process runs as root: NB_UID=0 is refused, and a root-owned folder
is written as uid 1000 (or NB_UID).

Standard library only (run with -I -S, before the venv's site hooks); the pure parts are unit-tested on the host
(tests/unit/images/test_work_folder.py).
"""
from __future__ import annotations

import os
import stat
import struct
import sys
from typing import NamedTuple

# trainrun.image_contract's IMAGE_USER, IMAGE_HOME and NOTEBOOK_DIR (a unit test holds them equal).
USER = "trainer"
HOME = "/home/trainer"
WORK = "/home/trainer/work"
# The MLflow store the examples and the `lab` role's server use in the work folder (image_contract.MLFLOW_STORE).
MLFLOW_DB = "mlflow.db"
MOUNTINFO = "/proc/self/mountinfo"
PASSWD, GROUP = "/etc/passwd", "/etc/group"
REFUSED = 2
ROOT_FIX = "docker run --user root ... (the entrypoint then runs as the folder's owner, or NB_UID/NB_GID)"
# POSIX ACLs as Linux stores them in the system.posix_acl_access attribute (linux/posix_acl_xattr.h).
ACL_XATTR, ACL_VERSION, ACL_UNDEFINED_ID = "system.posix_acl_access", 2, 0xFFFFFFFF
ACL_USER_OBJ, ACL_USER, ACL_GROUP_OBJ, ACL_GROUP, ACL_MASK, ACL_OTHER = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20


class Refused(Exception):
    """One line: what is wrong, with its fix."""


class Folder(NamedTuple):
    path: str
    uid: int
    gid: int
    mode: int
    mounted: bool  # a host folder or volume mounted there (not the image's own empty folder)
    read_only: bool  # mounted with :ro

    def owner(self) -> str:
        name = "root, " if self.uid == 0 else ""
        return f"uid {self.uid} ({name}gid {self.gid}, mode {stat.S_IMODE(self.mode):03o})"


def mount_options(path: str, mountinfo: str) -> list[str] | None:
    """The options of the mount at `path` (the last one, which hides those under it), or None when nothing is
    mounted there. mountinfo's fields: ID PARENT MAJOR:MINOR ROOT MOUNT_POINT OPTIONS ...; spaces are \\040."""
    found = None
    for line in mountinfo.splitlines():
        fields = line.split()
        if len(fields) > 5 and fields[4].replace("\\040", " ") == path:
            found = fields[5].split(",")
    return found


def folder(path: str = WORK, mountinfo_path: str = MOUNTINFO) -> Folder | None:
    """The work folder as it is in this container; None when there is none."""
    try:
        info = os.stat(path)
        with open(mountinfo_path, encoding="utf-8") as f:
            options = mount_options(path, f.read())
    except OSError:
        return None
    return Folder(path, info.st_uid, info.st_gid, info.st_mode, options is not None,
                  options is not None and "ro" in options)


def number(name: str, env: dict[str, str]) -> int | None:
    value = env.get(name)
    if value is None or value == "":
        return None
    if not value.isdigit() or int(value) > 2**32 - 2:
        raise Refused(f"error: {name} = {value!r}: is not a number (valid: a whole number, e.g. {name}=$(id -"
                      f"{'u' if name == 'NB_UID' else 'g'}); unset to take the work folder's owner)")
    return int(value)


def target_ids(env: dict[str, str], work: Folder | None, user_uid: int, user_gid: int) -> tuple[int, int] | None:
    """The uid and gid the image's user takes when the container starts as root: NB_UID and NB_GID, else the
    mounted work folder's owner and group, else the user's own. None when neither NB_UID/NB_GID nor a mounted
    folder asks for it: root runs the command, as `--user root` alone asks."""
    uid, gid = number("NB_UID", env), number("NB_GID", env)
    if uid == 0:
        raise Refused("error: NB_UID = '0': no process of the image's user runs as root (valid: the uid that owns "
                      "your files, e.g. NB_UID=$(id -u); unset to take the work folder's owner)")
    mounted = work is not None and work.mounted
    if uid is None and gid is None and not mounted:
        return None
    if uid is None:
        # A folder of root's (sudo docker, a cloud VM's root) is written by the image's user: root reads it anyway.
        uid = work.uid if mounted and work.uid != 0 else user_uid
    if gid is None:
        gid = work.gid if mounted and work.uid == uid and work.gid != 0 else user_gid
    return uid, gid


def can_write(path: str, uid: int, gid: int) -> bool:
    """Whether uid:gid may create files in the folder `path`, or write the file `path`. Asked as that user (for
    another user than this process, in a child that becomes it, with no other group), so that ACLs, read-only
    mounts and the filesystem's own rules all count."""
    wanted = os.W_OK | (os.X_OK if os.path.isdir(path) else 0)
    if (os.getuid(), os.getgid()) == (uid, gid):
        return os.access(path, wanted)
    pid = os.fork()
    if pid == 0:
        try:
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
            os._exit(0 if os.access(path, wanted) else 1)
        except BaseException:
            os._exit(1)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0


def acl_with_user(current: bytes | None, mode: int, uid: int) -> bytes:
    """An access ACL (system.posix_acl_access) that keeps every entry of `current` (or the mode's, when the file
    has none) and gives `uid` read, write and search; the mask lets that through."""
    entries: dict[tuple[int, int], int] = {}
    if current:
        version, = struct.unpack_from("<I", current)
        if version != ACL_VERSION:
            raise ValueError(f"ACL version {version}")
        for offset in range(4, len(current), 8):
            tag, perm, ident = struct.unpack_from("<HHI", current, offset)
            entries[(tag, ident)] = perm
    else:
        entries = {(ACL_USER_OBJ, ACL_UNDEFINED_ID): (mode >> 6) & 7,
                   (ACL_GROUP_OBJ, ACL_UNDEFINED_ID): (mode >> 3) & 7, (ACL_OTHER, ACL_UNDEFINED_ID): mode & 7}
    entries[(ACL_USER, uid)] = 7
    # The mask bounds every named entry and the group's: rwx lets the new entry through and takes nothing away.
    entries[(ACL_MASK, ACL_UNDEFINED_ID)] = 7
    return struct.pack("<I", ACL_VERSION) + b"".join(
        struct.pack("<HHI", tag, perm, ident) for (tag, ident), perm in sorted(entries.items()))


def grant(path: str, uid: int) -> None:
    """Gives `uid` write access to the folder or file `path` with an ACL entry (getfacl shows it, `setfacl -x
    u:UID PATH` takes it away); its owner and mode stay."""
    try:
        current = os.getxattr(path, ACL_XATTR)
    except OSError:
        current = None
    os.setxattr(path, ACL_XATTR, acl_with_user(current, os.stat(path).st_mode, uid))


def owner_of(path: str) -> str:
    info = os.stat(path)
    return Folder(path, info.st_uid, info.st_gid, info.st_mode, True, False).owner()


def refusal(work: Folder, path: str, who: str, uid: int, fix: str) -> Refused:
    """The line for a folder (or the MLflow store in it) that uid cannot write."""
    subject, kind = (f"work folder = {work.path!r}", "folder") if path == work.path else \
        (f"MLflow store = {path!r}", "file")
    return Refused(f"error: {subject}: the mounted {kind} belongs to {owner_of(path)} and {who} (uid {uid}) cannot "
                   f"write to it (valid: {fix})")


def unwritable(work: Folder, uid: int, gid: int) -> str | None:
    """The folder, or the MLflow store in it, that uid:gid cannot write; None when both are writable."""
    if not can_write(work.path, uid, gid):
        return work.path
    store = os.path.join(work.path, MLFLOW_DB)
    if os.path.exists(store) and not can_write(store, uid, gid):
        return store
    return None


def check_as_root(work: Folder | None, uid: int, gid: int) -> None:
    """Gives uid write access to a mounted folder of root's (and to the MLflow store in it) with an ACL entry;
    refuses any other folder or store that uid cannot write."""
    if work is None or not work.mounted or work.read_only:
        return
    granted: set[str] = set()
    while (path := unwritable(work, uid, gid)) is not None:
        owner = os.stat(path).st_uid
        if owner == 0 and path not in granted:
            try:
                grant(path, uid)
            except OSError as err:
                raise refusal(work, path, USER, uid, f"chown {uid} FOLDER on the host, or a folder on a filesystem "
                                                     f"with POSIX ACLs, where uid {uid} gets an entry ({err.strerror})"
                              ) from None
            granted.add(path)
            continue
        fix = ("chmod u+w FOLDER on the host" if owner == uid else
               f"NB_UID unset, to run as the owner, uid {owner}; or chown {uid} FOLDER on the host" if owner != 0 else
               f"chown {uid} FOLDER on the host")
        raise refusal(work, path, USER, uid, fix)


def check_as_user(env: dict[str, str], work: Folder | None) -> None:
    """Started as a user other than root: NB_UID/NB_GID cannot be taken, and a mounted folder must be writable."""
    uid, gid = os.getuid(), os.getgid()
    for name, asked, own in (("NB_UID", number("NB_UID", env), uid), ("NB_GID", number("NB_GID", env), gid)):
        if asked is not None and asked != own:
            raise Refused(f"error: {name} = '{asked}': the container started as uid {uid}, gid {gid}, which cannot "
                          f"become another user (valid: {ROOT_FIX})")
    if work is None or not work.mounted or work.read_only:
        return
    path = unwritable(work, uid, gid)
    if path is not None:
        who = USER if uid == user_ids()[0] else "the container's user"
        raise refusal(work, path, who, uid, f"{ROOT_FIX}; or chown {uid} FOLDER on the host")


def user_ids() -> tuple[int, int]:
    """The image user's uid and gid, from /etc/passwd (no pwd module needed: the standard library's, but read
    here as the file is edited)."""
    with open(PASSWD, encoding="utf-8") as f:
        for line in f:
            fields = line.rstrip("\n").split(":")
            if fields[0] == USER:
                return int(fields[2]), int(fields[3])
    raise Refused(f"error: the image's user {USER!r} is not in {PASSWD}")


def set_ids(path: str, name: str, ids: dict[int, int]) -> None:
    """Rewrites `name`'s numeric fields (index -> value) in a passwd-format file, in place (the same inode, as
    docker may have it open)."""
    with open(path, "r+", encoding="utf-8") as f:
        lines = f.read().splitlines(keepends=True)
        for index, line in enumerate(lines):
            fields = line.rstrip("\n").split(":")
            if fields[0] == name:
                for field, value in ids.items():
                    fields[field] = str(value)
                lines[index] = ":".join(fields) + "\n"
        f.seek(0)
        f.write("".join(lines))
        f.truncate()


def reown_home(old: tuple[int, int], new: tuple[int, int], home: str = HOME) -> None:
    """The home's files of the old uid/gid become the new one's, on the home's own filesystem only: nothing mounted
    under it (the work folder, ~/.ssh) changes owner."""
    if os.path.ismount(home):  # a home of the user's own, mounted: its files stay as they are
        return
    device = os.lstat(home).st_dev
    for root, dirs, files in os.walk(home):
        dirs[:] = [name for name in dirs if os.lstat(os.path.join(root, name)).st_dev == device
                   and not os.path.ismount(os.path.join(root, name))]
        for path in [root, *(os.path.join(root, name) for name in files)]:
            info = os.lstat(path)
            if info.st_dev != device or (info.st_uid, info.st_gid) == new:
                continue
            uid = new[0] if info.st_uid == old[0] else -1
            gid = new[1] if info.st_gid == old[1] else -1
            if (uid, gid) != (-1, -1):
                os.lchown(path, uid, gid)


def become(uid: int, gid: int) -> None:
    """The image's user takes uid and gid: /etc/passwd and /etc/group, and its home's files."""
    old = user_ids()
    if (uid, gid) == old:
        return
    if gid != old[1]:
        set_ids(GROUP, USER, {2: gid})
    set_ids(PASSWD, USER, {2: uid, 3: gid})
    reown_home(old, (uid, gid))


def main(argv: list[str]) -> int:
    env = dict(os.environ)
    try:
        work = folder()
        if argv == ["root"]:
            ids = target_ids(env, work, *user_ids())
            if ids is None:
                return 0
            become(*ids)
            check_as_root(work, *ids)
            print(*ids)
        elif argv == ["check"]:
            check_as_user(env, work)
        else:
            print("usage: work_folder.py root|check", file=sys.stderr)
            return REFUSED
    except Refused as refused:
        print(refused, file=sys.stderr)
        return REFUSED
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
