"""The request body decoder (``stateboard.errors.decode_json_body``): numbers as jsonb stores them,
decided while parsing, and the depth and NUL walk skipped only where it cannot find anything."""

import decimal
import json
import math

import pytest
from django.conf import settings
from hypothesis import given
from hypothesis import strategies as st

from stateboard.errors import ParseFailed, decode_json_body


def _stored_number(value: float):
    """What jsonb gives back for a float: its digits, so 1e16 is an integer and -0.0 is 0.0."""
    if value == 0:
        return 0.0
    if "e" in repr(value) and value.is_integer():
        return int(decimal.Decimal(repr(value)))  # the digits jsonb keeps, not the float's exact value
    return value


def _as_stored(value):
    if isinstance(value, float):
        return _stored_number(value)
    if isinstance(value, dict):
        return {key: _as_stored(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_as_stored(item) for item in value]
    return value


texts = st.text(alphabet=st.characters(blacklist_characters="\x00"))  # a NUL is refused (below)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | texts,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(texts, children, max_size=4),
    max_leaves=20,
)


@given(json_values)
def test_a_body_decodes_to_its_numbers_as_stored(value):
    decoded = decode_json_body(json.dumps(value).encode())
    assert decoded == _as_stored(value)
    assert json.dumps(decoded) == json.dumps(_as_stored(value))  # -0.0 against 0.0 differ only here


@pytest.mark.parametrize("text, expected", [("1e16", 10**16), ("-0.0", 0.0), ("1.5", 1.5), ("2E3", 2000.0),
                                            ("12345678901234567890.0", 12345678901234567000)])
def test_numbers(text, expected):
    decoded = decode_json_body(f'{{"n": {text}}}'.encode())["n"]
    assert decoded == expected and type(decoded) is type(expected)
    if expected == 0:
        assert math.copysign(1, decoded) == 1


@pytest.mark.parametrize("text", ["1e999", "-1e999", "NaN", "Infinity"])
def test_non_finite_numbers_are_refused(text):
    with pytest.raises(ParseFailed) as refused:
        decode_json_body(f'{{"n": {text}}}'.encode())
    assert refused.value.stable_code == "malformed_json"


@pytest.mark.parametrize("levels", [1, settings.API_MAX_DEPTH - 1, settings.API_MAX_DEPTH, settings.API_MAX_DEPTH + 1,
                                    settings.API_MAX_DEPTH + 20])
@pytest.mark.parametrize("bracket", ["[]", "{}"])
def test_depth_limit(levels, bracket):
    opening, closing = ("[", "]") if bracket == "[]" else ('{"a":', "}")
    body = opening * levels + "1" + closing * levels
    if levels > settings.API_MAX_DEPTH:
        with pytest.raises(ParseFailed) as refused:
            decode_json_body(body.encode())
        assert refused.value.stable_code == "too_deep"
    else:
        assert decode_json_body(body.encode()) is not None


def test_brackets_inside_strings_are_not_nesting():
    body = json.dumps({"note": "[" * (settings.API_MAX_DEPTH * 2), "deep": [[["ok"]]]})
    assert decode_json_body(body.encode())["deep"] == [[["ok"]]]


@pytest.mark.parametrize("body", ['{"a": "x\\u0000y"}', '{"a\\u0000": 1}', '[[[{"a": ["\\u0000"]}]]]'])
def test_an_escaped_nul_is_refused_wherever_it_is(body):
    with pytest.raises(ParseFailed) as refused:
        decode_json_body(body.encode())
    assert refused.value.stable_code == "nul_byte"


def test_an_escaped_backslash_before_u0000_is_no_nul():
    assert decode_json_body(b'{"a": "\\\\u0000"}') == {"a": "\\u0000"}
