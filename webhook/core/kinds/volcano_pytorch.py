"""Volcano's ``pytorch`` job plugin: what it adds to each pod of a Job that keeps it.

autowrap injects the rendezvous env itself, so a Job that also keeps the plugin gets two sets.
The plugin's ``OnPodCreate`` runs before the pod is created and *appends* its entries after the
template's (autowrap's among them), and kubelet keeps the last entry of a name
(pkg/kubelet/kubelet_pods.go, makeEnvironmentVariables: ``tmpEnv[envVar.Name] = runtimeVal``):
where the two disagree, the pod runs with the plugin's value. This module says exactly what the
plugin appends, so the env rule can compare it with autowrap's and ``render --pods`` can show
what the pod really gets.

Everything here follows volcano-sh/volcano at ed72c7c,
pkg/controllers/job/plugins/distributed-framework/pytorch/pytorch.go:
- flags (:74-85): ``--master=master``, ``--worker=worker``, ``--port=23456``,
  ``--wait-master-enabled=false``, ``--wait-master-timeout=300``,
  ``--wait-master-image=busybox:1.36.1``, parsed by Go's ``flag`` with ``ContinueOnError``
  (a bad argument stops the parse; the flags before it stand, the rest keep their defaults);
- no task named ``--master``: nothing at all is added (:93-97);
- per container, never init containers (:123-143): ``MASTER_ADDR`` = the master task's
  ``{hostname or job-master-0}.{subdomain or job}`` (:159-171), ``MASTER_PORT`` = port,
  ``WORLD_SIZE`` = replicas of the master and worker tasks (pods, :148-157), then ``RANK``:
  ``index + 1`` on worker pods, ``0`` on every master pod, none on other tasks' pods;
- the container port ``pytorchjob-port`` on each container without that port number
  (:189-206);
- with ``--wait-master-enabled``, an init container ``wait-for-master`` on worker pods unless
  one of that name exists (:118-119, :173-187, :208-231).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from webhook.core.workload import PodAdditions, PodGroup
from webhook.model import objects
from webhook.model.fields import SPEC
from webhook.model.objects import as_list, as_map

NAME = "pytorch"
PATH = SPEC.child("plugins").key(NAME)
SOURCE = "Volcano's pytorch plugin"
PORT_NAME = "pytorchjob-port"
WAIT_CONTAINER = "wait-for-master"


@dataclass(frozen=True)
class Flags:
    master: str = "master"
    worker: str = "worker"
    port: int = 23456
    wait_master: bool = False
    wait_timeout: int = 300
    wait_image: str = "busybox:1.36.1"


_STRINGS = {"master", "worker", "wait-master-image"}
_INTS = {"port", "wait-master-timeout"}
_BOOLS = {"wait-master-enabled"}


def flags(args: object) -> Flags:
    """The plugin's flags as Go's ``flag.FlagSet.Parse`` reads them (flag.go, parseOne): ``-x``
    or ``--x``, a value after ``=`` or in the next argument (booleans take only ``=``); the parse
    stops at the first non-flag argument, at ``--``, and at the first error."""
    values: dict[str, Any] = {}
    rest = [str(a) for a in as_list(args)]
    while rest:
        arg = rest.pop(0)
        if len(arg) < 2 or arg[0] != "-" or arg == "--":
            break
        name = arg[2:] if arg.startswith("--") else arg[1:]
        if not name or name[0] in "-=":
            break
        name, has_value, value = name.partition("=")
        if name in _BOOLS:
            parsed = _go_bool(value) if has_value else True
            if parsed is None:
                break
            values[name] = parsed
            continue
        if name not in _STRINGS and name not in _INTS:
            break
        if not has_value:
            if not rest:
                break
            value = rest.pop(0)
        if name in _INTS:
            number, ok = _go_int(value)
            values[name] = number  # Go's intValue.Set stores its result even when it fails
            if not ok:
                break
        else:
            values[name] = value
    return Flags(
        master=values.get("master", Flags.master),
        worker=values.get("worker", Flags.worker),
        port=values.get("port", Flags.port),
        wait_master=values.get("wait-master-enabled", Flags.wait_master),
        wait_timeout=values.get("wait-master-timeout", Flags.wait_timeout),
        wait_image=values.get("wait-master-image", Flags.wait_image),
    )


def _go_bool(text: str) -> bool | None:
    """strconv.ParseBool."""
    if text in ("1", "t", "T", "TRUE", "true", "True"):
        return True
    if text in ("0", "f", "F", "FALSE", "false", "False"):
        return False
    return None


def _go_int(text: str) -> tuple[int, bool]:
    """strconv.ParseInt(text, 0, 64) as (value, ok): an optional sign, then a 0x, 0o, 0b or 0
    (octal) prefix, underscores between digits; a syntax error gives 0, an overflow the bound."""
    sign = -1 if text[:1] == "-" else 1
    body = text[1:] if text[:1] in "+-" else text
    prefix = body[:2].lower()
    if prefix in ("0x", "0o", "0b"):
        digits, base = body[2:].removeprefix("_"), {"0x": 16, "0o": 8, "0b": 2}[prefix]
    elif len(body) > 1 and body[0] == "0":
        digits, base = body[1:].removeprefix("_"), 8
    else:
        digits, base = body, 10
    if not digits.isascii() or digits.strip() != digits:
        return 0, False  # Python's int() also takes spaces and non-ASCII digits; Go does not
    try:
        value = sign * int(digits, base)
    except ValueError:
        return 0, False
    if not -(2**63) <= value < 2**63:
        return (2**63 - 1 if value > 0 else -(2**63)), False
    return value, True


def additions(
    obj: Mapping[str, Any], groups: Sequence[PodGroup]
) -> Callable[[PodGroup, int], PodAdditions] | None:
    """What the plugin adds to the ``index``-th pod of a group; None when the Job does not enable
    it or it adds nothing (no task named ``--master``). What all pods share is worked out once."""
    plugins = as_map(as_map(obj.get("spec")).get("plugins"))
    if NAME not in plugins:
        return None
    f = flags(plugins.get(NAME))
    master = next((g for g in groups if g.name == f.master), None)
    if master is None:
        return None
    job = objects.name_of(obj)
    spec = as_map(master.template.get("spec"))
    host = spec.get("hostname") or f"{job}-{master.name}-0"
    addr = f"{host}.{spec.get('subdomain') or job}"
    world = sum(g.replicas for g in groups if g.name in (f.master, f.worker))
    shared = (("MASTER_ADDR", addr), ("MASTER_PORT", str(f.port)), ("WORLD_SIZE", str(world)))
    ports = ({"name": PORT_NAME, "containerPort": f.port},)
    wait = {
        "name": WAIT_CONTAINER,
        "image": f.wait_image,
        "command": ["sh", "-c", _wait_script(addr, f.port, f.wait_timeout)],
    }

    def on_pod(group: PodGroup, index: int) -> PodAdditions:
        rank: tuple[tuple[str, str], ...] = ()
        if group.name == f.worker:
            rank = (("RANK", str(index + 1)),)
        elif group.name == f.master:
            rank = (("RANK", "0"),)
        waits = group.name == f.worker and f.wait_master
        return PodAdditions(SOURCE, PATH, shared + rank, ports, (wait,) if waits else ())

    return on_pod


def missing_master(obj: Mapping[str, Any], task_names: Sequence[str]) -> str | None:
    """The ``--master`` task the plugin looks for, when the Job has no task of that name (and
    so the plugin adds nothing); None otherwise or without the plugin."""
    plugins = as_map(as_map(obj.get("spec")).get("plugins"))
    if NAME not in plugins:
        return None
    master = flags(plugins.get(NAME)).master
    return None if master in task_names else master


def _wait_script(addr: str, port: int, timeout: int) -> str:
    """What the init container does (pytorch.go:173-187 writes it as a longer script): wait
    until the master's port accepts a connection, polling every 2 seconds, at most ``timeout``
    seconds."""
    return f"timeout {timeout} sh -c 'until nc -z {addr} {port}; do sleep 2; done'"
