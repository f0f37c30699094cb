"""Notifications (SPEC §5.3): rows per user and dedupe key, the API, the page, and who is told what."""

import json

import pytest
from django.core import mail

from ledger import services
from ledger.models import Notification
from tests.factories import client_for, make_operator, page_client
from tests.ledger.test_approvals import ACTION, Crew
from tests.ledger.test_oncall import OnCall

pytestmark = pytest.mark.django_db


def _send(user, key, subject="Something happened", kind="stale_claim"):
    return services.notifications_send(users=[user], kind=kind, subject=subject, url="/claims/review/",
                                       dedupe_key=key)


def test_notifications_send_is_once_per_user_and_dedupe_key():
    """Sending the same key twice makes one row per user; another key is another row."""
    alice, _ = make_operator("owner")
    bob, _ = make_operator("owner")
    first = services.notifications_send(users=[alice, bob.pk], kind="stale_claim", subject="s", url="/u",
                                        dedupe_key="stale:k:1")
    again = services.notifications_send(users=[alice, bob], kind="stale_claim", subject="s", url="/u",
                                        dedupe_key="stale:k:1")
    _send(alice, "stale:k:2")
    assert len(first) == 2 and again == []
    assert Notification.objects.filter(user=alice).count() == 2
    assert Notification.objects.filter(user=bob).count() == 1


def test_notifications_api_lists_the_callers_own_newest_first_with_unread_filter():
    """GET lists only the caller's rows, newest first, {results, next}; ?unread=1 hides read ones."""
    alice, alice_token = make_operator("viewer")
    bob, _ = make_operator("viewer")
    _send(alice, "a", subject="older")
    _send(alice, "b", subject="newer")
    _send(bob, "c", subject="bob's")
    client = client_for(alice_token)
    body = client.get("/api/v1/notifications/").json()
    assert [n["subject"] for n in body["results"]] == ["newer", "older"] and body["next"] is None
    assert set(body["results"][0]) == {"id", "kind", "subject", "url", "created_at", "read_at",
                                       "run", "intent", "claim", "done"}
    older = body["results"][1]["id"]
    read = client.post(f"/api/v1/notifications/{older}/read/")
    assert read.status_code == 200 and read.json()["read_at"] is not None and read.json()["id"] == older
    assert [n["subject"] for n in client.get("/api/v1/notifications/?unread=1").json()["results"]] == ["newer"]
    listed = client.get("/api/v1/notifications/").json()["results"]
    assert [n["subject"] for n in listed] == ["newer", "older"]  # read ones stay listed


def test_notifications_api_pages_with_a_cursor():
    """page_size limits a page; next leads to the rest."""
    alice, token = make_operator("viewer")
    for i in range(3):
        _send(alice, f"k{i}", subject=f"n{i}")
    client = client_for(token)
    page = client.get("/api/v1/notifications/?page_size=2").json()
    assert [n["subject"] for n in page["results"]] == ["n2", "n1"] and page["next"]
    rest = client.get(page["next"]).json()
    assert [n["subject"] for n in rest["results"]] == ["n0"] and rest["next"] is None


def test_notification_read_of_another_users_is_404_and_reading_twice_keeps_the_time():
    """Another user's id (or a malformed one) is 404 notification_not_found; a repeat read changes nothing."""
    alice, alice_token = make_operator("viewer")
    bob, bob_token = make_operator("viewer")
    [nid] = _send(alice, "x")
    assert client_for(bob_token).post(f"/api/v1/notifications/{nid}/read/").json()["code"] == "notification_not_found"
    assert client_for(bob_token).post(f"/api/v1/notifications/{nid}/read/").status_code == 404
    assert client_for(bob_token).post("/api/v1/notifications/nope/read/").status_code == 404
    first = client_for(alice_token).post(f"/api/v1/notifications/{nid}/read/").json()["read_at"]
    assert client_for(alice_token).post(f"/api/v1/notifications/{nid}/read/").json()["read_at"] == first
    assert Notification.objects.get(id=nid).read_at is not None


