"""The image's site hook for torch.compile (images/site-packages/trainstack_compile_cache.py): loaded by its .pth at
every start, it waits for the first import of torch._inductor (torch.compile's, not `import torch`'s), checks the
compilers' caches once and leaves the import system as it was. What it says on a real noexec /tmp:
tests/image/test_compile.py."""
import json
import subprocess
import sys
from pathlib import Path

import trainrun

SITE_PACKAGES = Path(__file__).resolve().parents[3] / "images" / "site-packages"
LAUNCHER = Path(trainrun.__file__).resolve().parents[1]
# A fresh interpreter reading the hooks' folder as a site dir (its .pth files included), with a stand-in torch first on
# its path; prints when the check ran and what it said.
PROBE = """
import contextlib, io, json, site, sys
site.addsitedir(sys.argv[1])
sys.path[:0] = sys.argv[2:]
import trainstack_compile_cache as hook
calls = []
hook.report_noexec_caches = lambda: calls.append(sorted(name for name in sys.modules if name.startswith("torch")))
result = {"first": type(sys.meta_path[0]).__name__}
import torch
result["after import torch"] = list(calls)
import torch._inductor, torch._inductor.config
result["after torch._inductor"] = list(calls)
result["still watching"] = any(type(finder).__name__ == "CompileStartCheck" for finder in sys.meta_path)
print(json.dumps(result))
"""


def test_the_check_runs_once_as_torch_compile_imports_inductor(tmp_path) -> None:
    (tmp_path / "torch" / "_inductor").mkdir(parents=True)
    (tmp_path / "torch" / "__init__.py").write_text("")
    (tmp_path / "torch" / "_inductor" / "__init__.py").write_text("")
    (tmp_path / "torch" / "_inductor" / "config.py").write_text("")
    output = subprocess.run([sys.executable, "-I", "-c", PROBE, str(SITE_PACKAGES), str(tmp_path)],
                            capture_output=True, text=True, check=True).stdout
    assert json.loads(output) == {"first": "CompileStartCheck", "after import torch": [],
                                  "after torch._inductor": [["torch"]], "still watching": False}


def test_caches_on_mounts_with_exec_say_nothing(tmp_path) -> None:
    code = "import sys; sys.path[:0] = sys.argv[1:]; import trainstack_compile_cache as hook; hook.report_noexec_caches()"
    done = subprocess.run([sys.executable, "-I", "-c", code, str(SITE_PACKAGES), str(LAUNCHER)],
                          capture_output=True, text=True, env={"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")})
    assert (done.returncode, done.stderr) == (0, "")
