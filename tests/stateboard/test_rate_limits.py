"""Who the rate limit counts (issue 39): the client address is the socket's unless trusted proxies are
configured (item 12); sign-in is limited per user name and per address by the same limiter, with a
lockout the audit records (item 8)."""

import itertools

import pytest
from django.test import override_settings

from ledger.models import AuditEntry
from tests.factories import client_for, make_operator

pytestmark = pytest.mark.django_db

_hosts = itertools.count(1)
PASSWORD = "correct horse battery"


def fresh_address() -> str:
    """An address no other test used (the counters live in a cache shared by the whole test process)."""
    n = next(_hosts)
    return f"198.51.{n // 250}.{n % 250 + 1}"


def anonymous_calls(n: int, **headers) -> list[int]:
    return [client_for(None).get("/api/v1/runs/", **headers).status_code for _ in range(n)]


@override_settings(API_RATE_LIMITS="anon=2/minute")
def test_the_anonymous_limit_counts_the_socket_address_not_x_forwarded_for():
    """Without trusted proxies, a client changing its X-Forwarded-For gets no new allowance."""
    address = fresh_address()
    answers = [client_for(None).get("/api/v1/runs/", REMOTE_ADDR=address, HTTP_X_FORWARDED_FOR=f"10.0.0.{i}")
               .status_code for i in range(3)]
    assert answers == [401, 401, 429]
    assert anonymous_calls(1, REMOTE_ADDR=fresh_address()) == [401]  # another socket address: its own count


@override_settings(API_RATE_LIMITS="anon=2/minute", NUM_PROXIES=1)
def test_behind_a_trusted_proxy_the_address_it_forwarded_is_counted():
    """With NUM_PROXIES=1, the proxy's entry (the last) is the client: what the client wrote before it is
    never read, and another client behind the same proxy has its own count."""
    proxy, client = fresh_address(), fresh_address()
    answers = [client_for(None).get("/api/v1/runs/", REMOTE_ADDR=proxy,
                                    HTTP_X_FORWARDED_FOR=f"10.0.0.{i}, {client}").status_code for i in range(3)]
    assert answers == [401, 401, 429]
    assert anonymous_calls(1, REMOTE_ADDR=proxy, HTTP_X_FORWARDED_FOR=fresh_address()) == [401]


@override_settings(API_RATE_LIMITS="anon=2/minute", NUM_PROXIES=2)
def test_two_trusted_proxies_read_the_second_entry_from_the_right():
    outer_proxy, inner_proxy, client = fresh_address(), fresh_address(), fresh_address()
    answers = [client_for(None).get("/api/v1/runs/", REMOTE_ADDR=inner_proxy,
                                    HTTP_X_FORWARDED_FOR=f"10.1.0.{i}, {client}, {outer_proxy}").status_code
               for i in range(3)]
    assert answers == [401, 401, 429]


# ---------------------------------------------------------------- sign-in

def person(name: str | None = None):
    user, _ = make_operator("viewer", name=name)
    user.set_password(PASSWORD)
    user.save(update_fields=["password"])
    return user


def sign_in(user_name: str, password: str, address: str, path: str = "/login/"):
    from django.test import Client

    client = Client()
    response = client.post(path, {"username": user_name, "password": password}, REMOTE_ADDR=address)
    return response, client


def signed_in(client) -> bool:
    return "_auth_user_id" in client.session


@override_settings(API_RATE_LIMITS="login=3/minute")
def test_sign_in_is_limited_per_user_name_and_the_lockout_is_audited_once():
    """Three wrong passwords for one name (from three addresses): the name is locked out — the right
    password is refused too (429, not signed in); the lockout is audited once; another name still
    signs in."""
    vera = person()
    for _ in range(3):
        response, _ = sign_in(vera.username, "wrong", fresh_address())
        assert response.status_code == 200  # the form again, with its error
    for _ in range(2):
        response, client = sign_in(vera.username, PASSWORD, fresh_address())
        assert response.status_code == 429 and int(response["Retry-After"]) >= 1
        assert not signed_in(client)
    lockouts = AuditEntry.objects.filter(action="sign_in", outcome="refused", code="locked_out")
    assert [(e.target, e.actor.startswith("anonymous:")) for e in lockouts] == [(f"name:{vera.username}", True)]
    other = person()
    response, client = sign_in(other.username, PASSWORD, fresh_address())
    assert response.status_code == 302 and signed_in(client)


@override_settings(API_RATE_LIMITS="login=3/minute")
def test_sign_in_is_limited_per_address_whatever_the_names():
    address, vera = fresh_address(), person()
    for name in ("a", "b", "c"):
        assert sign_in(name, "wrong", address)[0].status_code == 200
    response, client = sign_in(vera.username, PASSWORD, address)
    assert response.status_code == 429 and not signed_in(client)
    assert AuditEntry.objects.filter(action="sign_in", code="locked_out", target=f"address:{address}").count() == 1
    response, client = sign_in(vera.username, PASSWORD, fresh_address())  # the name itself is not locked
    assert response.status_code == 302 and signed_in(client)


@override_settings(API_RATE_LIMITS="login=2/minute")
def test_a_hostile_user_name_is_locked_out_like_any_other():
    """A NUL, control characters or 10,000 characters in the name: counted, locked out and audited
    (printable, bounded), never a 500."""
    for name in ("ev\x00il", "\x01\x02" + "x" * 10_000):
        answers = [sign_in(name, "wrong", fresh_address())[0].status_code for _ in range(3)]
        refused = 400 if "\x00" in name else 200  # (a form holding a NUL is refused whole, after it is counted)
        assert answers == [refused, refused, 429]
    targets = list(AuditEntry.objects.filter(action="sign_in", code="locked_out").values_list("target", flat=True))
    assert sorted(targets) == sorted(["name:evil", "name:" + "x" * 150])


@override_settings(API_RATE_LIMITS="agent=600/minute,human=120/minute,anon=60/minute")
def test_with_rate_limits_on_sixty_wrong_passwords_lock_the_name_out():
    """The reported attack, with API_RATE_LIMITS naming no `login` class: sign-in gets anon's rate."""
    vera = person()
    addresses = [fresh_address() for _ in range(6)]
    answers = [sign_in(vera.username, f"guess-{i}", addresses[i % 6])[0].status_code for i in range(60)]
    assert set(answers) == {200}
    response, client = sign_in(vera.username, PASSWORD, fresh_address())
    assert response.status_code == 429 and not signed_in(client)


@override_settings(API_RATE_LIMITS="login=2/minute")
def test_the_admins_sign_in_is_the_same_door():
    """/admin/login/ counts against the same name and address as /login/."""
    boss = person()
    boss.is_staff = boss.is_superuser = True
    boss.save(update_fields=["is_staff", "is_superuser"])
    sign_in(boss.username, "wrong", fresh_address())
    sign_in(boss.username, "wrong", fresh_address(), path="/admin/login/")
    response, client = sign_in(boss.username, PASSWORD, fresh_address(), path="/admin/login/")
    assert response.status_code == 429 and not signed_in(client)
    assert AuditEntry.objects.filter(action="sign_in", code="locked_out", target=f"name:{boss.username}").count() == 1


def test_without_rate_limits_sign_in_is_not_limited():
    vera = person()
    address = fresh_address()
    assert {sign_in(vera.username, "wrong", address)[0].status_code for _ in range(5)} == {200}
    assert sign_in(vera.username, PASSWORD, address)[0].status_code == 302
