"""Reading a mounted ConfigMap: kubelet's atomic-writer layout (``name -> ..data/name``,
``..data -> ..<timestamp>``) is read as one snapshot, even when kubelet swaps ``..data``
between two file reads; and a ConfigMap's data is picked as the mounted directory would be."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.builders import policy
from webhook.shell import policyfiles


def _version(root: Path, stamp: str, files: dict[str, str]) -> None:
    target = root / f"..{stamp}"
    target.mkdir()
    for name, text in files.items():
        (target / name).write_text(text)


def _swap(root: Path, stamp: str) -> None:
    """What kubelet does: a new ``..data_tmp`` link renamed over ``..data`` in one step."""
    tmp = root / "..data_tmp"
    tmp.symlink_to(f"..{stamp}")
    os.replace(tmp, root / "..data")


def _mounted(root: Path, files: dict[str, str], stamp: str = "2024_01_01_00_00_00.1") -> Path:
    root.mkdir()
    _version(root, stamp, files)
    _swap(root, stamp)
    for name in files:
        (root / name).symlink_to(f"..data/{name}")
    return root


def _pair(team: str) -> dict[str, str]:
    """Two files of one version of the ConfigMap."""
    return {"a.yaml": policy(f"a-{team}").names("team-a").yaml(),
            "b.yaml": policy(f"b-{team}").names("team-b").yaml()}  # fmt: skip


def test_a_mounted_configmap_is_read_through_its_data_directory_under_stable_names(
    tmp_path: Path,
) -> None:
    root = _mounted(tmp_path / "policies", _pair("one"))

    files = policyfiles.read(root)

    assert [source for source, _ in files] == [str(root / "a.yaml"), str(root / "b.yaml")]
    assert {p.name for p in policyfiles.load(root).policies} == {"a-one", "b-one"}


def test_a_swap_between_two_file_reads_does_not_mix_two_versions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _mounted(tmp_path / "policies", _pair("one"))
    _version(root, "2024_01_01_00_05_00.2", _pair("two"))
    real_read_text = Path.read_text
    reads: list[str] = []

    def read_text(self: Path, *args: object, **kwargs: object) -> str:
        text = real_read_text(self, *args, **kwargs)  # type: ignore[arg-type]
        reads.append(self.name)
        if len(reads) == 1:  # kubelet swaps right after the first file was read
            _swap(root, "2024_01_01_00_05_00.2")
        return text

    monkeypatch.setattr(Path, "read_text", read_text)
    files = policyfiles.read(root)
    monkeypatch.undo()

    texts = dict((Path(source).name, text) for source, text in files)
    assert "a-one" in texts["a.yaml"] and "b-one" in texts["b.yaml"], "one snapshot"
    second = policyfiles.read(root)
    assert "a-two" in second[0][1] and "b-two" in second[1][1], "the next reload sees the swap"
    assert policyfiles.digest(second) != policyfiles.digest(files)


def test_a_plain_directory_is_read_as_before(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(policy("a").yaml())
    (tmp_path / ".hidden.yaml").write_text("not: read")
    (tmp_path / "notes.txt").write_text("not read")

    assert [Path(s).name for s, _ in policyfiles.read(tmp_path)] == ["a.yaml"]


def test_configmap_data_is_picked_as_the_mounted_directory_is_read() -> None:
    data = {"b.yaml": "b", "a.yml": "a", "README": "r", "..data": "x", ".hidden.yaml": "h"}

    assert policyfiles.from_config_map(data) == [("a.yml", "a"), ("b.yaml", "b")]
