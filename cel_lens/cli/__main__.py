"""``python -m cel_lens.cli``: the ``cel-lens`` command."""

import sys

from cel_lens.cli import main

sys.exit(main())
