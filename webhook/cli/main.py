"""The ``autowrap`` command: render, check, explain and test offline; serve and certs in the cluster.

``render``, ``check``, ``explain`` and ``test`` call the same ``engine.admit`` as the admission
service, once per document, so what they print is what the cluster would do. Exit codes: 0
fine, 1 rejected (or a policy test failed), 2 unreadable input, policy or test file, or a
start-up error; ``--warn-exit-code N`` makes warnings exit N where nothing is rejected.
"""

from __future__ import annotations

import argparse
import errno
import logging
import os
import ssl
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TextIO

import orjson
import yaml

from webhook import __version__
from webhook.cli import clusterview, podview, policysource, policytests, policyview
from webhook.cli.inputs import Document, InputError, read_all, read_documents
from webhook.cli.summary import Finding, Result, Summary, errors, summarize
from webhook.core import adoption, engine, reapply
from webhook.core.policy import Mode, PolicyError, PolicySet, WrapMode
from webhook.model import names, objects
from webhook.model.yamltext import LOADER, yaml_error
from webhook.shell import policyfiles

EXIT_OK, EXIT_REJECTED, EXIT_UNREADABLE = 0, 1, 2


# --- messages: one line each, the level coloured on a terminal ---------------------------------

# Default of `serve --service-name`: the Service the self-managed certificate is issued for.
SERVICE_NAME_ENV_VAR = "AUTOWRAP_SERVICE_NAME"

_COLOURS = {"error": "1;31", "warning": "33", "note": "36", "PASS": "32", "FAIL": "1;31"}


def colour_enabled(stream: TextIO) -> bool:
    """Colour only on a terminal, and never with ``NO_COLOR`` set (https://no-color.org)."""
    if os.environ.get("NO_COLOR"):
        return False
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def paint(level: str, stream: TextIO) -> str:
    code = _COLOURS.get(level)
    return f"\x1b[{code}m{level}\x1b[0m" if code and colour_enabled(stream) else level


def say(stream: TextIO, level: str, text: str) -> None:
    print(f"{paint(level, stream)}: {text}", file=stream)


# --- policies ------------------------------------------------------------------------------------


def _load_policies(args: argparse.Namespace, err: TextIO) -> PolicySet:
    """The policy set for ``--policy``, ``$AUTOWRAP_POLICY`` or ``--policy-from-cluster``, else
    the set deploy/ installs; anything the user did not name is said on stderr."""
    if args.policy_from_cluster:
        check_kubeconfig(args.kubeconfig, required=True)
        quiet_kube_client()
    return policysource.load(
        args.policy,
        from_cluster=args.policy_from_cluster,
        kubeconfig=args.kubeconfig,
        install_namespace=args.install_namespace,
        note=lambda text: say(err, "note", text),
    )


# --- one evaluation per document -------------------------------------------------------------


@dataclass(frozen=True)
class Evaluated:
    doc: Document
    namespace: str
    outcome: engine.Outcome
    summary: Summary
    # The labels its namespace was matched with (-l, or a Namespace of the input).
    namespace_labels: Mapping[str, str] = field(default_factory=dict)
    # What the cluster does around admission that autowrap's findings cannot say
    # (clusterview.hints): warnings too, but never part of a policy test's expectations.
    hints: tuple[Finding, ...] = ()

    @property
    def label(self) -> str:
        kind, name = self.doc.obj.get("kind"), shown_name(self.doc.obj)
        if clusterview.is_cluster_scoped(self.doc.obj):
            return f"{kind} {name}"
        return f"{kind} {self.namespace}/{name}"

    @property
    def warnings(self) -> tuple[Finding, ...]:
        return self.summary.warnings + self.hints

    @property
    def generate_name(self) -> str | None:
        """The object's ``generateName`` where it has no name: every name derived from it
        here is a placeholder for the one the API server generates."""
        metadata = objects.as_map(self.doc.obj.get("metadata"))
        if metadata.get("name"):
            return None
        prefix = metadata.get("generateName")
        return prefix if isinstance(prefix, str) and prefix else None


def shown_name(obj: dict[str, Any]) -> str:
    """The object's name, ``PREFIX<generated>`` for a generateName, ``<unnamed>`` else."""
    metadata = objects.as_map(obj.get("metadata"))
    name = metadata.get("name")
    if isinstance(name, str) and name:
        return name
    prefix = metadata.get("generateName")
    return f"{prefix}<generated>" if isinstance(prefix, str) and prefix else "<unnamed>"


def check_namespaces(documents: Sequence[Document], namespace: str | None) -> None:
    """``-n`` and a document's own namespace must agree, as kubectl insists."""
    if not namespace:
        return
    for doc in documents:
        own = objects.as_map(doc.obj.get("metadata")).get("namespace")
        if own and own != namespace:
            where = f"{doc.source}: " if doc.source and doc.source != "-" else ""
            raise InputError(
                f"{where}{doc.obj.get('kind')} {shown_name(doc.obj)} is in namespace {own!r}, "
                f"but --namespace says {namespace!r}; pass --namespace {own}, or drop "
                "metadata.namespace from the document (kubectl refuses the same)"
            )


def _labels(items: Sequence[str]) -> dict[str, str]:
    return dict(item.split("=", 1) for item in items)


# Why a document kubectl or the API server refuses gets no further.
REFUSED_BEFORE_ADMISSION = (
    "kubectl and the API server refuse it before any webhook sees it; autowrap judges it once "
    "these are fixed"
)


