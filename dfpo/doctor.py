"""``python -m dfpo.doctor``: the node check under the name it had before it moved to
``dfpo/launch/doctor.py`` (``python -m dfpo.launch.doctor``), kept so that commands written with it still
run. The same program, with the same arguments and exit status."""

from __future__ import annotations

import sys

from dfpo.launch.doctor import main

if __name__ == "__main__":
    sys.exit(main())
