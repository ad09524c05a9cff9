"""``python -m kwtree``: the same as the ``kwtree`` command."""

import sys

from kwtree.cli.entry import main

sys.exit(main())
