"""`python -m trainrun.rank`: see trainrun.rank.entry."""
import sys

from .entry import main

sys.exit(main(sys.argv[1:]))
