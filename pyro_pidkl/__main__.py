import sys

from .paper.cli import main

sys.exit(main())
