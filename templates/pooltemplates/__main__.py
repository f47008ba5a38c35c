"""`python -m pooltemplates render synapse-gpu-large --target synapse`: see pooltemplates.cli."""
import sys

from .cli import main

sys.exit(main())
