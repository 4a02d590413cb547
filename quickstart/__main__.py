"""``python -m quickstart``: see :mod:`quickstart.pipeline`."""

import sys

from quickstart.pipeline import main

sys.exit(main())
