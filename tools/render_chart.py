"""Render the Helm chart deploy/helm/autowrap from the kustomize manifests in deploy/.

    python -m tools.render_chart          # rewrite the chart's generated files
    python -m tools.render_chart --check  # exit 1 if any generated file differs

The chart holds the objects `kubectl kustomize` renders, nothing of its own: run this after
every change under deploy/base, deploy/overlays, deploy/components or the transformers, as
for deploy/release (tests/deploy/test_helm.py checks both that the committed chart is this
rendering and that `helm template` renders the same objects as kustomize for the same
settings).

How the templates are made. Each variant the chart can install is rendered by kustomize
(`kustomize_text`), with two stand-ins that kustomize's own transformers carry everywhere
they belong: a namespace name (deploy/install-namespace) and a controller-identities list
(deploy/controller-identities). The stand-ins become `include`s of the install namespace and
of the `controllerIdentities` value. The values read from one place (the Deployment's
replicas, image and resources, the NetworkPolicy's CIDR, the policies ConfigMap's data) become
references to `.Values`. An object that differs between the settings of one choice (the
certificate mode, `rbac.componentCreate`, `rbac.ownerReferencesEnforcement`) is written once,
its differing lines under `if`s; an object present for some settings only is written under an
`if`. The defaults in values.yaml are the kustomize base's own.

Deliberate differences from the kustomize release, one each: the Namespace is created only
with `namespace.create` (Helm stores a release in its namespace before it creates anything,
so a chart cannot create its own release namespace: `helm install --create-namespace`
does), and the ClusterRole and ClusterRoleBinding that `autowrap uninstall` leaves for the
AppWrapper controller carry `helm.sh/resource-policy: keep`, so that `helm uninstall`
leaves them too.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import json
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from tools.render_release import DEFAULT_NAMESPACE, DEPLOY, IMAGE, REPO, parse_image
from webhook.shell.uninstall import KEPT_CLUSTER_ROLES

Obj = dict[str, Any]
CHART = DEPLOY / "helm" / "autowrap"
# `autowrap uninstall` leaves these for the Volcano Jobs the AppWrapper controller still runs;
# `helm uninstall` must leave them as well.
KEPT = KEPT_CLUSTER_ROLES
KEEP_ANNOTATION = "helm.sh/resource-policy"

# Certificate mode -> the kustomization it installs, relative to deploy/.
CERTIFICATE_MODES: dict[str, str] = {
    "self-managed": "overlays/self-managed",
    "cert-manager": "overlays/cert-manager",
    "provided": "base",
}
DEFAULT_MODE = "self-managed"
WITHOUT_COMPONENT_CREATE = "components/without-component-create"
OWNER_REFERENCES = "components/owner-references-enforcement"

# The stand-ins kustomize renders with (a valid namespace name, and a CEL identifier where the
# usernames list goes), replaced in the templates by the values they stand for.
NAMESPACE_STANDIN = "autowrap-chart-namespace"
IDENTITIES_STANDIN = "AUTOWRAPCHARTCONTROLLERIDENTITIES"
NAMESPACE_TEMPLATE = '{{ include "autowrap.namespace" . }}'
IDENTITIES_TEMPLATE = '{{ include "autowrap.controllerIdentities" . }}'
# Placeholders for the values read from one place.
_REPLICAS = "__AUTOWRAP_CHART_REPLICAS__"
_IMAGE = "__AUTOWRAP_CHART_IMAGE__"
_RESOURCES = "__AUTOWRAP_CHART_RESOURCES__"
_CIDR = "__AUTOWRAP_CHART_CIDR__"
_POLICIES = "__AUTOWRAP_CHART_POLICIES__"

# A Kubernetes username as the controllerIdentities value accepts it: written into CEL
# single-quoted strings inside YAML, so no quotes, backslashes or line breaks.
USERNAME_PATTERN = r"^[^'\"\\\r\n]+$"
NAMESPACE_PATTERN = r"^([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)?$"
RESOURCE_NAME_PATTERN = r"^([a-z0-9.-]+/)?[a-z0-9]([-a-z0-9._]*[a-z0-9])?$"
POLICY_FILE_PATTERN = r"^[A-Za-z0-9][-._A-Za-z0-9]*\.ya?ml$"
QUANTITY_PATTERN = r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+|[numkMGTPE]|[KMGTPE]i)?$"
CIDR_PATTERN = r"^([0-9]{1,3}(\.[0-9]{1,3}){3}/[0-9]{1,2}|[0-9a-fA-F:]*:[0-9a-fA-F:.]*/[0-9]{1,3})$"
REPOSITORY_PATTERN = (
    r"^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?(:[0-9]+)?(/[a-z0-9]+([._-]+[a-z0-9]+)*)*$"
)
TAG_PATTERN = r"^([\w][\w.-]{0,127})?$"
DIGEST_PATTERN = r"^([a-z0-9]+([.+_-][a-z0-9]+)*:[0-9a-fA-F]{32,})?$"


class RenderError(RuntimeError):
    """The manifests hold something the chart cannot express: said with what and where."""


# --- one install's settings, rendered by kustomize --------------------------------------------


@dataclass(frozen=True)
class Settings:
    """What the chart's values choose, in kustomize's terms. None: as deploy/ ships it."""

    namespace: str = DEFAULT_NAMESPACE
    image: str | None = None  # NAME:TAG or NAME@DIGEST
    replicas: int | None = None
    resources: Mapping[str, Any] | None = None
    certificates: str = DEFAULT_MODE
    control_plane_cidr: str | None = None
    controller_identities: tuple[str, ...] | None = None
    component_create: bool = True
    owner_references_enforcement: bool = False
    policies: Mapping[str, str] | None = None  # file name -> text; None: the default policy
    # Not a user's setting: the usernames value written verbatim (the generator's stand-in).
    identities_text: str | None = field(default=None, repr=False)


def cel_list(usernames: Iterable[str]) -> str:
    """The CEL list literal of ``usernames``, as deploy/base/controller-identities.yaml
    writes it and the chart's ``autowrap.controllerIdentities`` renders it."""
    return "[" + ", ".join(f"'{u}'" for u in usernames) + "]"


