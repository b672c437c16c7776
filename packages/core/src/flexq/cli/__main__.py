"""``python -m flexq.cli``: the ``flexq`` command."""

from __future__ import annotations

import sys

from flexq.cli.main import main

sys.exit(main())