def evaluate(
    documents: Sequence[Document],
    policies: PolicySet,
    namespace: str | None,
    namespace_labels: Mapping[str, str],
) -> list[Evaluated]:
    """Each document as the cluster would take it: refused at decode, or admitted by
    ``engine.admit`` with its namespace's labels (a Namespace of the input gives them, the
    -l labels on top), and what the webhooks' selectors do around that (``hints``)."""
    defined = clusterview.namespace_labels([doc.obj for doc in documents])
    evaluated = []
    for doc in documents:
        ns = str(objects.as_map(doc.obj.get("metadata")).get("namespace") or namespace or "default")
        labels = {
            "kubernetes.io/metadata.name": ns,
            **defined.get(ns, {}),
            **namespace_labels,
        }
        refused = clusterview.refusals(doc.obj)
        if refused:
            # The policy is named all the same: it is the one that judges the object once
            # kubectl takes it (no policy, in the report, means none covers the namespace).
            outcome = engine.Outcome(
                engine.Action.PASS,
                None,
                tuple(refused),
                match=policies.match(ns, labels),
                reason=REFUSED_BEFORE_ADMISSION,
            )
            evaluated.append(Evaluated(doc, ns, outcome, summarize(outcome), labels))
            continue
        context = engine.Context(policies=policies, namespace=ns, namespace_labels=labels)
        outcome = engine.admit(doc.obj, context)
        summary = summarize(outcome)
        reason = clusterview.unchanged_reason(doc.obj, outcome)
        if reason and summary.result is Result.UNCHANGED:
            summary = replace(summary, reason=f"unchanged: {reason}")
        hints = tuple(clusterview.hints(doc.obj, outcome, labels))
        evaluated.append(Evaluated(doc, ns, outcome, summary, labels, hints))
    return evaluated


def note_namespaces(
    documents: Sequence[Document], namespace_labels: Mapping[str, str], err: TextIO
) -> None:
    """Say which Namespaces of the input gave their labels to policy matching."""
    for name, labels in clusterview.namespace_labels([doc.obj for doc in documents]).items():
        own = ", ".join(f"{k}={v}" for k, v in labels.items() if k != "kubernetes.io/metadata.name")
        given = ", ".join(f"{k}={v}" for k, v in namespace_labels.items())
        say(
            err,
            "note",
            f"Namespace {name} is in the input: its labels ({own or 'none'}) select the policy "
            f"for the objects in {name}, as they will in the cluster"
            + (f", with -l {given} on top" if given else ""),
        )


def _report(ev: Evaluated, err: TextIO, *, explain: bool) -> None:
    for finding in ev.summary.violations:
        say(err, "error", f"{ev.label}: {finding.render()}")
    for finding in ev.warnings:
        say(err, "warning", f"{ev.label}: {finding.render()}")
    if explain:
        print(f"explain: {ev.label}: {ev.summary.reason}", file=err)
        if ev.summary.policy_reason not in ev.summary.reason:
            print(f"explain: {ev.label}: {ev.summary.policy_reason}", file=err)


def _exit_code(evaluated: Sequence[Evaluated], warn_exit_code: int) -> int:
    if any(ev.summary.result is Result.REJECTED for ev in evaluated):
        return EXIT_REJECTED
    if warn_exit_code and any(ev.warnings for ev in evaluated):
        return warn_exit_code
    return EXIT_OK


# --- render ----------------------------------------------------------------------------------


def _produced(ev: Evaluated, context: engine.Context, mode: str) -> list[dict[str, Any]]:
    """What the cluster would store for one accepted document. A wrap candidate in adopt mode
    (the policy's ``mode``, unless ``--mode`` says otherwise) is stored itself, prepared, and
    the controller creates its AppWrapper: both are printed. In redirect mode only the
    AppWrapper is stored."""
    outcome = ev.outcome
    if outcome.result is None:
        return []
    if outcome.action is not engine.Action.WRAP or outcome.match is None:
        return [reapply.for_apply(outcome.result)]
    chosen = Mode(mode) if mode != "policy" else outcome.match.policy.spec.mode
    if chosen is Mode.REDIRECT:
        return [reapply.for_apply(outcome.result)]
    here = replace(context, namespace=ev.namespace, namespace_labels=ev.namespace_labels)
    return adoption.preview(ev.doc.obj, outcome, here)


def _adopting(appwrapper: dict[str, Any]) -> bool:
    return names.ADOPTED_LABEL in objects.labels_of(appwrapper)


def cmd_render(args: argparse.Namespace, out: TextIO, err: TextIO, stdin: TextIO) -> int:
    documents = read_all(args.files, stdin)
    check_namespaces(documents, args.namespace)
    policies = _load_policies(args, err)
    note_namespaces(documents, _labels(args.namespace_label), err)
    evaluated = evaluate(documents, policies, args.namespace, _labels(args.namespace_label))
    for ev in evaluated:
        _report(ev, err, explain=args.explain)
    rejected = [ev for ev in evaluated if ev.summary.result is Result.REJECTED]
    accepted = [ev for ev in evaluated if ev.summary.result is not Result.REJECTED]
    if rejected and accepted and not args.partial:
        say(
            err,
            "note",
            f"nothing printed: {len(rejected)} of {len(evaluated)} documents are rejected, and "
            "applying the rest alone would create half of what the file describes; fix them, "
            "or pass --partial to print the accepted documents",
        )
        accepted = []
    context = engine.Context(policies=policies, namespace_labels=_labels(args.namespace_label))
    per_doc = [(ev, _produced(ev, context, args.mode)) for ev in accepted]
    produced = [obj for _, objs in per_doc for obj in objs]
    if any(o.get("kind") == "AppWrapper" and _adopting(o) for o in produced) and not args.pods:
        say(
            err,
            "note",
            "adopt mode: the AppWrapper shown is the one autowrap's controller creates once the "
            "object exists; submit your own file (kubectl apply -f FILE), not this output",
        )
    if args.pods:
        # The pods come from the stored object in adopt mode, not from its AppWrapper's copy.
        running = [
            (obj, ev.generate_name)
            for ev, objs in per_doc
            for obj in objs
            if obj.get("kind") != "AppWrapper" or not _adopting(obj)
        ]
        _print_pods(_pod_tables(running, args.namespace or "default"), args.output, out)
    else:
        _dump(produced, args.output, out)
    return _exit_code(evaluated, args.warn_exit_code)


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


