"""The README's offline commands work on the shipped examples, as a newcomer types them from a
checkout: every `autowrap render|check|explain|test` line of its shell blocks that names no
placeholder file and needs no cluster, and the pod table it shows is what render prints."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from webhook.cli import main as cli

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")
OFFLINE = ("render", "check", "explain", "test")
# What a reader replaces with their own (their job, their cluster).
PLACEHOLDERS = ("job.yaml", "--policy-from-cluster", "NAMESPACE")


def _blocks() -> list[str]:
    return re.findall(r"```sh\n(.*?)```", README, flags=re.S)


def _commands() -> list[str]:
    out = []
    for block in _blocks():
        for raw in block.splitlines():
            line = raw.strip().removeprefix("$ ")
            line = line.split("  #", 1)[0].strip()
            if not line.startswith("autowrap "):
                continue
            words = shlex.split(line)
            if words[1] in OFFLINE and not any(p in words for p in PLACEHOLDERS):
                out.append(line)
    return out


COMMANDS = _commands()


def test_the_readme_shows_offline_commands():
    assert any(c.startswith("autowrap check examples/") for c in COMMANDS), COMMANDS
    assert any(c.startswith("autowrap render --pods examples/") for c in COMMANDS), COMMANDS


@pytest.mark.parametrize("command", COMMANDS)
def test_each_readme_command_works_from_a_checkout(command, capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    monkeypatch.delenv("AUTOWRAP_POLICY", raising=False)
    capsys.readouterr()
    code = cli.main(shlex.split(command)[1:])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "error:" not in captured.err


def test_the_pod_table_is_what_render_prints(capsys, monkeypatch):
    (block,) = [b for b in _blocks() if "autowrap render --pods" in b]
    lines = [line.strip() for line in block.strip().splitlines()]
    command, shown = lines[0].removeprefix("$ "), lines[1:]
    monkeypatch.chdir(REPO)
    monkeypatch.delenv("AUTOWRAP_POLICY", raising=False)
    capsys.readouterr()
    assert cli.main(shlex.split(command)[1:]) == 0
    assert capsys.readouterr().out.splitlines() == shown
