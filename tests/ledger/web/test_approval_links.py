"""Approvals by e-mail (SPEC §17): the message of a pending request carries each recipient's own Approve
and Reject links, taken here out of the real message (Django's locmem outbox). A link opens a confirmation
page for its addressee alone (a GET decides nothing); the POST decides through the inbox's service,
``via: email``, once; a used, expired, altered or decided link says why."""

import re
from datetime import timedelta
from urllib.parse import parse_qs, urlsplit

import pytest
from django.contrib.auth.models import Group
from django.core import mail, signing
from django.db import IntegrityError
from django.test import Client
from django.utils import timezone

from ledger import services
from ledger.approval_links import SALT, approval_link_paths
from ledger.models import Approval, ApprovalLinkUse, AuditEntry, LedgerEvent, Run
from tests.factories import make_operator, page_client, texts
from tests.ledger.test_approvals import Crew
from tests.ledger.test_oncall import OnCall

pytestmark = pytest.mark.django_db

LINK = re.compile(r"^(Approve|Reject|Retry the run|Abandon the run): (\S+)$", re.M)
PUBLIC = "https://stateboard.example"


def link_to(approval_id, user, verb: str = "approve") -> str:
    """The path of ``user``'s ``verb`` link of a request, as the e-mail would carry it."""
    approval = Approval.objects.get(id=approval_id)
    paths = dict(zip(("approve", "reject"), (path for _, path in approval_link_paths(approval, user.pk))))
    return paths[verb]


def links_in_mail(user) -> dict[str, str]:
    """{label: path} of the links in the one approval message mailed to ``user``."""
    [message] = [m for m in mail.outbox if m.to == [user.email]]
    found = {label: url for label, url in LINK.findall(message.body)}
    assert all(url.startswith(PUBLIC + "/approvals/") for url in found.values()), message.body
    return {label: url.removeprefix(PUBLIC) for label, url in found.items()}


def _with_address(*people):
    for person in people:
        person.email = f"{person.username}@example.test"
        person.save(update_fields=["email"])


@pytest.fixture
def mailed(settings, django_capture_on_commit_callbacks):
    """Two editors with an address; a high-impact request mailed to both. Returns (crew, approval)."""
    settings.NOTIFICATIONS_EMAIL = True
    settings.STATEBOARD_PUBLIC_URL = PUBLIC
    crew = Crew()
    _with_address(crew.editor, crew.editor2, crew.viewer)
    run_id = crew.to_deploy()
    with django_capture_on_commit_callbacks(execute=True):
        approval = crew.request(run_id)
    return crew, approval


def _written(approval_id) -> tuple:
    """What a decision would change: the request, the link uses, the run's events and state."""
    approval = Approval.objects.get(id=approval_id)
    return (approval.status, approval.decided_by, ApprovalLinkUse.objects.count(),
            LedgerEvent.objects.filter(run_id=approval.run_id).count(), Run.objects.get(id=approval.run_id).state)


def test_each_recipient_gets_approve_and_reject_links_of_their_own(mailed):
    crew, approval = mailed
    assert sorted(m.to[0] for m in mail.outbox) == sorted([crew.editor.email, crew.editor2.email])  # editors only
    mine, theirs = links_in_mail(crew.editor), links_in_mail(crew.editor2)
    assert set(mine) == set(theirs) == {"Approve", "Reject"}
    assert not set(mine.values()) & set(theirs.values())
    for person, links in ((crew.editor, mine), (crew.editor2, theirs)):
        for verb, path in (("approve", links["Approve"]), ("reject", links["Reject"])):
            assert path.startswith(f"/approvals/{approval['id']}/email/")
            token = path.rstrip("/").rsplit("/", 1)[1]
            data = signing.loads(token, salt=SALT)  # signed by Django's signing, bound to request, action, person
            deadline = Approval.objects.get(id=approval["id"]).deadline
            assert (data["a"], data["d"], data["u"], data["v"], data["e"]) == (
                approval["id"], Approval.objects.get(id=approval["id"]).action_digest, person.pk, verb,
                int(deadline.timestamp()))
    assert "decide once" in mail.outbox[0].body and f"{PUBLIC}/approvals/#approval-{approval['id']}" in mail.outbox[0].body