# libyaml's emitter where PyYAML has it: the pure-Python one takes most of a large render.
_DUMPER_BASE: type[yaml.SafeDumper] = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


class _Dumper(_DUMPER_BASE):  # type: ignore[valid-type,misc]
    """Plain YAML: no anchors and aliases, which kubectl users do not expect to read."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


POD_COLUMNS = ("POD", "TASK", "NODE_RANK", "MASTER", "NNODES", "NPROC", "WORLD_SIZE", "GATED")


@dataclass(frozen=True)
class PodTable:
    workload: str
    rows: list[podview.PodRow]
    # The object's generateName where its name (and so its pods' names and MASTER_ADDR) was
    # made up here: the API server generates the real one.
    generate_name: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "workload": self.workload,
            "placeholderName": self.generate_name is not None,
            **({"generateName": self.generate_name} if self.generate_name else {}),
            "pods": [
                {
                    "name": r.pod,
                    "task": r.task,
                    "nodeRank": r.node_rank,
                    "masterAddr": r.master_addr,
                    "masterPort": r.master_port,
                    "nnodes": r.nnodes,
                    "nprocPerNode": r.nproc,
                    "worldSize": r.world_size,
                    "schedulingGates": list(r.gates),
                    "expandedEnv": dict(r.expanded),
                    "notes": list(r.notes),
                }
                for r in self.rows
            ],
        }


def _pod_tables(
    produced: Sequence[tuple[dict[str, Any], str | None]], namespace: str
) -> list[PodTable]:
    """One table per workload: the pods the cluster will run and what each one sees."""
    by_workload: dict[str, PodTable] = {}
    for obj, generate_name in produced:
        for row in podview.pods(obj, namespace):
            table = by_workload.setdefault(row.workload, PodTable(row.workload, [], generate_name))
            table.rows.append(row)
    return list(by_workload.values())


def _print_pods(tables: Sequence[PodTable], fmt: str, out: TextIO) -> None:
    if fmt == "json":
        report = {"workloads": [t.as_json() for t in tables]}
        out.write(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode() + "\n")
        return
    for n, t in enumerate(tables):
        if n:
            print(file=out)
        print(t.workload, file=out)
        if t.generate_name:
            print(
                f"  (placeholder names: the object has generateName {t.generate_name!r}; the API "
                "server picks the real name, and the pods' names and MASTER_ADDR follow it)",
                file=out,
            )
        table = [POD_COLUMNS] + [
            (
                r.pod,
                r.task,
                r.node_rank,
                r.master,
                r.nnodes,
                r.nproc,
                r.world_size,
                f"yes ({', '.join(r.gates)})" if r.gates else "no",
            )
            for r in t.rows
        ]
        widths = [max(len(line[i]) for line in table) for i in range(len(POD_COLUMNS))]
        for line in table:
            print(
                "  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip(), file=out
            )
        for r in t.rows:
            for name, value in r.expanded:
                print(f"  {r.pod}: {name}={value}", file=out)
            for note in r.notes:
                print(f"  {r.pod}: {note}", file=out)


# --- check -----------------------------------------------------------------------------------


def cmd_check(args: argparse.Namespace, out: TextIO, err: TextIO, stdin: TextIO) -> int:
    documents = read_all(args.files, stdin)
    check_namespaces(documents, args.namespace)
    policies = _load_policies(args, err)
    note_namespaces(documents, _labels(args.namespace_label), err)
    evaluated = evaluate(documents, policies, args.namespace, _labels(args.namespace_label))
    if args.output == "json":
        report = {"documents": [_check_json(ev) for ev in evaluated]}
        out.write(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode() + "\n")
        return _exit_code(evaluated, args.warn_exit_code)
    for ev in evaluated:
        _report(ev, err, explain=args.explain)
        line = _check_line(ev.summary)
        if ev.generate_name and ev.summary.result is Result.WRAPPED:
            line += " (a placeholder name: the API server generates the object's name)"
        print(f"{ev.label}: {line}", file=out)
    return _exit_code(evaluated, args.warn_exit_code)


def _check_line(s: Summary) -> str:
    if s.result is Result.REJECTED and s.reason.endswith(REFUSED_BEFORE_ADMISSION):
        return f"rejected ({errors(len(s.violations))}; {REFUSED_BEFORE_ADMISSION})"
    if s.result is Result.REJECTED:
        return f"rejected ({errors(len(s.violations))})"
    if s.result is Result.WRAPPED:
        return f"would be wrapped into AppWrapper {s.appwrapper}"
    if s.result is Result.COMPLETED:
        return "valid AppWrapper"
    return f"left unchanged ({s.reason.removeprefix('unchanged: ')})"


def _check_json(ev: Evaluated) -> dict[str, Any]:
    obj = ev.doc.obj
    return {
        "index": ev.doc.index,
        "apiVersion": obj.get("apiVersion"),
        "kind": obj.get("kind"),
        "namespace": None if clusterview.is_cluster_scoped(obj) else ev.namespace,
        "name": objects.name_of(obj) or None,
        **ev.summary.as_json(),
        "warnings": [f.as_json() for f in ev.warnings],
    }


# --- explain ---------------------------------------------------------------------------------


def cmd_explain(args: argparse.Namespace, out: TextIO, err: TextIO, stdin: TextIO) -> int:
    documents = read_all(args.files, stdin) if args.files else None
    if documents is not None:
        check_namespaces(documents, args.namespace)
    policies = _load_policies(args, err)
    labels = _labels(args.namespace_label)
    if documents is None:
        namespace = args.namespace or "default"
        match = policies.match(namespace, labels)
        if match is None:
            print("no policy covers this namespace: nothing is wrapped", file=out)
            return EXIT_OK
        print(match.reason, file=out)
        for line in policyview.lines(match):
            print(line, file=out)
        if match.policy.spec.wrap is WrapMode.ALWAYS:
            print(clusterview.always_needs_label(match.policy.name, namespace, labels), file=out)
        return EXIT_OK
    note_namespaces(documents, labels, err)
    evaluated = evaluate(documents, policies, args.namespace, labels)
    for ev in evaluated:
        print(f"{ev.label}: {ev.summary.reason}", file=out)
        for finding in ev.summary.violations:
            print(f"  {paint('error', out)}: {finding.render()}", file=out)
        for finding in ev.warnings:
            print(f"  {paint('warning', out)}: {finding.render()}", file=out)
        if ev.summary.policy_reason not in ev.summary.reason:
            print(f"  {ev.summary.policy_reason}", file=out)
        if ev.outcome.match is not None:
            print(
                f"  {policyview.mode_line(ev.outcome.match)} (autowrap explain -n "
                f"{ev.namespace} lists every value and its policy)",
                file=out,
            )
    return _exit_code(evaluated, 0)


# --- test ------------------------------------------------------------------------------------


def _test_files(path: Path) -> list[Path]:
    if path.is_dir():
        found = sorted(path.rglob(policytests.TEST_FILE))
        if not found:
            raise InputError(f"{path}: no {policytests.TEST_FILE} under this directory")
        return found
    if not path.exists():
        raise InputError(f"{path}: no such file or directory")
    return [path]


def cmd_test(args: argparse.Namespace, out: TextIO, err: TextIO, stdin: TextIO) -> int:
    passed = failed = 0
    for test_path in _test_files(Path(args.path)):
        try:
            text = test_path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise InputError(f"{test_path}: cannot read: {exc}") from None
        suite = policytests.parse(text, source=str(test_path))
        base = test_path.parent
        policies = policyfiles.load(base / suite.policies)
        for case in suite.cases:
            documents = read_documents(str(base / case.manifest), stdin)
            if len(documents) != len(case.expect):
                raise InputError(
                    f"{test_path}: case {case.name!r}: {case.manifest} has {len(documents)} "
                    f"document(s) but expect lists {len(case.expect)}; give one per document"
                )
            evaluated = evaluate(documents, policies, case.namespace, case.namespace_labels)
            for ev, expected in zip(evaluated, case.expect, strict=True):
                problems = policytests.compare(expected, ev.doc.obj, ev.summary, ev.outcome.result)
                where = f"{suite.name} / {case.name} ({ev.label})"
                if problems:
                    failed += 1
                    print(f"{paint('FAIL', out)}  {where}", file=out)
                    for problem in problems:
                        print(f"        {problem}", file=out)
                else:
                    passed += 1
                    if args.verbose:
                        print(f"{paint('PASS', out)}  {where}", file=out)
                # Not the outcome a case expects, but what the cluster will do besides: said
                # under the case, whether it passed or not.
                for hint in ev.hints:
                    print(f"{paint('note', out)}  {where}: {hint.render()}", file=out)
    print(f"{passed} passed, {failed} failed", file=out)
    return EXIT_REJECTED if failed else EXIT_OK


# --- in the cluster --------------------------------------------------------------------------


# The Kubernetes client logs "Config not found: PATH" as a warning before it raises; the error
# autowrap reports says what is wrong once, on one line.
KUBE_CLIENT_LOGGERS = ("kubernetes.config.kube_config", "kubernetes.aio.config.kube_config")
SERVICE_ACCOUNT_TOKEN = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")


def quiet_kube_client() -> None:
    for name in KUBE_CLIENT_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)


def in_cluster() -> bool:
    """Whether the client's in-cluster configuration applies (it is tried first)."""
    return (
        bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
        and bool(os.environ.get("KUBERNETES_SERVICE_PORT"))
        and SERVICE_ACCOUNT_TOKEN.is_file()
    )


