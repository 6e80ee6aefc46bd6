"""``python -m webhook`` is ``autowrap``."""

from webhook.cli.main import main

raise SystemExit(main())