def default_controller_identities() -> list[str]:
    doc = yaml.safe_load((DEPLOY / "base" / "controller-identities.yaml").read_text())
    usernames = ast.literal_eval(doc["data"]["usernames"])
    if not isinstance(usernames, list) or not all(isinstance(u, str) for u in usernames):
        raise RenderError("deploy/base/controller-identities.yaml: usernames is not a list")
    return usernames


def _json_patch(target: Obj, operations: list[Obj]) -> Obj:
    return {"target": target, "patch": yaml.safe_dump(operations, sort_keys=False)}


def overlay(settings: Settings, deploy: str = "../deploy") -> Obj:
    """The kustomization of an overlay that installs ``settings``, its paths relative to a
    directory next to a copy of deploy/ (as docs/install.md lays an overlay out)."""
    kustomization: Obj = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [f"{deploy}/{CERTIFICATE_MODES[settings.certificates]}"],
    }
    components = []
    if not settings.component_create:
        components.append(f"{deploy}/{WITHOUT_COMPONENT_CREATE}")
    if settings.owner_references_enforcement:
        components.append(f"{deploy}/{OWNER_REFERENCES}")
    if components:
        kustomization["components"] = components
    transformers = []
    if settings.namespace != DEFAULT_NAMESPACE:
        kustomization["namespace"] = settings.namespace
        transformers.append(f"{deploy}/install-namespace")
    if settings.image:
        image = parse_image(settings.image)
        entry: Obj = {"name": IMAGE, "newName": image.name}
        entry.update({"digest": image.digest} if image.digest else {"newTag": image.tag})
        kustomization["images"] = [entry]
    patches: list[Obj] = []
    deployment: list[Obj] = []
    if settings.replicas is not None:
        deployment.append({"op": "replace", "path": "/spec/replicas", "value": settings.replicas})
    if settings.resources is not None:
        deployment += [
            {"op": "test", "path": "/spec/template/spec/containers/0/name", "value": "autowrap"},
            {"op": "replace", "path": "/spec/template/spec/containers/0/resources",
             "value": dict(settings.resources)},
        ]  # fmt: skip
    if deployment:
        patches.append(_json_patch({"kind": "Deployment", "name": "autowrap"}, deployment))
    if settings.control_plane_cidr is not None:
        patches.append(_json_patch({"kind": "NetworkPolicy", "name": "autowrap-webhook"}, [
            {"op": "test", "path": "/spec/ingress/0/ports/0/port", "value": 9443},
            {"op": "replace", "path": "/spec/ingress/0/from/0/ipBlock/cidr",
             "value": settings.control_plane_cidr},
        ]))  # fmt: skip
    identities = settings.identities_text
    if identities is None and settings.controller_identities is not None:
        identities = cel_list(settings.controller_identities)
    if identities is not None:
        patches.append(_json_patch(
            {"kind": "ConfigMap", "name": "autowrap-controller-identities"},
            [{"op": "replace", "path": "/data/usernames", "value": identities}],
        ))  # fmt: skip
        transformers.append(f"{deploy}/controller-identities")
    if patches:
        kustomization["patches"] = patches
    if transformers:
        kustomization["transformers"] = transformers
    return kustomization


