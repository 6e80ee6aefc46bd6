"""``python -m webhook`` is ``autowrap``."""

from webhook.cli import main

raise SystemExit(main())