def check_kubeconfig(path: str | None, *, required: bool) -> None:
    """A kubeconfig that is named but missing, or that is not YAML, is one line here rather
    than the client's traceback; ``required`` (``status``) also wants one to exist."""
    if path:
        if not Path(path).expanduser().is_file():
            raise InputError(f"{path}: no such file; pass --kubeconfig with your kubeconfig")
        candidates = [path]
    elif in_cluster():
        return
    else:
        configured = os.environ.get("KUBECONFIG")
        candidates = [c for c in (configured or "~/.kube/config").split(os.pathsep) if c]
        present = [c for c in candidates if Path(c).expanduser().is_file()]
        if not present and required:
            named = f"$KUBECONFIG ({configured})" if configured else "~/.kube/config"
            raise InputError(
                f"no Kubernetes configuration: {named} does not exist and this is not a pod "
                "with a service account; pass --kubeconfig PATH"
            )
        candidates = present
    for candidate in candidates:
        file = Path(candidate).expanduser()
        try:
            loaded = yaml.load(file.read_text(encoding="utf-8"), Loader=LOADER)
        except (OSError, UnicodeDecodeError) as exc:
            raise InputError(f"kubeconfig {candidate}: cannot read: {exc}") from None
        except yaml.YAMLError as exc:
            raise InputError(f"kubeconfig {yaml_error(candidate, exc)}") from None
        if loaded is not None and not isinstance(loaded, dict):
            raise InputError(
                f"kubeconfig {candidate}: not a kubeconfig (a YAML mapping with clusters, users "
                "and contexts)"
            )


def cmd_serve(args: argparse.Namespace, out: TextIO, err: TextIO, stdin: TextIO) -> int:
    from webhook import app

    quiet_kube_client()
    check_kubeconfig(args.kubeconfig, required=False)
    return app.main(args)


def cmd_controller(args: argparse.Namespace, out: TextIO, err: TextIO, stdin: TextIO) -> int:
    from webhook import app

    quiet_kube_client()
    return app.controller_main(args)