def test_a_get_shows_the_confirmation_and_decides_nothing(mailed, django_assert_max_num_queries):
    crew, approval = mailed
    path = links_in_mail(crew.editor)["Approve"]
    client = page_client(crew.editor)
    before = _written(approval["id"])
    with django_assert_max_num_queries(12):
        page = client.get(path)
    assert page.status_code == 200 and 'data-action="approve"' in texts(page) and "csrfmiddlewaretoken" in texts(page)
    assert client.get(path).status_code == 200
    assert _written(approval["id"]) == before and before[0] == "pending"


def test_approving_by_link_decides_as_the_addressee_via_email(mailed):
    crew, approval = mailed
    path = links_in_mail(crew.editor)["Approve"]
    answer = page_client(crew.editor).post(path, {"reason": "looks right"})
    assert answer.status_code == 302
    decided = Approval.objects.get(id=approval["id"])
    assert (decided.status, decided.decided_by, decided.reason) == ("approved", f"user:{crew.editor.username}",
                                                                    "looks right")
    event = LedgerEvent.objects.get(run_id=decided.run_id, kind="approved")
    assert event.actor == f"user:{crew.editor.username}" and event.data["via"] == "email"
    assert answer["Location"] == f"/runs/{decided.run_id}/"
    assert list(ApprovalLinkUse.objects.values_list("approval_id", "user_id", "decision")) == [
        (decided.id, crew.editor.pk, "approve")]


def test_a_reject_needs_its_reason_and_a_refused_confirmation_spends_nothing(mailed):
    crew, approval = mailed
    path = links_in_mail(crew.editor)["Reject"]
    client = page_client(crew.editor)
    before = _written(approval["id"])
    refused = client.post(path, {"reason": "  "})
    assert refused.status_code == 302 and refused["Location"] == path  # back to the link, which says why
    again = client.get(path)
    assert again.status_code == 200 and "A reason is required." in texts(again)
    assert _written(approval["id"]) == before
    assert client.post(path, {"reason": "wrong target"}).status_code == 302
    decided = Approval.objects.get(id=approval["id"])
    assert (decided.status, decided.reason, Run.objects.get(id=decided.run_id).state) == (
        "rejected", "wrong target", "abandoned")
    assert LedgerEvent.objects.get(run_id=decided.run_id, kind="rejected").data["via"] == "email"


def test_a_forwarded_link_is_refused_to_anyone_else_and_writes_nothing(mailed):
    crew, approval = mailed
    path = links_in_mail(crew.editor)["Approve"]
    before = _written(approval["id"])
    for other in (crew.editor2, crew.viewer, crew.owner):  # another editor too: the link is not theirs
        client = page_client(other)
        for answer in (client.get(path), client.post(path, {"reason": "forwarded"})):
            assert answer.status_code == 403 and "mailed to someone else" in texts(answer), (other, answer)
    assert _written(approval["id"]) == before
    refused = AuditEntry.objects.filter(action="approval_link", outcome="refused", code="not_the_addressee")
    assert refused.count() == 6 and set(refused.values_list("target", flat=True)) == {approval["id"]}


