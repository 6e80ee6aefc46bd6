"""A namespace's effective policy as ``autowrap explain`` says it: the mode and enforcement in
words, then every value with the policy it comes from. Pure: lines of text from a ``Match``."""

from __future__ import annotations

from webhook.core import policy
from webhook.core.policy import Enforcement, Match, Mode

MODE_MEANS = {
    Mode.ADOPT: "the create succeeds, and autowrap's controller creates the AppWrapper from the "
    "object the cluster stored",
    Mode.REDIRECT: "the create is denied, and admission creates the AppWrapper in its place "
    "(autowrap render FILE | kubectl apply -f - creates it yourself)",
}
ENFORCEMENT_MEANS = {
    Enforcement.ENFORCE: "a violation refuses the create",
    Enforcement.AUDIT: "violations are only warnings, and the object is wrapped as it is",
}
DEFAULT = "autowrap's default"


def source(match: Match, path: str) -> str:
    """``policy 'team-a'``, or autowrap's default where no policy sets the value."""
    origin = match.origin(path)
    return DEFAULT if origin == policy.BUILT_IN else f"policy {origin!r}"


def mode_line(match: Match) -> str:
    """Mode and enforcement on one line, each with where it comes from."""
    spec = match.policy.spec
    return (
        f"mode: {spec.mode.value} ({source(match, 'mode')}), enforcement: "
        f"{spec.enforcement.value} ({source(match, 'enforcement')})"
    )


def lines(match: Match) -> list[str]:
    """The mode and enforcement, what they mean, and the table of every effective value."""
    spec = match.policy.spec
    out = [
        f"mode: {spec.mode.value} ({source(match, 'mode')}): {MODE_MEANS[spec.mode]}",
        f"enforcement: {spec.enforcement.value} ({source(match, 'enforcement')}): "
        f"{ENFORCEMENT_MEANS[spec.enforcement]}",
    ]
    if len(match.chain) > 1:
        order = ", then ".join(repr(p.name) for p in match.chain)
        out.append(
            f"effective policy: each value from the first of {order} that sets it, else "
            f"{DEFAULT}; a cap only tightens"
        )
    else:
        out.append(f"effective policy: each value from {match.policy.name!r}, else {DEFAULT}")
    rows = [("FIELD", "FROM", "VALUE")] + [
        (path, source(match, path).removeprefix("policy ").strip("'"), policy.shown(value))
        for path, value in policy.effective_values(spec)
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(2)]
    for field, origin, value in rows:
        out.append(f"  {field.ljust(widths[0])}  {origin.ljust(widths[1])}  {value}".rstrip())
    out += [f"note: {note}" for note in match.notes]
    return out
