"""Sphinx configuration of the trainstack site: MyST Markdown pages and notebooks (myst-nb, never executed here:
the notebooks' outputs come from the image tier's run), the furo theme, copy buttons, and the project's own
directives (docs/_ext/trainstack_directives.py). `invoke docs` builds it with -W --keep-going -n."""
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
# This checkout's host tooling and distributions, whatever the environment has installed.
for path in (REPO_ROOT / "templates", REPO_ROOT / "launcher", REPO_ROOT, Path(__file__).parent / "_ext"):
    sys.path.insert(0, str(path))

project = "trainstack"
author = "the trainstack authors"
copyright = "the trainstack authors"

extensions = ["myst_nb", "sphinx_copybutton", "trainstack_directives"]
exclude_patterns = ["_build", "_ext"]
root_doc = "index"

myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3
# Notebook pages show the outputs stored in them (docs/notebooks/), written by a run in the image.
nb_execution_mode = "off"
nb_merge_streams = True

html_theme = "furo"
html_title = "trainstack"
html_copy_source = False
html_show_sourcelink = False
html_last_updated_fmt = None

# Copy buttons copy commands, not prompts or output: `$ ` lines of console blocks, `>>> ` lines of sessions.
copybutton_prompt_text = r"\$ |>>> |\.\.\. "
copybutton_prompt_is_regexp = True
copybutton_only_copy_prompt_lines = True
copybutton_line_continuation_character = "\\"
