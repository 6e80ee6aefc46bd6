"""``webhook.model.patches.make_patch``: the patch, applied by the ``jsonpatch`` package, gives the target."""

from __future__ import annotations

from typing import Any

import jsonpatch
import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from webhook.model.patches import escape, make_patch, same

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53), max_value=2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=5)
)
keys = st.sampled_from(["a", "b", "c", "~", "/", "a/b", "~1", "~0x", "", "0", "1"]) | st.text(
    max_size=4
)
json_values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=6) | st.dictionaries(keys, children, max_size=6),
    max_leaves=40,
)


def exact(value: Any) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def apply(src: Any, ops: list[dict[str, Any]]) -> Any:
    return jsonpatch.apply_patch(src, ops, in_place=False)


def check(src: Any, dst: Any) -> list[dict[str, Any]]:
    before = exact(src)
    ops = make_patch(src, dst)
    assert exact(src) == before, "make_patch changed its input"
    assert exact(apply(src, ops)) == exact(dst)
    assert all(op["op"] in ("add", "replace", "remove") for op in ops)
    return ops


@settings(max_examples=200, deadline=None, derandomize=True)
@given(json_values, json_values)
def test_applying_the_patch_to_the_original_gives_the_target(src: Any, dst: Any) -> None:
    check(src, dst)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(st.dictionaries(keys, json_values, max_size=6), st.data())
def test_small_edits_of_a_document_give_small_patches(src: Any, data: st.DataObject) -> None:
    dst = orjson.loads(orjson.dumps(src))
    for key in data.draw(st.lists(keys, max_size=3)):
        dst[key] = data.draw(json_values)
    check(src, dst)


def test_equal_documents_give_no_ops() -> None:
    doc = {"a": [1, {"b": "c"}], "d": None}
    assert make_patch(doc, orjson.loads(orjson.dumps(doc))) == []


def test_key_order_alone_is_no_change() -> None:
    assert make_patch({"a": 1, "b": [2]}, {"b": [2], "a": 1}) == []


def test_bool_int_and_float_are_different_values() -> None:
    assert check({"x": 1}, {"x": True}) == [{"op": "replace", "path": "/x", "value": True}]
    assert check([1], [1.0]) == [{"op": "replace", "path": "/0", "value": 1.0}]
    assert check({"x": [0, {"y": 1}]}, {"x": [0, {"y": True}]}) == [
        {"op": "replace", "path": "/x/1/y", "value": True}
    ]
    assert not same({"a": 1}, {"a": 1.0})


def test_pointer_escaping() -> None:
    assert escape("a/b~c") == "a~1b~0c"
    assert escape("~1") == "~01"
    ops = check({"metadata": {"labels": {}}}, {"metadata": {"labels": {"a.io/b~c": "x"}}})
    assert ops == [{"op": "add", "path": "/metadata/labels/a.io~1b~0c", "value": "x"}]


def test_appends_and_inserts_are_adds() -> None:
    env = [{"name": "A"}, {"name": "B"}]
    assert check({"env": env}, {"env": [*env, {"name": "C"}]}) == [
        {"op": "add", "path": "/env/2", "value": {"name": "C"}}
    ]
    assert check([1, 2, 3], [0, 1, 2, 3]) == [{"op": "add", "path": "/0", "value": 0}]
    assert check([1, 2, 3], [1, 3]) == [{"op": "remove", "path": "/1"}]
    assert check([1, 2, 3, 4], [1, 4]) == [
        {"op": "remove", "path": "/2"},
        {"op": "remove", "path": "/1"},
    ]


def test_root_replacement() -> None:
    assert check({"a": 1}, [1]) == [{"op": "replace", "path": "", "value": [1]}]
    assert check(1, "x") == [{"op": "replace", "path": "", "value": "x"}]