def cmd_certs(args: argparse.Namespace, out: TextIO, err: TextIO, stdin: TextIO) -> int:
    from webhook.shell import certs

    target = Path(args.out)
    present = [
        name
        for name in (certs.CA_CERT, certs.CA_KEY, certs.TLS_CERT, certs.TLS_KEY)
        if (target / name).exists()
    ]
    if present and not args.force:
        ca = (
            " (a CA that webhook configurations' caBundle may trust)"
            if certs.CA_CERT in present
            else ""
        )
        raise InputError(
            f"{target} already holds {', '.join(present)}{ca}: writing would replace them; "
            "pass --force to replace them, or choose another --out DIR"
        )
    return certs.main(args, out)


def cmd_status(args: argparse.Namespace, out: TextIO, err: TextIO, stdin: TextIO) -> int:
    import asyncio

    from webhook.cli import follow, status
    from webhook.core import ports
    from webhook.shell import kube

    quiet_kube_client()
    check_kubeconfig(args.kubeconfig, required=True)
    kind_name, _, name = args.object.partition("/")
    kind = follow.KINDS.get(kind_name.lower())
    if kind is None or not name:
        raise InputError(
            f"{args.object!r}: give KIND/NAME with KIND one of vcjob (job), pod, appwrapper"
        )
    try:
        fetched = asyncio.run(follow.run(args.kubeconfig, kind, args.namespace, name))
    except (follow.NotFound, ports.ApiFailure, kube.NoConfiguration) as exc:
        say(err, "error", str(exc))
        return EXIT_REJECTED
    report = status.report(fetched)
    if args.output == "json":
        out.write(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        out.write(status.render(report))
    return EXIT_OK


EXIT_UNREACHABLE = 2


def cmd_doctor(args: argparse.Namespace, out: TextIO, err: TextIO, stdin: TextIO) -> int:
    """Exit 0 when nothing fails, 1 when a check fails, 2 when the cluster cannot be reached."""
    import asyncio

    from webhook.cli import diagnose, doctor, smoke
    from webhook.core import ports
    from webhook.shell import kube

    quiet_kube_client()
    check_kubeconfig(args.kubeconfig, required=True)
    text = args.output == "text"

    def said(finding: doctor.Finding) -> None:
        if text:
            out.write(doctor.render([finding]).splitlines()[1] + "\n")
            out.flush()

    async def run() -> tuple[list[doctor.Finding], doctor.Facts]:
        api = await kube.Api.connect(args.kubeconfig)
        try:
            facts = await diagnose.read(api, install_namespace=args.install_namespace,
                                        only_namespace=args.namespace or "")  # fmt: skip
            findings = doctor.judge(facts)
            if args.smoke:
                if text:
                    out.write(doctor.render(findings))
                    out.write("smoke:\n")
                default = None
                if facts.policies is not None:
                    ns = next((n for n in facts.namespaces if objects.name_of(n) == args.smoke), {})
                    labels = {**objects.labels_of(ns), "kubernetes.io/metadata.name": args.smoke}
                    match = facts.policies.match(args.smoke, labels)
                    default = match.policy.spec.queue.default if match else None
                queue = smoke.choose_queue(list(facts.local_queues), args.smoke, default)
                if queue is None:
                    missing = doctor.Finding(
                        "smoke", "local-queue", doctor.FAIL,
                        f"no LocalQueue in namespace {args.smoke}: nothing can be queued there",
                        f"create a LocalQueue in {args.smoke} pointing at a ClusterQueue with "
                        "some CPU quota")  # fmt: skip
                    said(missing)
                    findings.append(missing)
                else:
                    deadlines = smoke.Deadlines()
                    if args.smoke_deadline:
                        deadlines = deadlines.capped(args.smoke_deadline)
                    findings += await smoke.run(
                        api, args.smoke, queue, deadlines=deadlines, say=said
                    )
        finally:
            await api.close()
        return findings, facts

    try:
        findings, facts = asyncio.run(run())
    except KeyboardInterrupt:  # the smoke run deleted what it created on the way out
        say(err, "error", "interrupted; whatever the smoke run created was deleted")
        return EXIT_REJECTED
    except (diagnose.Unreachable, kube.NoConfiguration) as exc:
        say(err, "error", f"cannot reach the cluster: {exc}")
        return EXIT_UNREACHABLE
    except ports.ApiFailure as exc:
        say(err, "error", f"{exc.call}: {exc}")
        return EXIT_UNREACHABLE
    if args.output == "json":
        report = {**doctor.report(findings), "cluster": diagnose.summary_of(facts)}
        out.write(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode() + "\n")
    elif args.smoke:
        smoke_findings = [f for f in findings if f.section == "smoke"]
        counts = doctor.render(findings).splitlines()[-1]
        failed = [f for f in smoke_findings if f.level != doctor.OK]
        for f in failed:
            if f.fix:
                out.write(f"        fix: {f.fix}\n")
        out.write(counts + "\n")
    else:
        out.write(doctor.render(findings))
    return EXIT_REJECTED if doctor.worst(findings) == doctor.FAIL else EXIT_OK


def cmd_uninstall(args: argparse.Namespace, out: TextIO, err: TextIO, stdin: TextIO) -> int:
    import asyncio

    from webhook.core import ports
    from webhook.shell import kube
    from webhook.shell.uninstall import Uninstall

    quiet_kube_client()
    check_kubeconfig(args.kubeconfig, required=True)

    async def run() -> None:
        api = await kube.KubeClient.connect(args.kubeconfig)
        try:
            keep = Path(args.keep_queued) if args.keep_queued else None
            steps = Uninstall(api, namespace=args.install_namespace, dry_run=args.dry_run,
                              say=lambda line: print(line, file=out), keep_queued=keep)  # fmt: skip
            summary = await steps.run()
        finally:
            await api.close()
        for line in summary.left:
            out.write(f"left: {line}\n")
        for line in summary.kept:
            out.write(f"{'would keep' if args.dry_run else 'kept'}: {line}\n")

    try:
        asyncio.run(run())
    except (ports.ApiFailure, kube.NoConfiguration) as exc:
        say(err, "error", f"{exc}; nothing after that step was done: run uninstall again")
        return EXIT_REJECTED
    return EXIT_OK


# --- the parser ------------------------------------------------------------------------------


def _label(value: str) -> str:
    if "=" not in value or not value.split("=", 1)[0]:
        raise argparse.ArgumentTypeError(f"{value!r} is not KEY=VALUE")
    return value


def _exit_status(value: str) -> int:
    if not value.isdigit() or not 0 <= int(value) <= 255:
        raise argparse.ArgumentTypeError(f"{value!r} is not an exit status from 0 to 255")
    return int(value)


POLICY_HELP = (
    f"policy file or directory (default: ${policyfiles.ENV_VAR}, else --policy-from-cluster, "
    f"else ./{policyfiles.CHECKOUT_DIR} in a checkout, else the set autowrap installs by "
    "default; the last two are named on stderr)"
)
SERVE_POLICY_HELP = (
    f"policy file or directory (default: ${policyfiles.ENV_VAR}, else "
    f"./{policyfiles.DEFAULT_DIR}, else the built-in opt-in policy)"
)


def _policy_options(p: argparse.ArgumentParser) -> None:
    source = p.add_mutually_exclusive_group()
    source.add_argument("--policy", metavar="PATH", help=POLICY_HELP)
    source.add_argument(
        "--policy-from-cluster",
        action="store_true",
        help=f"judge with the policies installed in the cluster: the ConfigMap "
        f"{policysource.CONFIGMAP} in --install-namespace, read with your kubeconfig "
        "(default: off)",
    )
    p.add_argument("--kubeconfig", metavar="PATH",
                   help="for --policy-from-cluster (default: $KUBECONFIG, else ~/.kube/config)")  # fmt: skip
    p.add_argument("--install-namespace", default=names.SERVICE_NAMESPACE, metavar="NS",
                   help="where autowrap is installed, for --policy-from-cluster "
                   f"(default: {names.SERVICE_NAMESPACE})")  # fmt: skip
    p.add_argument(
        "--namespace",
        "-n",
        metavar="NS",
        help="namespace for objects that name none (default: default)",
    )
    p.add_argument(
        "--namespace-label",
        "-l",
        action="append",
        default=[],
        type=_label,
        metavar="KEY=VALUE",
        help="a label of that namespace, for policies that select by label (repeatable; "
        "default: none besides kubernetes.io/metadata.name)",
    )


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="autowrap",
        description="Wrap Volcano Jobs and Pods into Kueue-queued AppWrappers.",
    )
    top.add_argument("--version", action="version", version=f"autowrap {__version__}")
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def offline(name: str, help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.add_argument(
            "files",
            nargs="+",
            metavar="FILE|DIR|-",
            help="YAML or JSON files (multi-document), directories (their *.yaml, *.yml and "
            "*.json files, not subdirectories) or - for stdin; several may be given",
        )
        _policy_options(p)
        p.add_argument(
            "--explain",
            action="store_true",
            help="say on stderr what happened to each document and which policy applied "
            "(default: off)",
        )
        p.add_argument(
            "--warn-exit-code",
            type=_exit_status,
            default=0,
            metavar="N",
            help="exit N when there are warnings and nothing is rejected (default: 0)",
        )
        return p

    render = offline(
        "render",
        "Print what the cluster would store for each document (nothing when any is rejected).",
    )
    render.add_argument(
        "-o",
        "--output",
        choices=("yaml", "json"),
        default="yaml",
        help="output format (default: yaml)",
    )
    render.add_argument(
        "--mode",
        choices=("policy", "Adopt", "Redirect"),
        default="policy",
        help="how wrap candidates are shown: Adopt, the object as stored (prepared) and the "
        "AppWrapper the controller creates; Redirect, the AppWrapper alone; policy, as the "
        "matching policy's mode says (default: policy)",
    )
    render.add_argument(
        "--partial",
        action="store_true",
        help="print the accepted documents even when others are rejected (default: off: "
        "print nothing, so that `| kubectl apply -f -` never applies half a file)",
    )
    render.add_argument(
        "--pods",
        action="store_true",
        help="instead of YAML, a table of every pod the cluster will run: node rank, "
        "MASTER_ADDR:PORT, NNODES, processes, WORLD_SIZE, scheduling gates, resolved as "
        "kubelet does (default: off)",
    )
    render.set_defaults(handler=cmd_render)

    check = offline("check", "Validate only: say what would happen to each document.")
    check.add_argument(
        "-o",
        "--output",
        choices=("text", "json"),
        default="text",
        help="text: one line per document on stdout, findings on stderr; json: one report on "
        "stdout with every document's result, errors (key violations) and warnings "
        "(default: text)",
    )
    check.set_defaults(handler=cmd_check)

    explain = sub.add_parser(
        "explain",
        help="Say which policy applies to a namespace, or what happens to each document.",
        description="Say which policy applies to a namespace (without FILE), or what happens "
        "to each document of FILE and why (exit 1 when one is rejected).",
    )
    explain.add_argument(
        "files",
        nargs="*",
        metavar="FILE|DIR|-",
        help="files, directories or - for stdin, as for check (default: none)",
    )
    _policy_options(explain)
    explain.set_defaults(handler=cmd_explain)

    test = sub.add_parser(
        "test",
        help="Run policy tests: manifests and the outcome each should get.",
        description="Run every autowrap-test.yaml under PATH (or the file PATH): each names a "
        "policy set, manifests and the outcome each document should get. Exit 1 when one fails.",
    )
    test.add_argument("path", metavar="PATH", help="a directory, or one autowrap-test.yaml")
    test.add_argument(
        "--verbose", "-v", action="store_true", help="list passing cases too (default: off)"
    )
    test.set_defaults(handler=cmd_test)

    serve = sub.add_parser(
        "serve",
        help="Run the admission webhook (HTTPS).",
        description="Run the admission webhook (HTTPS) and its metrics endpoint (HTTP).",
    )
    serve.add_argument("--host", default="0.0.0.0", help="address to listen on (default: 0.0.0.0)")
    serve.add_argument("--port", type=int, default=9443, help="HTTPS port (default: 9443)")
    serve.add_argument(
        "--cert-dir",
        metavar="DIR",
        help="holds tls.crt and tls.key (default: generate a development pair)",
    )
    serve.add_argument("--policy", metavar="PATH", help=SERVE_POLICY_HELP)
    serve.add_argument(
        "--kubeconfig",
        metavar="PATH",
        help="default: in-cluster config, else the usual kubeconfig resolution",
    )
    serve.add_argument(
        "--metrics-port", type=int, default=8080, help="plain HTTP metrics port (default: 8080)"
    )
    serve.add_argument(
        "--metrics-host",
        default="0.0.0.0",
        metavar="ADDR",
        help="address the metrics port listens on; 127.0.0.1 keeps it inside the pod "
        "(default: 0.0.0.0)",
    )
    serve.add_argument(
        "--metrics-auth",
        action="store_true",
        help="answer /metrics only to bearer tokens the cluster authenticates (TokenReview) "
        "and allows get on the non-resource URL /metrics (SubjectAccessReview) "
        "(default: off)",
    )
    serve.add_argument(
        "--client-ca-file",
        metavar="PATH",
        help="require on /mutate and /validate a client certificate issued by a CA in this PEM "
        "file, reloaded when it changes; /healthz and /readyz stay open for probes "
        "(default: none, any caller)",
    )
    serve.add_argument(
        "--self-managed-certs",
        action="store_true",
        help="keep the serving certificate in a Secret and the webhook "
        "configurations' caBundle current (default: off)",
    )
    serve.add_argument(
        "--cert-secret",
        default="autowrap-serving-cert",
        metavar="NAME",
        help="the Secret for --self-managed-certs (default: autowrap-serving-cert)",
    )
    serve.add_argument(
        "--service-name",
        default=os.environ.get(SERVICE_NAME_ENV_VAR) or names.SERVICE_NAME,
        metavar="NAME",
        help="the Service in front of the webhook: --self-managed-certs issues the serving "
        "certificate for NAME.<namespace>.svc, the namespace being the pod's (POD_NAMESPACE) "
        f"(default: ${SERVICE_NAME_ENV_VAR}, else {names.SERVICE_NAME})",
    )
    serve.add_argument(
        "--webhook-configurations",
        default="autowrap-mutating,autowrap-validating",
        metavar="A,B",
        help="the webhook configurations whose caBundle --self-managed-certs keeps current "
        "(default: autowrap-mutating,autowrap-validating)",
    )
    serve.add_argument(
        "--log-level",
        choices=("debug", "info", "warning", "error"),
        default="info",
        help="least severe log lines written; debug adds tracebacks to internal errors "
        "(default: info, one line per admission request)",
    )
    serve.add_argument(
        "--no-controller",
        action="store_true",
        help="do not run the adopt-mode controller in this process (default: run it whenever "
        "the server has API access)",
    )
    serve.set_defaults(handler=cmd_serve)

    # `autowrap serve` starts it as a process of its own; not listed, not for people.
    alone = sub.add_parser("controller", description="The adopt-mode controller, as "
                           "`autowrap serve` runs it beside its webhooks.")  # fmt: skip
    alone.add_argument("--relay-fd", type=int, required=True, help="the serving process's socket")
    alone.add_argument("--kubeconfig", metavar="PATH", help="as serve's (default: in-cluster "
                       "config, else the usual kubeconfig resolution)")  # fmt: skip
    alone.add_argument("--policy", metavar="PATH",
                       help="as serve's (default: the policies serve would read)")  # fmt: skip
    alone.add_argument("--namespace", help="where the Lease lives (default: the pod's namespace)")
    alone.add_argument("--identity", help="the Lease holder's name (default: the host name)")
    alone.add_argument("--log-level", choices=("debug", "info", "warning", "error"),
                       default="info", help="as serve's (default: info)")  # fmt: skip
    alone.set_defaults(handler=cmd_controller)

    certs = sub.add_parser(
        "certs",
        help="Write a CA and a serving certificate.",
        description="Write ca.crt, ca.key, tls.crt and tls.key for SERVICE.NAMESPACE.svc into "
        "DIR and print the base64 caBundle on stdout.",
    )
    certs.add_argument(
        "--service", default="autowrap", metavar="NAME", help="Service name (default: autowrap)"
    )
    certs.add_argument(
        "--namespace",
        default="autowrap-system",
        metavar="NS",
        help="Service namespace (default: autowrap-system)",
    )
    certs.add_argument("--out", required=True, metavar="DIR", help="output directory (required)")
    certs.add_argument(
        "--force",
        action="store_true",
        help="replace ca.crt, ca.key, tls.crt and tls.key where DIR already holds them (a new "
        "CA: every caBundle that trusts the old one must be updated) (default: off: refuse)",
    )
    certs.set_defaults(handler=cmd_certs)

    follow = sub.add_parser(
        "status",
        help="Follow a job: its AppWrapper, Kueue Workload, pods and last Events.",
        description="Show the chain from an object to its pods: the object (adoption, status), "
        "its AppWrapper (phase, conditions, retries), Kueue's Workload (LocalQueue, ClusterQueue "
        "and flavor, or why it is not admitted), its pods by state and the last Events. Reads "
        "with your own kubeconfig. Also `kubectl autowrap status` as a kubectl plugin.",
    )
    follow.add_argument(
        "object", metavar="KIND/NAME", help="vcjob/NAME, pod/NAME or appwrapper/NAME"
    )
    follow.add_argument("--namespace", "-n", default="default", metavar="NS",
                        help="the object's namespace (default: default)")  # fmt: skip
    follow.add_argument("--kubeconfig", metavar="PATH",
                        help="default: $KUBECONFIG, else ~/.kube/config")  # fmt: skip
    follow.add_argument("-o", "--output", choices=("text", "json"), default="text",
                        help="output format (default: text)")  # fmt: skip
    follow.set_defaults(handler=cmd_status)

    check_up = sub.add_parser(
        "doctor",
        help="Check a live cluster: prerequisites, autowrap itself, policies; --smoke runs a job.",
        description="Check what autowrap relies on in a live cluster, each a line ok / warn / "
        "fail with what was found and the fix: Kubernetes, Kueue (version, AppWrapper "
        "integration, AdmissionGatedBy), the AppWrapper controller and its settings, Volcano, "
        "cert-manager; autowrap's webhooks, admission policies, caBundles against the serving "
        "certificate, endpoints, /readyz, the controller Lease, its ServiceAccount's rights; "
        "every policy against the namespaces and queues it covers. Read-only unless --smoke. "
        "Reads with your own kubeconfig. Exit 0 fine, 1 a check failed, 2 the cluster cannot be "
        "reached. docs/doctor.md describes each check.",
    )
    check_up.add_argument("--namespace", "-n", metavar="NS",
                          help="judge the policies for this namespace only (default: all)")  # fmt: skip
    check_up.add_argument("--install-namespace", default=names.SERVICE_NAMESPACE, metavar="NS",
                          help=f"where autowrap is installed (default: {names.SERVICE_NAMESPACE})")  # fmt: skip
    check_up.add_argument("--smoke", metavar="NAMESPACE",
                          help="also submit a tiny CPU-only Volcano Job (two pods) and a Pod "
                          "there, follow them stage by stage to running pods, then delete them "
                          "(default: off)")  # fmt: skip
    check_up.add_argument("--smoke-deadline", type=float, metavar="SECONDS",
                          help="the longest any smoke stage may take (default: 30 s for the "
                          "AppWrapper and the Workload, 120 s for admission, 60 s for the "
                          "release, 180 s for the pods to run)")  # fmt: skip
    check_up.add_argument("--kubeconfig", metavar="PATH",
                          help="default: $KUBECONFIG, else ~/.kube/config")  # fmt: skip
    check_up.add_argument("-o", "--output", choices=("text", "json"), default="text",
                          help="output format (default: text)")  # fmt: skip
    check_up.set_defaults(handler=cmd_doctor)

    remove = sub.add_parser(
        "uninstall",
        help="Remove autowrap from a cluster, leaving nothing to resurrect and nothing stuck.",
        description="Delete autowrap's webhook configurations and admission policies, then its "
        "Deployment (waited for), then every object autowrap prepared that never ran, with its "
        "AppWrapper (nothing can run it once autowrap is gone, and a queued AppWrapper would "
        "re-create it when Kueue admits it); objects that ran keep running under their "
        "AppWrapper and only lose the adoption finalizer. Last, autowrap's ClusterRoles and "
        "bindings (all but the one the AppWrapper controller needs for the Volcano Jobs it runs) "
        "and its namespace where the install created it (else autowrap's objects in it). "
        "--keep-queued DIR writes each job that never ran there first, for its user to submit "
        "again. What is kept, and why, is said on `kept:` lines. Needs cluster-admin rights.",
    )
    remove.add_argument("--kubeconfig", metavar="PATH",
                        help="default: $KUBECONFIG, else ~/.kube/config")  # fmt: skip
    remove.add_argument("--namespace", "-n", dest="install_namespace",
                        default=names.SERVICE_NAMESPACE, metavar="NS",
                        help=f"where autowrap is installed (default: {names.SERVICE_NAMESPACE})")  # fmt: skip
    remove.add_argument("--dry-run", action="store_true",
                        help="say what would be done and what would be kept, and do nothing "
                        "(default: off)")  # fmt: skip
    remove.add_argument("--keep-queued", metavar="DIR",
                        help="before deleting a job that never ran, write it to DIR as its user "
                        "submitted it (DIR/NAMESPACE/KIND-NAME.yaml), for them to submit again "
                        "(default: off: not written)")  # fmt: skip
    remove.set_defaults(handler=cmd_uninstall)
    return top


def _os_error(exc: OSError, args: argparse.Namespace) -> str:
    """One line for a start-up failure of the operating system's making."""
    if exc.errno == errno.EADDRINUSE:
        return (
            f"cannot listen: {exc.strerror or exc}; stop whatever uses that port or choose "
            "another with --port / --metrics-port"
        )
    if isinstance(exc, ssl.SSLError):
        where = f" in {args.cert_dir}" if getattr(args, "cert_dir", None) else ""
        return (
            f"the serving certificate{where} cannot be used ({exc.reason or exc}): tls.crt and "
            "tls.key must be a PEM certificate and its private key; `autowrap certs --out DIR` "
            "writes a pair"
        )
    where = f"{exc.filename}: " if exc.filename else ""
    return f"{where}{exc.strerror or exc}"


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    err = sys.stderr
    try:
        code: int = args.handler(args, sys.stdout, err, sys.stdin)
    except (InputError, PolicyError, policytests.TestFileError) as exc:
        say(err, "error", str(exc))
        return EXIT_UNREADABLE
    except BrokenPipeError:
        return EXIT_OK
    except OSError as exc:  # start-up: a port in use, unreadable certificates, ...
        say(err, "error", _os_error(exc, args))
        return EXIT_UNREADABLE
    return code


if __name__ == "__main__":
    raise SystemExit(main())