def _kubectl_kustomize(directory: Path) -> str:
    done = subprocess.run(["kubectl", "kustomize", str(directory)], capture_output=True,
                          text=True, timeout=120, check=False)  # fmt: skip
    if done.returncode != 0:
        raise RenderError(f"kubectl kustomize {directory.name} failed:\n{done.stderr}")
    return done.stdout


def kustomize_text(settings: Settings) -> str:
    """`kubectl kustomize` of an overlay for ``settings``, built in a scratch copy of deploy/
    (kustomize loads nothing from outside its root). The policies, when given, replace the
    ConfigMap's files in a layer above, so that the namespace change never rewrites them (as
    `python -m tools.render_release --policies` installs them)."""
    with tempfile.TemporaryDirectory(prefix="autowrap-chart-") as scratch:
        root = Path(scratch)
        shutil.copytree(DEPLOY, root / "deploy", ignore=shutil.ignore_patterns("release", "helm"))
        install = root / "install"
        install.mkdir()
        (install / "kustomization.yaml").write_text(
            yaml.safe_dump(overlay(settings), sort_keys=False)
        )
        top = install
        if settings.policies is not None:
            top = root / "policies"
            top.mkdir()
            for name, text in settings.policies.items():
                (top / name).write_text(text, encoding="utf-8")
            (top / "kustomization.yaml").write_text(yaml.safe_dump({
                "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
                "resources": ["../install"],
                "configMapGenerator": [{
                    "name": "autowrap-policies", "namespace": settings.namespace,
                    "behavior": "replace", "options": {"disableNameSuffixHash": True},
                    "files": sorted(settings.policies),
                }],
            }, sort_keys=False))  # fmt: skip
        return _kubectl_kustomize(top)


def kustomize_objects(settings: Settings) -> list[Obj]:
    return [d for d in yaml.safe_load_all(kustomize_text(settings)) if d]


# --- the templates -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Choice:
    """One value that selects between kustomize renderings, and how a template tests it."""

    field: str  # of Settings
    options: tuple[Any, ...]
    condition: Callable[[Any], str]

    def test(self, chosen: Iterable[Any]) -> str:
        """The template condition true exactly for the ``chosen`` options."""
        picked = [o for o in self.options if o in set(chosen)]
        tests = [self.condition(o) for o in picked]
        if len(tests) == 1:
            return tests[0]
        return "or " + " ".join(f"({t})" for t in tests)


def _mode_test(mode: str) -> str:
    return f'eq .Values.certificates.mode "{mode}"'


def _flag_test(path: str) -> Callable[[Any], str]:
    return lambda on: path if on else f"not {path}"


CHOICES = (
    Choice("certificates", tuple(CERTIFICATE_MODES), _mode_test),
    Choice("component_create", (True, False), _flag_test(".Values.rbac.componentCreate")),
    Choice(
        "owner_references_enforcement",
        (False, True),
        _flag_test(".Values.rbac.ownerReferencesEnforcement"),
    ),
)
BASELINE = Settings(
    namespace=NAMESPACE_STANDIN,
    identities_text=IDENTITIES_STANDIN,
)


class _Dumper(yaml.SafeDumper):
    """kustomize's layout (keys in their order, lists not indented); multi-line strings and
    those holding the identities stand-in as literal blocks (double-quoted where YAML allows
    no block), so that the list's quotes and brackets never meet a plain scalar."""