def test_notifications_api_refuses_anonymous_callers():
    """No token: 401 on both endpoints."""
    alice, _ = make_operator("viewer")
    [nid] = _send(alice, "x")
    anonymous = client_for(None)
    assert anonymous.get("/api/v1/notifications/").status_code == 401
    assert anonymous.post(f"/api/v1/notifications/{nid}/read/").status_code == 401
    assert Notification.objects.get(id=nid).read_at is None


def test_notifications_page_lists_them_and_marks_read_without_js():
    """The page lists the user's notifications with a badge in the menu; the form marks one read."""
    alice, _ = make_operator("viewer")
    alice.set_password("pw")
    alice.save()
    [nid] = _send(alice, "x", subject="Claim billing/timeout is stale")
    browser = page_client(alice)
    page = browser.get("/notifications/")
    html = page.content.decode()
    assert page.status_code == 200 and "Claim billing/timeout is stale" in html
    assert 'data-unread-count aria-label="1 unread"' in html and "Mark read" in html
    answer = browser.post(f"/notifications/{nid}/read/")
    assert answer.status_code == 302 and answer["Location"] == "/notifications/"
    html = browser.get("/notifications/").content.decode()
    assert "data-unread-count" not in html and "Mark read" not in html
    assert "No unread notifications." in browser.get("/notifications/?unread=1").content.decode()


def test_notifications_page_pages_keep_the_unread_filter():
    """Past one page, the newer / older links keep ``unread=1`` when it is set, and only then."""
    alice, _ = make_operator("viewer")
    for n in range(51):
        _send(alice, f"k-{n}")
    browser = page_client(alice)
    unread = browser.get("/notifications/?unread=1").content.decode()
    assert 'href="?unread=1&amp;page=2">Older →' in unread and "page 1 of 2" in unread
    assert 'href="?page=2">Older →' in browser.get("/notifications/").content.decode()
    older = browser.get("/notifications/?unread=1&page=2").content.decode()
    assert 'href="?unread=1&amp;page=1">← Newer' in older and "Older →" not in older


def test_notifications_page_another_users_notification_is_404():
    """Marking someone else's notification read answers 404 and leaves it unread."""
    alice, _ = make_operator("viewer")
    bob, _ = make_operator("viewer")
    [nid] = _send(alice, "x")
    browser = page_client(bob)
    assert browser.post(f"/notifications/{nid}/read/").status_code == 404
    assert Notification.objects.get(id=nid).read_at is None


def test_notifications_email_is_sent_when_mail_is_configured(settings, django_capture_on_commit_callbacks):
    """With mail configured, each new notification mails its user (if they have an address), after commit."""
    settings.NOTIFICATIONS_EMAIL = True
    alice, _ = make_operator("owner")
    alice.email = "alice@example.test"
    alice.save()
    nobody, _ = make_operator("owner")  # no address: the row only
    with django_capture_on_commit_callbacks(execute=True):
        services.notifications_send(users=[alice, nobody], kind="stale_claim", subject="Claim k is stale",
                                    url="/claims/k/history/", dedupe_key="stale:k:1")
    with django_capture_on_commit_callbacks(execute=True):
        services.notifications_send(users=[alice], kind="stale_claim", subject="Claim k is stale",
                                    url="/claims/k/history/", dedupe_key="stale:k:1")  # a repeat: no mail
    assert [(m.to, m.subject) for m in mail.outbox] == [(["alice@example.test"], "[Stateboard] Claim k is stale")]


def test_notifications_email_is_not_sent_unless_configured(settings, django_capture_on_commit_callbacks):
    """Without EMAIL_HOST / EMAIL_BACKEND the notification is a row only."""
    settings.NOTIFICATIONS_EMAIL = False
    alice, _ = make_operator("owner")
    alice.email = "alice@example.test"
    alice.save()
    with django_capture_on_commit_callbacks(execute=True):
        _send(alice, "x")
    assert mail.outbox == []


def test_pending_approval_notifies_editors_once():
    """A high-impact request notifies every editor once (a repeated request adds nothing), not other roles."""
    crew = Crew()
    run_id = crew.to_deploy()
    approval = crew.request(run_id)
    crew.request(run_id, expect=200)  # the same request again: the pending one is answered
    rows = Notification.objects.filter(dedupe_key=f"approval:{approval['id']}")
    assert sorted(rows.values_list("user_id", flat=True)) == sorted([crew.editor.id, crew.editor2.id])
    assert {r.kind for r in rows} == {"approval_pending"}
    assert rows.first().url == f"/approvals/#approval-{approval['id']}"
    assert ACTION["summary"] in rows.first().subject
    assert not Notification.objects.filter(user__in=[crew.owner, crew.oncall, crew.viewer]).exists()


