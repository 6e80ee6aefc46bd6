"""The Dockerfile builds for linux/amd64 and linux/arm64 alike (`docker buildx --platform`)."""

from __future__ import annotations

import re

import pytest

from tests.deploy.test_manifests import REPO, dockerfile_stages

ARCH_WORDS = ("amd64", "x86_64", "x86-64", "arm64", "aarch64", "armv7", "i386", "i686", "ppc64le")
# Docker Official Images with a manifest list covering linux/amd64 and linux/arm64/v8.
MULTI_ARCH_BASE = re.compile(r"^(docker\.io/(library/)?)?python:3\.\d+(\.\d+)?-slim(-\w+)?$")


def _arg_defaults() -> dict[str, str]:
    defaults: dict[str, str] = {}
    for raw in (REPO / "Dockerfile").read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if line.upper().startswith("ARG ") and "=" in line:
            name, _, value = line[4:].partition("=")
            defaults[name.strip()] = value.strip()
    return defaults


def _base_images() -> list[str]:
    defaults = _arg_defaults()
    images: list[str] = []
    for stage in dockerfile_stages():
        instruction, args = stage[0]
        assert instruction == "FROM"
        image = args.split()[0]
        match = re.fullmatch(r"\$\{?(\w+)\}?", image)
        images.append(defaults[match.group(1)] if match else image)
    return images


def test_no_stage_is_pinned_to_a_platform() -> None:
    for stage in dockerfile_stages():
        assert "--platform" not in stage[0][1], (
            "every stage runs on the target platform: the builder's wheels must match it"
        )


@pytest.mark.parametrize("image", sorted(set(_base_images()) - {"builder"}))
def test_base_image_is_published_for_amd64_and_arm64(image: str) -> None:
    assert MULTI_ARCH_BASE.match(image), image


def test_builder_and_runtime_share_one_base() -> None:
    # The virtualenv's interpreter is a symlink into the base image's Python.
    images = _base_images()
    assert len(set(images)) == 1, images


def test_no_instruction_names_an_architecture_or_downloads_a_binary() -> None:
    for stage in dockerfile_stages():
        for instruction, args in stage:
            lowered = args.lower()
            assert not any(word in lowered for word in ARCH_WORDS), (instruction, args)
            assert not any(tool in lowered for tool in ("curl ", "wget ")), args
            assert not (instruction == "ADD" and "://" in args), args