def test_a_signed_out_reader_is_sent_to_sign_in_and_back_to_the_link(mailed):
    crew, approval = mailed
    path = links_in_mail(crew.editor)["Approve"]
    before = _written(approval["id"])
    anonymous = Client()
    sent = anonymous.get(path)
    assert sent.status_code == 302 and urlsplit(sent["Location"]).path == "/login/"
    assert parse_qs(urlsplit(sent["Location"]).query)["next"] == [path]
    assert anonymous.post(path, {"reason": "x"}).status_code == 302
    crew.editor.set_password("correct horse")
    crew.editor.save()
    signed_in = anonymous.post("/login/", {"username": crew.editor.username, "password": "correct horse", "next": path})
    assert signed_in.status_code == 302 and signed_in["Location"] == path
    assert anonymous.get(path).status_code == 200
    assert _written(approval["id"]) == before


def test_a_used_link_and_its_pair_decide_nothing_more(mailed):
    crew, approval = mailed
    links = links_in_mail(crew.editor)
    client = page_client(crew.editor)
    assert client.post(links["Approve"], {"reason": ""}).status_code == 302
    after = _written(approval["id"])
    for path in (links["Approve"], links["Reject"]):
        for answer in (client.get(path), client.post(path, {"reason": "again"})):
            assert answer.status_code == 410 and "used already" in texts(answer), texts(answer)
    assert _written(approval["id"]) == after


def test_the_database_holds_a_link_to_one_use():
    crew = Crew()
    approval = Approval.objects.get(id=crew.request(crew.to_deploy())["id"])
    ApprovalLinkUse.objects.create(nonce="n-1", approval=approval, user=crew.editor, decision="approve",
                                   used_at=timezone.now())
    with pytest.raises(IntegrityError):
        ApprovalLinkUse.objects.create(nonce="n-1", approval=approval, user=crew.editor, decision="reject",
                                       used_at=timezone.now())


def test_an_altered_link_is_refused_with_a_page_that_says_so(mailed):
    crew, approval = mailed
    path = links_in_mail(crew.editor)["Approve"]
    prefix, token = path.rstrip("/").rsplit("/", 1)
    payload, stamp, signature = token.rsplit(":", 2)
    flipped = signature[:-1] + ("A" if signature[-1] != "A" else "B")
    other = Crew()
    elsewhere = other.request(other.to_deploy())["id"]
    client = page_client(crew.editor)
    before = _written(approval["id"])
    for bad in (f"{prefix}/{payload}:{stamp}:{flipped}/", f"{prefix}/{payload[:-2]}:{stamp}:{signature}/",
                f"{prefix}/x/", path.replace(approval["id"], elsewhere)):
        for answer in (client.get(bad), client.post(bad, {"reason": "r"})):
            assert answer.status_code == 400 and "not valid" in texts(answer), (bad, answer.status_code)
    assert _written(approval["id"]) == before


def test_an_expired_request_s_links_decide_nothing(mailed):
    crew, approval = mailed
    path = links_in_mail(crew.editor)["Approve"]
    client = page_client(crew.editor)
    Approval.objects.filter(id=approval["id"]).update(deadline=timezone.now() - timedelta(minutes=1))
    before = _written(approval["id"])
    for answer in (client.get(path), client.post(path, {"reason": "late"})):
        assert answer.status_code == 410 and "deadline passed" in texts(answer)
    assert _written(approval["id"]) == before
    services.approvals_expire()
    answer = client.get(path)
    assert answer.status_code == 410 and "no longer pending" in texts(answer)


def test_a_request_decided_in_the_inbox_leaves_its_links_saying_so(mailed):
    crew, approval = mailed
    path = links_in_mail(crew.editor)["Reject"]
    assert crew.decide(approval["id"], token=crew.editor2_token).status_code == 200
    answer = page_client(crew.editor).post(path, {"reason": "too late"})
    assert answer.status_code == 410 and f"already approved by user:{crew.editor2.username}" in texts(answer)
    assert not ApprovalLinkUse.objects.exists()


def test_a_link_follows_the_inbox_rules_when_its_addressee_lost_the_role(mailed):
    crew, approval = mailed
    path = links_in_mail(crew.editor)["Approve"]
    crew.editor.groups.remove(Group.objects.get(name="editor"))
    crew.editor.groups.add(Group.objects.get_or_create(name="viewer")[0])
    before = _written(approval["id"])
    answer = page_client(crew.editor).post(path, {"reason": "x"})
    assert answer.status_code == 403 and _written(approval["id"]) == before