def test_compensation_request_by_oncall_notifies_editors():
    """On-call proposing a compensation notifies the editors, once."""
    crew = OnCall()
    run_id = crew.in_compensate()
    answer = crew.act(run_id, "compensate", reason="undo")
    approval_id = answer.json()["approval"]["id"]
    crew.act(run_id, "compensate", reason="undo again")  # the pending request is kept: no new notification
    rows = Notification.objects.filter(dedupe_key=f"approval:{approval_id}")
    assert list(rows.values_list("user_id", flat=True)) == [crew.editor.id]


def test_escalation_notifies_oncall_once_per_escalation_request():
    """An escalated run notifies on-call once, linking the request; raising it again adds nothing."""
    from ledger.models import Approval, Run

    crew = OnCall()
    run_id = crew.escalated_by_retries()
    escalation = Approval.objects.get(run_id=run_id, kind="escalation", status="pending")
    assert services.RunWriter(Run.objects.get(id=run_id), "system", escalation.created_at).escalation_raise() \
        == escalation  # already open
    rows = Notification.objects.filter(kind="escalation")
    assert list(rows.values_list("user_id", "dedupe_key")) == [(crew.oncall.id, f"escalation:{escalation.id}")]
    assert not Notification.objects.exclude(user=crew.oncall).filter(kind="escalation").exists()


# ---------------------------------------------------------------- what a notification is about, and done

def _unread(user) -> int:
    return Notification.objects.filter(user=user, read_at__isnull=True).count()


def test_an_approval_notification_names_its_run_and_intent_and_is_done_once_decided():
    """The row and the API carry the run and intent; deciding the request marks every editor's row done."""
    from ledger.models import Run

    crew = Crew()
    run_id = crew.to_deploy()
    approval = crew.request(run_id)
    intent = Run.objects.get(id=run_id).intent
    [mine] = client_for(crew.editor2_token).get("/api/v1/notifications/").json()["results"]
    assert (mine["run"], mine["intent"], mine["claim"], mine["done"]) == (run_id, intent, "", "")
    assert f"run {run_id[:8]}" in mine["subject"] and intent in mine["subject"]
    assert (_unread(crew.editor), _unread(crew.editor2)) == (1, 1)

    assert crew.decide(approval["id"]).status_code == 200
    rows = Notification.objects.filter(dedupe_key=f"approval:{approval['id']}")
    assert {(r.done, r.read_at is not None) for r in rows} == {(f"approved by user:{crew.editor.username}", True)}
    assert (_unread(crew.editor), _unread(crew.editor2)) == (0, 0)
    [after] = client_for(crew.editor2_token).get("/api/v1/notifications/").json()["results"]
    assert after["done"] == f"approved by user:{crew.editor.username}" and after["read_at"]


def test_a_rejected_or_expired_request_marks_its_notifications_done():
    """Rejected: "rejected by …"; past its deadline: "expired" — and the expiry's escalation is a new, unread one."""
    from datetime import timedelta

    from django.utils import timezone

    crew = Crew()
    rejected = crew.request(crew.to_deploy())
    assert crew.decide(rejected["id"], "reject", reason="not today").status_code == 200
    assert set(Notification.objects.filter(dedupe_key=f"approval:{rejected['id']}").values_list("done", flat=True)) \
        == {f"rejected by user:{crew.editor.username}"}

    crew = Crew()
    waiting = crew.request(crew.to_deploy())
    services.approvals_expire(now=timezone.now() + timedelta(seconds=crew.wf.approval_ttl_seconds + 60))
    assert set(Notification.objects.filter(dedupe_key=f"approval:{waiting['id']}").values_list("done", flat=True)) \
        == {"expired"}
    [escalation] = Notification.objects.filter(kind="escalation", user=crew.oncall)
    assert escalation.read_at is None and escalation.done == ""


