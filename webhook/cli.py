"""The ``autowrap`` command: render, check and explain offline; serve and certs in the cluster.

``render`` and ``check`` call the same ``engine.admit`` as the admission service, so what they
print is what the cluster would store. Exit codes: 0 fine, 1 rejected (one line per violation
on stderr), 2 unreadable input or policy.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import orjson
import yaml

from webhook import __version__, engine, objects, policyfiles
from webhook.policy import PolicyError, PolicySet

EXIT_OK, EXIT_REJECTED, EXIT_UNREADABLE = 0, 1, 2


class InputError(Exception):
    """Input that cannot be read as Kubernetes objects."""


@dataclass(frozen=True)
class Document:
    index: int
    obj: dict[str, Any]


def read_documents(source: str, stdin: TextIO) -> list[Document]:
    try:
        text = stdin.read() if source == "-" else Path(source).read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"{source}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise InputError(f"{source}: not UTF-8 text") from None
    try:
        loaded = list(yaml.safe_load_all(text))
    except yaml.YAMLError as exc:
        raise InputError(f"{source}: not valid YAML: {exc}") from None
    except RecursionError:
        raise InputError(f"{source}: not valid YAML: nested too deeply") from None
    documents: list[Document] = []
    for i, doc in enumerate(loaded):
        if doc is None:
            continue
        doc = _as_json(doc, f"{source}: document {i + 1}")
        if not isinstance(doc, dict):
            raise InputError(f"{source}: document {i + 1} is not a Kubernetes object (a mapping)")
        if not isinstance(doc.get("apiVersion"), str) or not isinstance(doc.get("kind"), str):
            raise InputError(f"{source}: document {i + 1} has no apiVersion and kind")
        if doc.get("kind") == "List" and isinstance(doc.get("items"), list):
            for item in doc["items"]:
                if not isinstance(item, dict):
                    raise InputError(f"{source}: document {i + 1} has an item that is no object")
                documents.append(Document(len(documents), item))
            continue
        documents.append(Document(len(documents), doc))
    return documents


def _as_json(doc: Any, where: str) -> Any:
    """The document as the API would see it: JSON values only (a date becomes its string, a
    non-string key its text, as kubectl converts them); YAML-only values are refused."""
    try:
        return orjson.loads(orjson.dumps(doc, option=orjson.OPT_NON_STR_KEYS))
    except TypeError as exc:
        raise InputError(f"{where} is not a Kubernetes object: {exc}") from None


def _describe(obj: dict[str, Any], namespace: str) -> str:
    return f"{obj.get('kind')} {namespace}/{objects.name_of(obj) or '<generated>'}"


def _outcomes(
    documents: Sequence[Document], policies: PolicySet, namespace: str | None
) -> Iterator[tuple[Document, str, engine.Outcome]]:
    for doc in documents:
        ns = objects.as_map(doc.obj.get("metadata")).get("namespace") or namespace or "default"
        context = engine.Context(policies=policies, namespace=str(ns))
        yield doc, str(ns), engine.admit(doc.obj, context)


def _report(outcome: engine.Outcome, label: str, err: TextIO, *, explain: bool) -> engine.Verdict:
    verdict = outcome.verdict()
    for line in verdict.errors:
        print(f"error: {label}: {line}", file=err)
    for line in verdict.warnings:
        print(f"warning: {label}: {line}", file=err)
    if explain:
        policy_reason = outcome.match.reason if outcome.match else "no policy matches"
        print(
            f"explain: {label}: {outcome.action.value}: {outcome.reason or policy_reason}", file=err
        )
        if outcome.match and outcome.reason and outcome.match.reason not in outcome.reason:
            print(f"explain: {label}: {policy_reason}", file=err)
    return verdict


def _dump(objs: list[dict[str, Any]], fmt: str, out: TextIO) -> None:
    if not objs:
        return
    if fmt == "json":
        value: Any = (
            objs[0] if len(objs) == 1 else {"apiVersion": "v1", "kind": "List", "items": objs}
        )
        out.write(orjson.dumps(value, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        out.write(yaml.dump_all(objs, Dumper=_Dumper, sort_keys=False, allow_unicode=True))


class _Dumper(yaml.SafeDumper):
    """Plain YAML: no anchors and aliases, which kubectl users do not expect to read."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _load_policies(path: str | None) -> PolicySet:
    return policyfiles.load(Path(path) if path else policyfiles.default_path())


def cmd_render(args: argparse.Namespace, out: TextIO, err: TextIO, stdin: TextIO) -> int:
    policies = _load_policies(args.policy)
    documents = read_documents(args.file, stdin)
    rendered: list[dict[str, Any]] = []
    code = EXIT_OK
    for doc, ns, outcome in _outcomes(documents, policies, args.namespace):
        verdict = _report(outcome, _describe(doc.obj, ns), err, explain=args.explain)
        if verdict.denied:
            code = EXIT_REJECTED
        elif outcome.result is not None:
            rendered.append(outcome.result)
    _dump(rendered, args.output, out)
    return code