def test_an_escalation_mails_on_call_retry_and_abandon_links(settings, django_capture_on_commit_callbacks):
    settings.NOTIFICATIONS_EMAIL = True
    settings.STATEBOARD_PUBLIC_URL = PUBLIC
    desk = OnCall(max_retries=1)
    _with_address(desk.oncall, desk.editor)
    with django_capture_on_commit_callbacks(execute=True):
        run_id = desk.escalated_by_retries()
    links = links_in_mail(desk.oncall)
    assert set(links) == {"Retry the run", "Abandon the run"} and [m.to for m in mail.outbox] == [[desk.oncall.email]]
    answer = page_client(desk.oncall).post(links["Retry the run"], {"reason": "flaky runner"})
    assert answer.status_code == 302
    retried = LedgerEvent.objects.get(run_id=run_id, kind="retried")
    assert retried.data["via"] == "email" and retried.actor == f"user:{desk.oncall.username}"


def test_no_links_without_mail_configured(settings, django_capture_on_commit_callbacks):
    settings.NOTIFICATIONS_EMAIL = False
    crew = Crew()
    _with_address(crew.editor)
    with django_capture_on_commit_callbacks(execute=True):
        crew.request(crew.to_deploy())
    assert mail.outbox == []


def test_a_second_editor_s_own_link_still_decides_after_the_first_is_refused(mailed):
    """The forwarded attempt spent nothing: the addressee's own link (and the other editor's) still work."""
    crew, approval = mailed
    mine = links_in_mail(crew.editor)["Approve"]
    assert page_client(crew.editor2).post(mine, {"reason": "forwarded"}).status_code == 403
    theirs = links_in_mail(crew.editor2)["Approve"]
    assert page_client(crew.editor2).post(theirs, {"reason": "mine"}).status_code == 302
    assert Approval.objects.get(id=approval["id"]).decided_by == f"user:{crew.editor2.username}"


def test_a_link_made_for_a_person_is_theirs(mailed):
    crew, approval = mailed
    viewer, _ = make_operator("viewer")
    path = link_to(approval["id"], viewer)
    assert page_client(viewer).get(path).status_code == 403  # theirs, but a viewer decides nothing


# ---------------------------------------------------------------- over real HTTP, against a live server

CSRF = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')


def _csrf(page) -> str:
    found = CSRF.search(page.text)
    assert found, page.text[:500]
    return found.group(1)


