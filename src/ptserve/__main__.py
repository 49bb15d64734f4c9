"""``python -m ptserve`` runs the server."""

import sys

from ptserve.cli import main

sys.exit(main())