def cmd_check(args: argparse.Namespace, out: TextIO, err: TextIO, stdin: TextIO) -> int:
    policies = _load_policies(args.policy)
    documents = read_documents(args.file, stdin)
    code = EXIT_OK
    for doc, ns, outcome in _outcomes(documents, policies, args.namespace):
        label = _describe(doc.obj, ns)
        verdict = _report(outcome, label, err, explain=args.explain)
        if verdict.denied:
            code = EXIT_REJECTED
            print(f"{label}: rejected ({len(verdict.errors)} violation(s))", file=out)
        elif outcome.action is engine.Action.WRAP and outcome.result is not None:
            print(
                f"{label}: would be wrapped into AppWrapper {ns}/{objects.name_of(outcome.result)}",
                file=out,
            )
        elif outcome.action is engine.Action.COMPLETE:
            print(f"{label}: valid AppWrapper", file=out)
        else:
            print(f"{label}: left unchanged ({outcome.reason})", file=out)
    return code


def cmd_explain(args: argparse.Namespace, out: TextIO, err: TextIO, stdin: TextIO) -> int:
    policies = _load_policies(args.policy)
    labels = dict(item.split("=", 1) for item in args.namespace_label)
    if args.file is None:
        match = policies.match(args.namespace or "default", labels)
        print(
            match.reason if match else "no policy covers this namespace: nothing is wrapped",
            file=out,
        )
        return EXIT_OK
    for doc, ns, _ in _outcomes(read_documents(args.file, stdin), policies, args.namespace):
        outcome = engine.admit(doc.obj, engine.Context(policies, ns, labels))
        print(f"{_describe(doc.obj, ns)}: {outcome.action.value}: {outcome.reason}", file=out)
        if outcome.match:
            print(f"  {outcome.match.reason}", file=out)
    return EXIT_OK


def cmd_serve(args: argparse.Namespace, out: TextIO, err: TextIO, stdin: TextIO) -> int:
    from webhook import server

    return server.main(args)


def cmd_certs(args: argparse.Namespace, out: TextIO, err: TextIO, stdin: TextIO) -> int:
    from webhook import certs

    return certs.main(args, out)


def _label(value: str) -> str:
    if "=" not in value:
        raise argparse.ArgumentTypeError(f"{value!r} is not key=value")
    return value


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="autowrap",
        description="Wrap Volcano Jobs and Pods into Kueue-queued AppWrappers.",
    )
    top.add_argument("--version", action="version", version=f"autowrap {__version__}")
    sub = top.add_subparsers(dest="command", required=True)

    def offline(name: str, help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.add_argument("file", metavar="FILE|-", help="YAML (multi-document) or - for stdin")
        p.add_argument(
            "--policy",
            metavar="PATH",
            help="policy file or directory (default: $AUTOWRAP_POLICY, ./policies, "
            "or the built-in opt-in policy)",
        )
        p.add_argument(
            "--namespace",
            "-n",
            metavar="NS",
            help="namespace for objects that name none (default: default)",
        )
        p.add_argument(
            "--explain", action="store_true", help="say on stderr which policy applied and why"
        )
        return p

    render = offline("render", "Print what the cluster would store for each document.")
    render.add_argument("-o", "--output", choices=("yaml", "json"), default="yaml")
    render.set_defaults(handler=cmd_render)
    check = offline("check", "Validate only: say what would happen to each document.")
    check.set_defaults(handler=cmd_check)

    explain = sub.add_parser("explain", help="Say which policy applies to a namespace or file.")
    explain.add_argument("file", nargs="?", metavar="FILE|-")
    explain.add_argument("--policy", metavar="PATH")
    explain.add_argument("--namespace", "-n", metavar="NS")
    explain.add_argument(
        "--namespace-label",
        "-l",
        action="append",
        default=[],
        type=_label,
        metavar="KEY=VALUE",
        help="a label of the namespace (repeatable)",
    )
    explain.set_defaults(handler=cmd_explain)

    serve = sub.add_parser("serve", help="Run the admission webhook (HTTPS).")
    serve.add_argument("--host", default="0.0.0.0")
    serve.add_argument("--port", type=int, default=9443)
    serve.add_argument(
        "--cert-dir",
        metavar="DIR",
        help="holds tls.crt and tls.key (default: generate a development pair)",
    )
    serve.add_argument("--policy", metavar="PATH")
    serve.add_argument(
        "--kubeconfig",
        metavar="PATH",
        help="default: in-cluster config, else the usual kubeconfig resolution",
    )
    serve.add_argument("--metrics-port", type=int, default=8080)
    serve.add_argument(
        "--no-controller",
        action="store_true",
        help="do not run the adopt-mode controller in this process (default: run it whenever "
        "the Kubernetes API is reachable; one replica is active at a time through a Lease)",
    )
    serve.add_argument(
        "--self-managed-certs",
        action="store_true",
        help="keep the serving certificate in a Secret and the webhook "
        "configurations' caBundle current",
    )
    serve.add_argument("--cert-secret", default="autowrap-serving-cert")
    serve.add_argument("--webhook-configurations", default="autowrap-mutating,autowrap-validating")
    serve.set_defaults(handler=cmd_serve)

    certs = sub.add_parser("certs", help="Write a CA and a serving certificate.")
    certs.add_argument("--service", default="autowrap")
    certs.add_argument("--namespace", default="autowrap-system")
    certs.add_argument("--out", required=True, metavar="DIR")
    certs.set_defaults(handler=cmd_certs)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        code: int = args.handler(args, sys.stdout, sys.stderr, sys.stdin)
    except (InputError, PolicyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_UNREADABLE
    except BrokenPipeError:
        return EXIT_OK
    return code


if __name__ == "__main__":
    raise SystemExit(main())
