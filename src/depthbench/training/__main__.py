"""``python -m depthbench.training ...`` = ``depthbench train ...`` (for ``torchrun`` and ``accelerate launch -m``)."""

import sys

from depthbench.training.command import main

sys.exit(main())
