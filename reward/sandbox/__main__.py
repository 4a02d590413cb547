"""``python -m reward.sandbox --check``: the isolation report (:func:`reward.sandbox.detect.main`)."""

import sys

from reward.sandbox.detect import main

sys.exit(main())
