"""Manifests as ``kubectl apply -f`` reads them: files, directories and stdin, YAML or JSON.

Several sources may be given; a directory stands for its ``*.yaml``, ``*.yml`` and ``*.json``
files (not its subdirectories), in name order, as kubectl's ``-f DIR`` without ``-R``. YAML is
parsed with libyaml (``CSafeLoader``) where PyYAML was built with it: a 6.8 MB manifest takes
about a tenth of the pure-Python loader's time. An error names the file, line and column on one
line.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import orjson
import yaml

from webhook.model.yamltext import LOADER, STDIN, yaml_error

EXTENSIONS = (".yaml", ".yml", ".json")
# The file names kustomize looks for in a directory (sigs.k8s.io/kustomize/api konfig
# RecognizedKustomizationFileNames).
KUSTOMIZATION_FILES = ("kustomization.yaml", "kustomization.yml", "Kustomization")


class InputError(Exception):
    """Input that cannot be read as Kubernetes objects."""


@dataclass(frozen=True)
class Document:
    index: int
    obj: dict[str, Any]
    source: str = ""


def files_of(sources: Sequence[str]) -> list[str]:
    """The files the sources stand for: a directory gives its manifests, sorted by name."""
    found: list[str] = []
    for source in sources:
        if source == STDIN:
            if STDIN in found:
                raise InputError("- (stdin) is given twice; it can be read only once")
            found.append(STDIN)
            continue
        path = Path(source)
        if path.is_dir() and any((path / name).is_file() for name in KUSTOMIZATION_FILES):
            raise InputError(_kustomization(source))
        if path.is_dir():
            found += [
                str(p) for p in sorted(path.iterdir()) if p.suffix in EXTENSIONS and p.is_file()
            ]
        elif not path.exists():
            raise InputError(f"{source}: no such file or directory")
        else:
            found.append(source)
    return found


def read_all(sources: Sequence[str], stdin: TextIO) -> list[Document]:
    """Every object of every source, numbered in order; none at all is an error, as kubectl
    says "no objects passed to apply"."""
    documents: list[Document] = []
    for source in files_of(sources):
        for doc in read_documents(source, stdin):
            documents.append(Document(len(documents), doc.obj, doc.source))
    if not documents:
        given = ", ".join(sources)
        raise InputError(
            f"no objects passed: {given} holds no Kubernetes object (a directory is read for "
            f"{', '.join('*' + e for e in EXTENSIONS)} files, not its subdirectories)"
        )
    return documents


def read_documents(source: str, stdin: TextIO) -> list[Document]:
    """The objects of one file (``-`` for stdin), a ``List`` giving its items."""
    try:
        text = stdin.read() if source == STDIN else Path(source).read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"{source}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise InputError(f"{source}: not UTF-8 text") from None
    try:
        loaded = list(yaml.load_all(text, Loader=LOADER))
    except yaml.YAMLError as exc:
        raise InputError(yaml_error(source, exc, text)) from None
    except RecursionError:
        raise InputError(f"{source}: not valid YAML: nested too deeply") from None
    documents: list[Document] = []
    for i, doc in enumerate(loaded):
        if doc is None:
            continue
        doc = _as_json(doc, f"{source}: document {i + 1}")
        if not isinstance(doc, dict):
            raise InputError(f"{source}: document {i + 1} is not a Kubernetes object (a mapping)")
        if Path(source).name in KUSTOMIZATION_FILES or doc.get("kind") == "Kustomization":
            raise InputError(_kustomization(str(Path(source).parent)))
        if not isinstance(doc.get("apiVersion"), str) or not isinstance(doc.get("kind"), str):
            raise InputError(f"{source}: document {i + 1} has no apiVersion and kind")
        if _is_list(doc):
            for item in _items(doc, f"{source}: document {i + 1}"):
                documents.append(Document(len(documents), item, source))
            continue
        documents.append(Document(len(documents), doc, source))
    return documents


def _kustomization(directory: str) -> str:
    return (
        f"{directory} is a kustomization, not manifests: autowrap reads what kustomize builds, "
        f"so build it first: kubectl kustomize {directory} | autowrap check - (or render -)"
    )


def _is_list(doc: dict[str, Any]) -> bool:
    """``List``, and the typed lists the API returns (``PodList``, ``JobList``), which kubectl
    unrolls alike."""
    kind = str(doc.get("kind"))
    return kind.endswith("List") and isinstance(doc.get("items"), list)


def _items(doc: dict[str, Any], where: str) -> list[dict[str, Any]]:
    """A list's objects. The API leaves apiVersion and kind out of a typed list's items
    (``PodList`` items are Pods): they are the list's, as kubectl takes them."""
    kind = str(doc["kind"])
    items: list[dict[str, Any]] = []
    for item in doc["items"]:
        if not isinstance(item, dict):
            raise InputError(f"{where} has an item that is no object")
        if kind != "List":
            item = {"apiVersion": doc["apiVersion"], "kind": kind.removesuffix("List"), **item}
        items.append(item)
    return items


def _as_json(doc: Any, where: str) -> Any:
    """The document as the API would see it: JSON values only (a date becomes its string, a
    non-string key its text, as kubectl converts them); YAML-only values are refused."""
    try:
        return orjson.loads(orjson.dumps(doc, option=orjson.OPT_NON_STR_KEYS))
    except TypeError as exc:
        raise InputError(f"{where} is not a Kubernetes object: {exc}") from None