def test_an_escalation_notification_is_done_when_oncall_retries_or_abandons():
    """On-call's retry settles the escalation's notification with who retried it; abandon likewise."""
    crew = OnCall()
    run_id = crew.escalated_by_retries()
    [note] = Notification.objects.filter(kind="escalation", user=crew.oncall)
    assert str(note.run_id) == run_id and note.intent and note.read_at is None
    assert crew.act(run_id, "retry", reason="fixed upstream").status_code == 200
    note.refresh_from_db()
    assert note.done == f"retried by user:{crew.oncall.username}" and note.read_at is not None

    again = OnCall()
    other = again.escalated_by_retries()
    assert again.act(other, "abandon", reason="obsolete").status_code == 200
    assert Notification.objects.get(kind="escalation", user=again.oncall).done == \
        f"abandoned by user:{again.oncall.username}"


def test_mark_all_read_and_the_menu_badge():
    """The Mark all read form reads every unread row of the caller only; the badge endpoint follows, and
    htmx answers the table with a notifications-changed trigger."""
    alice, _ = make_operator("viewer")
    bob, _ = make_operator("viewer")
    for n in range(3):
        _send(alice, f"a{n}")
    _send(bob, "b")
    browser = page_client(alice)
    assert 'aria-label="3 unread"' in browser.get("/notifications/link/").content.decode()
    answer = browser.post("/notifications/read-all/", HTTP_HX_REQUEST="true")
    assert answer.status_code == 200 and "notifications-changed" in json.loads(answer["HX-Trigger"])
    assert 'id="notification-table"' in answer.content.decode() and "<html" not in answer.content.decode()
    assert (_unread(alice), _unread(bob)) == (0, 1)
    assert "data-unread-count" not in browser.get("/notifications/link/").content.decode()
    plain = browser.post("/notifications/read-all/")
    assert plain.status_code == 302 and plain["Location"] == "/notifications/"


def test_the_notifications_page_names_runs_and_claims_in_fixed_queries(django_assert_max_num_queries):
    """Each row links its run (with the intent) or its claim and says what settled it; the query count does
    not grow with the rows."""
    import uuid

    alice, _ = make_operator("viewer")
    run_ids = [uuid.uuid4() for _ in range(30)]
    for n, run_id in enumerate(run_ids):
        services.notifications_send(users=[alice], kind="escalation", subject=f"Escalated {n}", url="/approvals/",
                                    dedupe_key=f"escalation:{n}", run_id=run_id, intent=f"deploy:svc-{n}")
    services.notifications_send(users=[alice], kind="stale_claim", subject="stale", url="/claims/",
                                dedupe_key="stale:billing/timeout:1", claim_key="billing/timeout")
    services.notifications_settle(dedupe_keys=["escalation:0"], done="retried by user:oli")
    browser = page_client(alice)
    browser.get("/notifications/")  # session and caches warm
    with django_assert_max_num_queries(8):
        html = browser.get("/notifications/").content.decode()
    assert f'href="/runs/{run_ids[5]}/"' in html and "deploy:svc-5" in html
    assert 'href="/claims/billing/timeout/history/"' in html
    assert "done: retried by user:oli" in html


def test_a_notification_read_before_the_decision_is_still_marked_done():
    """Reading it first keeps its read time; the decision then says what settled it."""
    crew = Crew()
    approval = crew.request(crew.to_deploy())
    mine = Notification.objects.get(user=crew.editor2, dedupe_key=f"approval:{approval['id']}")
    services.notification_read(notification_id=mine.id, user=crew.editor2)
    read_at = Notification.objects.get(id=mine.id).read_at
    assert crew.decide(approval["id"]).status_code == 200
    mine.refresh_from_db()
    assert mine.done == f"approved by user:{crew.editor.username}" and mine.read_at == read_at


def test_a_badge_poll_after_the_session_ended_sends_the_page_to_sign_in():
    """htmx gets 401 with HX-Redirect (so the login page is never swapped in as the menu link)."""
    from django.test import Client

    answer = Client().get("/notifications/link/", HTTP_HX_REQUEST="true", HTTP_HX_CURRENT_URL="http://testserver/runs/")
    assert answer.status_code == 401 and answer["HX-Redirect"].startswith("/login/?next=")
    assert Client().get("/notifications/link/").status_code == 302  # without htmx: the usual redirect