def _represent_str(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    if "\n" in data or IDENTITIES_STANDIN in data:
        return dumper.represent_scalar("tag:yaml.org,2002:str", data, style="|")
    return dumper.represent_scalar("tag:yaml.org,2002:str", data)


_Dumper.add_representer(str, _represent_str)


def _dump(obj: Obj) -> str:
    text: str = yaml.dump(obj, Dumper=_Dumper, sort_keys=False, default_flow_style=False,
                          width=4096, allow_unicode=True)  # fmt: skip
    return text


def _key(obj: Obj) -> tuple[str, str]:
    return (obj["kind"], obj["metadata"]["name"])


@dataclass
class Defaults:
    """values.yaml's defaults, read from the kustomize base."""

    repository: str = ""
    tag: str = ""
    replicas: int = 0
    resources: Obj = field(default_factory=dict)
    cidr: str = ""


def _take_values(objs: list[Obj], defaults: Defaults) -> None:
    """Put the placeholders where the values go. The first rendering's values there are the
    defaults; every other rendering must hold the same (else the chart would drop a value)."""
    for obj in objs:
        key = _key(obj)
        if key == ("Deployment", "autowrap"):
            spec = obj["spec"]
            container = spec["template"]["spec"]["containers"][0]
            if container["name"] != "autowrap":
                raise RenderError(f"Deployment autowrap: first container {container['name']}")
            image = parse_image(container["image"])
            found = Defaults(image.name, image.tag, spec["replicas"], container["resources"])
            spec["replicas"], container["image"], container["resources"] = (
                _REPLICAS, _IMAGE, _RESOURCES
            )  # fmt: skip
        elif key == ("NetworkPolicy", "autowrap-webhook"):
            block = obj["spec"]["ingress"][0]["from"][0]["ipBlock"]
            found = (
                replace(defaults, cidr=block["cidr"])
                if defaults.cidr
                else Defaults(cidr=block["cidr"])
            )
            block["cidr"] = _CIDR
        elif key == ("ConfigMap", "autowrap-policies"):
            obj["data"] = {_POLICIES: obj["data"]}
            continue
        else:
            continue
        _agree(defaults, found, key)


def _agree(defaults: Defaults, found: Defaults, key: tuple[str, str]) -> None:
    """Record the values ``found`` in ``key`` as the defaults, or check them against those."""
    for name in ("repository", "tag", "replicas", "resources", "cidr"):
        value, recorded = getattr(found, name), getattr(defaults, name)
        if not value:
            continue
        if not recorded:
            setattr(defaults, name, value)
        elif value != recorded:
            raise RenderError(f"{key[0]} {key[1]}: {name} differs between the variants")


def _indent(text: str, spaces: int) -> str:
    pad = " " * spaces
    return "".join(pad + line if line.strip() else line for line in text.splitlines(True))


def _values_references(text: str) -> str:
    """The placeholders replaced by the template expressions of their values."""
    out: list[str] = []
    for line in text.splitlines(True):
        stripped = line.strip()
        indent = len(line) - len(line.lstrip(" "))
        pad = " " * indent
        if stripped == f"replicas: {_REPLICAS}":
            out.append(f"{pad}replicas: {{{{ .Values.replicas }}}}\n")
        elif stripped in (f"image: {_IMAGE}", f"- image: {_IMAGE}"):
            lead = "- " if stripped.startswith("- ") else ""
            out.append(f'{pad}{lead}image: {{{{ include "autowrap.image" . | quote }}}}\n')
        elif stripped == f"resources: {_RESOURCES}":
            out.append(f"{pad}resources:\n")
            out.append(f"{pad}  {{{{- toYaml .Values.resources | nindent {indent + 2} }}}}\n")
        elif stripped == f"cidr: {_CIDR}":
            out.append(f"{pad}cidr: {{{{ .Values.networkPolicy.controlPlaneCIDR | quote }}}}\n")
        elif stripped == f"{_POLICIES}:":
            # The data mapping's one key; its value (the default set) follows, one deeper.
            out.append(f"{pad[:-2]}{{{{- if .Values.policies }}}}\n")
            out.append(f"{pad}{{{{- toYaml .Values.policies | nindent {indent} }}}}\n")
            out.append(f"{pad[:-2]}{{{{- else }}}}\n")
            out.append("\0policies-default\0")
        else:
            if any(p in line for p in (_REPLICAS, _IMAGE, _RESOURCES, _CIDR, _POLICIES)):
                raise RenderError(f"a value's placeholder in an unexpected place: {line!r}")
            out.append(line)
    return _close_policies("".join(out))


def _close_policies(text: str) -> str:
    """The default policies (the lines after the marker, one level deeper than `data:`'s
    keys) moved up to their keys' level and closed with `end`."""
    if "\0policies-default\0" not in text:
        return text
    head, tail = text.split("\0policies-default\0", 1)
    lines = tail.splitlines(True)
    body_indent = len(lines[0]) - len(lines[0].lstrip(" "))
    taken = 0
    for line in lines:
        if line.strip() and len(line) - len(line.lstrip(" ")) < body_indent:
            break
        taken += 1
    body = "".join(line[2:] if line.strip() else line for line in lines[:taken])
    close = " " * (body_indent - 4) + "{{- end }}\n"
    return head + body + close + "".join(lines[taken:])


def _escape_actions(text: str) -> str:
    """Template delimiters already in the manifests, written so that Helm prints them."""
    return text.replace("{{", '{{ "{{" }}')


def _standins(text: str) -> str:
    return text.replace(NAMESPACE_STANDIN, NAMESPACE_TEMPLATE).replace(
        IDENTITIES_STANDIN, IDENTITIES_TEMPLATE
    )


def _check_no_blank_before_action(lines: list[str], where: str) -> None:
    """`{{-` removes every blank line before it: none may stand there."""
    for before, line in zip(lines, lines[1:], strict=False):
        if line.lstrip().startswith("{{-") and not before.strip():
            raise RenderError(f"{where}: a blank line before a template action")


def _merge(a: str, b: str, test_a: str, test_b: str) -> str:
    """One text that renders ``a`` where ``test_a`` holds and ``b`` where ``test_b`` does
    (exactly one of them holds): their common lines once, each differing run under an `if`."""
    a_lines, b_lines = a.splitlines(True), b.splitlines(True)
    out: list[str] = []
    matcher = difflib.SequenceMatcher(None, a_lines, b_lines, autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            out += a_lines[i1:i2]
        elif op == "delete":
            out += [f"{{{{- if {test_a} }}}}\n", *a_lines[i1:i2], "{{- end }}\n"]
        elif op == "insert":
            out += [f"{{{{- if {test_b} }}}}\n", *b_lines[j1:j2], "{{- end }}\n"]
        else:
            out += [f"{{{{- if {test_a} }}}}\n", *a_lines[i1:i2], "{{- else }}\n",
                    *b_lines[j1:j2], "{{- end }}\n"]  # fmt: skip
    return "".join(out)


@dataclass
class Rendering:
    """The chart's object templates by kind, and values.yaml's defaults."""

    templates: dict[str, list[str]]
    defaults: Defaults


# What each value becomes in the templates: each must be found there.
VALUE_EXPRESSIONS = (
    "{{ .Values.replicas }}",
    '{{ include "autowrap.image" . | quote }}',
    "{{- toYaml .Values.resources",
    "{{ .Values.networkPolicy.controlPlaneCIDR | quote }}",
    "{{- toYaml .Values.policies",
    NAMESPACE_TEMPLATE,
    IDENTITIES_TEMPLATE,
)


def _renderings() -> dict[tuple[str, Any], list[Obj]]:
    """The baseline and, for each choice, each other option: kustomize objects."""
    out: dict[tuple[str, Any], list[Obj]] = {("", None): kustomize_objects(BASELINE)}
    for choice in CHOICES:
        baseline_option = getattr(BASELINE, choice.field)
        for option in choice.options:
            if option != baseline_option:
                out[(choice.field, option)] = kustomize_objects(
                    replace(BASELINE, **{choice.field: option})
                )
    return out


def _object_block(key: tuple[str, str], texts: dict[tuple[str, Any], str | None]) -> str:
    """The object's template, under the conditions it exists in; a `---` opens each
    document."""
    where = f"{key[0]} {key[1]}"
    varying: list[Choice] = []
    for choice in CHOICES:
        by_option = {o: _text_for(texts, choice, o) for o in choice.options}
        if len(set(by_option.values())) > 1:
            varying.append(choice)
    baseline = texts[("", None)]
    if not varying:
        if baseline is None:
            raise RenderError(f"{where} is in no rendering")
        return f"---\n{baseline}"
    if len(varying) > 1:
        raise RenderError(f"{where} differs by more than one choice: "
                          f"{', '.join(c.field for c in varying)}")  # fmt: skip
    choice = varying[0]
    groups: dict[str | None, list[Any]] = {}
    for option in choice.options:
        groups.setdefault(_text_for(texts, choice, option), []).append(option)
    present = [(text, options) for text, options in groups.items() if text is not None]
    if len(present) == 2 and None not in groups:
        (a, a_options), (b, b_options) = present
        return "---\n" + _merge(a, b, choice.test(a_options), choice.test(b_options))
    block = ""
    for index, (text, options) in enumerate(present):
        word = "if" if index == 0 else "else if"
        block += f"{{{{- {word} {choice.test(options)} }}}}\n---\n{text}"
    return block + "{{- end }}\n"


def _text_for(texts: dict[tuple[str, Any], str | None], choice: Choice, option: Any) -> str | None:
    if option == getattr(BASELINE, choice.field):
        return texts[("", None)]
    return texts[(choice.field, option)]


def render_templates() -> Rendering:
    renderings = _renderings()
    defaults = Defaults()
    order: list[tuple[str, str]] = []
    texts: dict[tuple[str, str], dict[tuple[str, Any], str | None]] = {}
    for which, objs in renderings.items():
        for obj in objs:
            if obj["metadata"].get("name") in KEPT and obj["kind"].startswith("ClusterRole"):
                obj["metadata"].setdefault("annotations", {})[KEEP_ANNOTATION] = "keep"
        _take_values(objs, defaults)
        for obj in objs:
            key = _key(obj)
            if key not in texts:
                order.append(key)
                texts[key] = dict.fromkeys(renderings)
            texts[key][which] = _escape_actions(_dump(obj))
    templates: dict[str, list[str]] = {}
    for key in order:
        kind, name = key
        if kind == "Namespace":
            namespace = texts[key]
            if len(set(namespace.values())) != 1:
                raise RenderError("the Namespace differs between the renderings")
            block = _namespace_block(namespace[("", None)] or "")
        else:
            block = _values_references(_object_block(key, texts[key]))
        _check_no_blank_before_action(block.splitlines(), f"{kind} {name}")
        templates.setdefault(kind, []).append(_standins(block))
    written = "".join(b for blocks in templates.values() for b in blocks)
    missing = [e for e in VALUE_EXPRESSIONS if e not in written]
    if missing:
        raise RenderError(f"values written nowhere in the templates: {', '.join(missing)}")
    return Rendering(templates, defaults)


def _namespace_block(text: str) -> str:
    return (
        "{{- if .Values.namespace.create }}\n"
        '{{- if eq (include "autowrap.namespace" .) .Release.Namespace }}\n'
        '{{- fail "namespace.create: Helm keeps the release in its own namespace and needs it '
        "before anything is created; install with --create-namespace instead, or set "
        'namespace.name to another namespace than --namespace" }}\n'
        "{{- end }}\n"
        f"---\n{text}"
        "{{- end }}\n"
    )


def template_file(kind: str) -> str:
    """templates/<kind, lower case, words joined by '-'>.yaml"""
    return "templates/" + re.sub(r"(?<!^)(?=[A-Z])", "-", kind).lower() + ".yaml"


# --- the chart's other files --------------------------------------------------------------------

GENERATED = "Generated by `python -m tools.render_chart` from deploy/ (kustomize): do not edit."
HEADER = f"# {GENERATED}\n"
TEMPLATE_HEADER = f"{{{{- /* {GENERATED} */ -}}}}\n"

HELPERS = """\
{{/*
The namespace autowrap is installed in: namespace.name, else the release's (--namespace).
*/}}
{{- define "autowrap.namespace" -}}
{{- .Values.namespace.name | default .Release.Namespace -}}
{{- end -}}

{{/*
The image: repository@digest when a digest is given, else repository:tag (the chart's
appVersion when no tag is given).
*/}}
{{- define "autowrap.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}
{{- end -}}

{{/*
controllerIdentities as a CEL list of strings: ['a', 'b'].
*/}}
{{- define "autowrap.controllerIdentities" -}}
[{{- range $index, $username := .Values.controllerIdentities -}}
{{- if $index }}, {{ end -}}
'{{ $username }}'
{{- end -}}]
{{- end -}}
"""

NOTES = """\
autowrap {{ .Chart.AppVersion }} is installed in namespace {{ include "autowrap.namespace" . }}
(certificates: {{ .Values.certificates.mode }}).

  kubectl -n {{ include "autowrap.namespace" . }} rollout status deployment/autowrap
  autowrap doctor --install-namespace {{ include "autowrap.namespace" . }}

{{- if eq .Values.networkPolicy.controlPlaneCIDR "0.0.0.0/0" }}

The NetworkPolicy autowrap-webhook admits the webhook port from 0.0.0.0/0: set
networkPolicy.controlPlaneCIDR to your control plane's range.
{{- end }}

To remove autowrap, run `autowrap uninstall -n {{ include "autowrap.namespace" . }}` first
(it takes out what autowrap prepared and what would otherwise be left stuck), then
`helm uninstall {{ .Release.Name }} -n {{ .Release.Namespace }}`.
"""

HELMIGNORE = """\
# Not part of the packaged chart.
.DS_Store
*.orig
*~
"""


def project_version() -> str:
    version: str = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    return version


def chart_yaml(app_version: str) -> str:
    return HEADER + yaml.safe_dump({
        "apiVersion": "v2",
        "name": "autowrap",
        "description": "Admission webhook and controller that wrap Volcano Jobs and Pods into "
                       "Kueue-queued AppWrappers. Installs no CRDs: it expects Kueue (with the "
                       "AppWrapper integration), the AppWrapper controller, Volcano and, for "
                       "certificates.mode=cert-manager, cert-manager (see README.md).",
        "type": "application",
        "version": project_version(),
        "appVersion": app_version,
        "kubeVersion": ">=1.30.0-0",
        "keywords": ["kueue", "volcano", "appwrapper", "admission-webhook"],
        "annotations": {
            "autowrap.io/expects": "kueue>=0.19 (oci://registry.k8s.io/kueue/charts/kueue, "
                                   "AppWrapper integration on); appwrapper>=1.1 (its release "
                                   "install.yaml, in appwrapper-system); volcano>=1.10 "
                                   "(volcano-sh/volcano, release volcano in volcano-system); "
                                   "cert-manager (jetstack/cert-manager) for "
                                   "certificates.mode=cert-manager",
        },
    }, sort_keys=False, width=100)  # fmt: skip


def _yaml_block(value: Any, indent: int) -> str:
    return _indent(yaml.safe_dump(value, sort_keys=False, width=100), indent)


def values_yaml(defaults: Defaults, identities: list[str]) -> str:
    resources = _yaml_block(defaults.resources, 2)
    usernames = _yaml_block(identities, 0)
    return f"""{HEADER}
# Where autowrap's objects go. name: empty means the release's namespace (--namespace).
# create: add the Namespace (labelled for the restricted Pod Security Standard, as the kustomize
# install does) to the release; only for a namespace other than the release's own, since Helm
# stores the release there first (else install with --create-namespace).
namespace:
  name: ""
  create: false

# The image, built from the repository's Dockerfile (docs/install.md, "The image"). tag: empty
# means the chart's appVersion; a digest, when given, is used instead of the tag.
image:
  repository: {defaults.repository}
  tag: ""
  digest: ""

# Each replica serves every webhook and runs the adopt-mode controller (one leads at a time);
# the PodDisruptionBudget keeps one available.
replicas: {defaults.replicas}

resources:
{resources}
# Who writes the serving certificate (the Secret autowrap-serving-cert):
#   self-managed: autowrap itself, and it keeps the webhooks' caBundle current;
#   cert-manager: a private CA and certificate issued by cert-manager, whose CA injector fills
#     in caBundle (cert-manager must be installed);
#   provided: you create the kubernetes.io/tls Secret and set caBundle yourself.
certificates:
  mode: {DEFAULT_MODE}

# The NetworkPolicy autowrap-webhook: the webhook port admits only this range. Set it to your
# control plane's (the default admits everyone: a wrong range would refuse every wrapped
# submission). It takes effect only with a CNI that enforces NetworkPolicies.
networkPolicy:
  controlPlaneCIDR: {defaults.cidr}

# The usernames under which the controllers of the kinds autowrap leaves alone create their
# objects (docs/security.md, "Who the controllers are"): change an entry where a controller
# runs under another ServiceAccount or namespace (Volcano's follows its release name and
# namespace: system:serviceaccount:<namespace>:<release>-controllers).
controllerIdentities:
{usernames}
rbac:
  # create on Volcano Jobs, Pods and Services, for the AppWrapper operator's user RBAC check;
  # false only where it runs with userRBACAdmissionCheck: false (docs/security.md).
  componentCreate: true
  # delete on Volcano Jobs and Pods, needed only with the OwnerReferencesPermissionEnforcement
  # admission plugin (OpenShift).
  ownerReferencesEnforcement: false

# The policy files, file name -> text, installed instead of the default policy (which is
# policies/default.yaml with the install namespace excluded). From files:
#   --set-file 'policies.team-a\\.yaml=policies/team-a.yaml'
# Empty: the default policy alone.
policies: {{}}
"""


def _object(properties: Obj, required: Iterable[str] = (), description: str = "") -> Obj:
    schema: Obj = {"type": "object", "additionalProperties": False, "properties": properties}
    if required:
        schema["required"] = list(required)
    if description:
        schema["description"] = description
    return schema


def _string(pattern: str, description: str) -> Obj:
    return {"type": "string", "pattern": pattern, "description": description}


def values_schema() -> Obj:
    # patternProperties, not propertyNames: helm then says the map's path with a name refused.
    quantities: Obj = {
        "type": "object",
        "patternProperties": {
            RESOURCE_NAME_PATTERN: {
                "oneOf": [{"type": "string", "pattern": QUANTITY_PATTERN}, {"type": "number"}]
            },
        },
        "additionalProperties": False,
    }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$comment": GENERATED,
        "title": "autowrap chart values",
        **_object({
            "namespace": _object({
                "name": {"type": "string", "pattern": NAMESPACE_PATTERN,
                         "description": "install namespace; empty: the release's"},
                "create": {"type": "boolean", "description": "add the Namespace to the release"},
            }, ["name", "create"]),
            "image": _object({
                "repository": _string(REPOSITORY_PATTERN, "image name, without tag or digest"),
                "tag": _string(TAG_PATTERN, "image tag; empty: the chart's appVersion"),
                "digest": _string(DIGEST_PATTERN, "image digest, used instead of the tag"),
            }, ["repository", "tag", "digest"]),
            "replicas": {"type": "integer", "minimum": 1},
            "resources": _object({"requests": quantities, "limits": quantities}),
            "certificates": _object({
                "mode": {"enum": list(CERTIFICATE_MODES),
                         "description": "who writes the serving certificate"},
            }, ["mode"]),
            "networkPolicy": _object({
                "controlPlaneCIDR": _string(CIDR_PATTERN, "the control plane's address range"),
            }, ["controlPlaneCIDR"]),
            "controllerIdentities": {
                "type": "array",
                "items": _string(USERNAME_PATTERN, "a controller's username"),
                "uniqueItems": True,
            },
            "rbac": _object({
                "componentCreate": {"type": "boolean"},
                "ownerReferencesEnforcement": {"type": "boolean"},
            }, ["componentCreate", "ownerReferencesEnforcement"]),
            "policies": {
                "type": "object",
                "description": "policy files: file name -> text; empty: the default policy",
                "patternProperties": {POLICY_FILE_PATTERN: {"type": "string", "minLength": 1}},
                "additionalProperties": False,
            },
            # Helm adds it to every chart's values.
            "global": {"type": "object"},
        }, ["namespace", "image", "replicas", "resources", "certificates", "networkPolicy",
            "controllerIdentities", "rbac", "policies"]),
    }  # fmt: skip


def chart_files() -> dict[str, str]:
    """Every generated file of the chart, by its path inside the chart."""
    rendering = render_templates()
    defaults = rendering.defaults
    files = {
        "Chart.yaml": chart_yaml(defaults.tag),
        "values.yaml": values_yaml(defaults, default_controller_identities()),
        "values.schema.json": json.dumps(values_schema(), indent=2) + "\n",
        ".helmignore": HELMIGNORE,
        "templates/_helpers.tpl": TEMPLATE_HEADER + HELPERS,
        "templates/NOTES.txt": TEMPLATE_HEADER + NOTES,
    }
    for kind, blocks in sorted(rendering.templates.items()):
        files[template_file(kind)] = TEMPLATE_HEADER + "".join(blocks)
    return files


def generated_paths(chart: Path | None = None) -> set[str]:
    """The files of ``chart`` (the chart's directory) this tool owns: all but README.md."""
    chart = chart or CHART
    return {
        str(p.relative_to(chart)) for p in chart.rglob("*") if p.is_file() and p.name != "README.md"
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.render_chart", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--check", action="store_true",
                        help="only compare the chart; exit 1 if a generated file is stale")  # fmt: skip
    args = parser.parse_args(argv)
    try:
        files = chart_files()
    except RenderError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    stale = sorted(
        path
        for path, text in files.items()
        if not (CHART / path).is_file() or (CHART / path).read_text(encoding="utf-8") != text
    )
    extra = sorted(generated_paths() - set(files)) if CHART.is_dir() else []
    if args.check:
        for path in stale:
            print(f"stale: {path}")
        for path in extra:
            print(f"not generated: {path}")
        return 1 if stale or extra else 0
    for path in stale:
        target = CHART / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(files[path], encoding="utf-8")
        print(f"written: {path}")
    for path in extra:
        (CHART / path).unlink()
        print(f"removed: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