def test_over_http_the_mailed_link_signs_in_confirms_and_decides_once(settings, live_server):
    """A real HTTP client follows the link out of the real message: sent to sign in and back, a page that
    decides nothing, the POST that decides ``via: email``; the same link again, and a forwarded one, refused."""
    import httpx

    settings.NOTIFICATIONS_EMAIL = True
    settings.STATEBOARD_PUBLIC_URL = live_server.url
    crew = Crew()
    _with_address(crew.editor, crew.editor2)
    for person in (crew.editor, crew.editor2):
        person.set_password("correct horse")
        person.save()
    approval = crew.request(crew.to_deploy())
    [message] = [m for m in mail.outbox if m.to == [crew.editor.email]]
    urls = dict(LINK.findall(message.body))
    assert urls["Approve"].startswith(live_server.url)

    def browser() -> httpx.Client:
        return httpx.Client(follow_redirects=True, timeout=10, headers={"Connection": "close"})

    def sign_in(client, person, page):
        assert page.url.path == "/login/", page.url
        return client.post(str(page.url), data={"csrfmiddlewaretoken": _csrf(page), "username": person.username,
                                                "password": "correct horse", "next": page.url.params["next"]})

    with browser() as mine, browser() as forwarded:
        confirm = sign_in(mine, crew.editor, mine.get(urls["Approve"]))
        assert confirm.status_code == 200 and str(confirm.url) == urls["Approve"], confirm.url
        assert 'data-action="approve"' in confirm.text
        assert Approval.objects.get(id=approval["id"]).status == "pending"  # opening the link decided nothing

        elsewhere = sign_in(forwarded, crew.editor2, forwarded.get(urls["Approve"]))
        assert elsewhere.status_code == 403 and "mailed to someone else" in elsewhere.text
        refused = forwarded.post(urls["Approve"], data={"csrfmiddlewaretoken": _csrf(elsewhere), "reason": "forwarded"})
        assert refused.status_code == 403 and "mailed to someone else" in refused.text
        assert Approval.objects.get(id=approval["id"]).status == "pending"

        done = mine.post(urls["Approve"], data={"csrfmiddlewaretoken": _csrf(confirm), "reason": "by mail"})
        decided = Approval.objects.get(id=approval["id"])
        assert done.status_code == 200 and done.url.path == f"/runs/{decided.run_id}/"
        assert (decided.status, decided.decided_by) == ("approved", f"user:{crew.editor.username}")
        assert LedgerEvent.objects.get(run_id=decided.run_id, kind="approved").data["via"] == "email"

        again = mine.post(urls["Reject"], data={"csrfmiddlewaretoken": _csrf(confirm), "reason": "changed my mind"})
        assert again.status_code == 410 and "used already" in again.text
    assert Approval.objects.get(id=approval["id"]).status == "approved" and ApprovalLinkUse.objects.count() == 1


def test_an_approve_link_of_someone_who_voted_elsewhere_says_so_and_is_not_spent(
        settings, django_capture_on_commit_callbacks):
    """Quorum 2: an editor who already voted in the inbox or the API finds their Approve link saying so (410,
    nothing written, the link not spent), while its Reject link still works (a voter may still reject)."""
    settings.NOTIFICATIONS_EMAIL, settings.STATEBOARD_PUBLIC_URL = True, PUBLIC
    crew = Crew(approval_rules={"deploy": {"approvers": ["role:editor"], "quorum": 2}})
    _with_address(crew.editor, crew.editor2)
    run_id = crew.to_deploy()
    with django_capture_on_commit_callbacks(execute=True):
        approval = crew.request(run_id)
    assert crew.decide(approval["id"]).status_code == 200  # editor's vote, through the API
    links = links_in_mail(crew.editor)
    before = _written(approval["id"])
    for answer in (page_client(crew.editor).get(links["Approve"]),
                   page_client(crew.editor).post(links["Approve"], {"reason": "again"})):
        assert answer.status_code == 410 and "You approved this request already" in texts(answer)
    assert _written(approval["id"]) == before and before[0] == "pending"
    answer = page_client(crew.editor).post(links["Reject"], {"reason": "found a problem"})
    assert answer.status_code in (200, 302) and Approval.objects.get(id=approval["id"]).status == "rejected"
    assert LedgerEvent.objects.get(run_id=run_id, kind="rejected").data["via"] == "email"


def test_the_file_backend_takes_its_folder_from_the_environment(tmp_path):
    """API.md (settled points): e-mail is configured from the environment, ``EMAIL_FILE_PATH`` for the file
    backend: a message sent by a process started with them lands in that folder."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "EMAIL_BACKEND": "django.core.mail.backends.filebased.EmailBackend",
           "EMAIL_FILE_PATH": str(tmp_path), "DJANGO_SETTINGS_MODULE": "stateboard.settings"}
    code = ("import django; django.setup(); from django.core.mail import send_mail; "
            "send_mail('[Stateboard] test', 'body', 'a@example.test', ['b@example.test'])")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    [written] = list(tmp_path.iterdir())
    assert "[Stateboard] test" in written.read_text()
