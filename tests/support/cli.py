"""The CLI run in-process, as a test drives it: its exit code, stdout and stderr."""

from __future__ import annotations

import io

from webhook.cli import main as cli


def run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    args = cli.parser().parse_args(argv)
    code: int = args.handler(args, out, err, io.StringIO())
    return code, out.getvalue(), err.getvalue()
