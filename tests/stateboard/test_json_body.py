"""The request body decoder (``stateboard.errors.decode_json_body``): numbers as jsonb stores them,
decided while parsing, and the depth and NUL walk skipped only where it cannot find anything."""

import json
import math

import pytest
from django.conf import settings as django_settings
from django.db import connection
from hypothesis import given, settings
from hypothesis import strategies as st

from stateboard.errors import ParseFailed, decode_json_body


def _as_stored(body: str):
    """What PostgreSQL's jsonb makes of a JSON text as Python writes it (psycopg dumps a decoded body with
    ``json.dumps``), read back: the reference, not a restatement of the rule."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT (%s::jsonb)::text", [body])
        return json.loads(cursor.fetchone()[0])


# A NUL is refused (below); lone surrogates are not text jsonb can hold.
texts = st.text(alphabet=st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)))
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | texts,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(texts, children, max_size=4),
    max_leaves=20,
)


@pytest.mark.django_db
@settings(max_examples=200, deadline=None)
@given(json_values)
def test_a_body_decodes_to_what_jsonb_stores(value):
    body = json.dumps(value)
    decoded, stored = decode_json_body(body.encode()), _as_stored(body)
    assert decoded == stored
    assert json.dumps(decoded, sort_keys=True) == json.dumps(stored, sort_keys=True)  # types too: 1e16 an int


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


@pytest.mark.parametrize("levels", [1, django_settings.API_MAX_DEPTH - 1, django_settings.API_MAX_DEPTH, django_settings.API_MAX_DEPTH + 1,
                                    django_settings.API_MAX_DEPTH + 20])
@pytest.mark.parametrize("bracket", ["[]", "{}"])
def test_depth_limit(levels, bracket):
    opening, closing = ("[", "]") if bracket == "[]" else ('{"a":', "}")
    body = opening * levels + "1" + closing * levels
    if levels > django_settings.API_MAX_DEPTH:
        with pytest.raises(ParseFailed) as refused:
            decode_json_body(body.encode())
        assert refused.value.stable_code == "too_deep"
    else:
        assert decode_json_body(body.encode()) is not None


def test_brackets_inside_strings_are_not_nesting():
    body = json.dumps({"note": "[" * (django_settings.API_MAX_DEPTH * 2), "deep": [[["ok"]]]})
    assert decode_json_body(body.encode())["deep"] == [[["ok"]]]


@pytest.mark.parametrize("body", ['{"a": "x\\u0000y"}', '{"a\\u0000": 1}', '[[[{"a": ["\\u0000"]}]]]'])
def test_an_escaped_nul_is_refused_wherever_it_is(body):
    with pytest.raises(ParseFailed) as refused:
        decode_json_body(body.encode())
    assert refused.value.stable_code == "nul_byte"


def test_an_escaped_backslash_before_u0000_is_no_nul():
    assert decode_json_body(b'{"a": "\\\\u0000"}') == {"a": "\\u0000"}


@pytest.mark.parametrize("body", ['{"a": "x\\ud800"}', '{"\\uDC00": 1}', '[[{"a": ["ok", "\\udbff"]}]]',
                                  '{"a": "\\ude00\\ud83d"}'])
def test_half_a_surrogate_pair_is_refused(body):
    """It has no UTF-8 form: hashing it (canonical JSON) or storing it (jsonb) would fail with a 500."""
    with pytest.raises(ParseFailed) as refused:
        decode_json_body(body.encode())
    assert refused.value.stable_code == "malformed_json"


def test_a_whole_surrogate_pair_is_one_character():
    assert decode_json_body(b'{"a": "\\ud83d\\ude00"}') == {"a": "\U0001F600"}


@pytest.mark.django_db
def test_an_event_with_half_a_surrogate_pair_gets_400_and_nothing_is_written():
    from ledger.models import LedgerEvent
    from tests.factories import client_for, make_agent, make_workflow
    from tests.ledger.helpers import AgentDriver

    _, token = make_agent()
    client = client_for(token)
    run_id = AgentDriver(client, make_workflow(stages=["build"]).slug).trigger()["id"]
    for _ in range(2):  # the second with the token cached: the fast path hands it to the full stack
        response = client.post(f"/api/v1/runs/{run_id}/events/",
                               '{"stage": "build", "kind": "proposed", "data": {"s": "\\ud800"}}',
                               content_type="application/json")
        assert (response.status_code, response.json()["code"]) == (400, "malformed_json"), response.content
    assert not LedgerEvent.objects.filter(run_id=run_id, kind="proposed").exists()
