"""``python -m testbed.real build [component ...]`` and ``python -m testbed.real up``."""

from __future__ import annotations

import sys

from testbed.real import build


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in {"build", "up"}:
        print("usage: python -m testbed.real build [component ...] | up", file=sys.stderr)
        return 2
    if argv[0] == "build":
        try:
            build.build_all(argv[1:] or None)
        except build.BuildError as error:
            print(f"testbed.real build: {error}", file=sys.stderr)
            return 1
        return 0
    from testbed.real import launcher

    return launcher.main(argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
