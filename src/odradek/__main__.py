"""``python -m odradek`` runs the same command line as the ``odradek`` script."""

from odradek.cli.main import main

raise SystemExit(main())
