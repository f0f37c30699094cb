"""Template helpers shared by every page: ``redact`` and ``redact_json`` filters, ``{% when dt %}``."""

from datetime import datetime
from datetime import timezone as dt_timezone

from django import template
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.utils.html import format_html
from django.utils.timesince import timesince

from ledger.authorizers import BY_NAME
from ledger.domain.attributes import query_text
from ledger.identities import DEMO_TIDYING
from stateboard.errors import Refused
from stateboard.moments import duration_words
from stateboard.redact import redact as redact_text
from stateboard.redact import redact_json as redact_json_text

register = template.Library()

TIME_MODES = ("utc", "local", "relative")


@register.filter
def redact(value):
    return redact_text(value)


@register.filter
def redact_json(value):
    return redact_json_text(value)


@register.filter
def attr_query(value) -> str:
    """A run attribute's value as ``attr.<key>=`` writes it (SPEC §15: ``true``, ``2``, the text), redacted as
    every value a page shows."""
    return redact_text(query_text(value))


@register.filter
def tail(text, length=28):
    """The end of a long name, which tells similar ones apart ("…193821-823/nightly")."""
    text, length = str(text or ""), int(length)
    return text if len(text) <= length else "…" + text[-(length - 1):]


@register.filter
def capped(n):
    """A count read up to a cap (``selectors.COUNT_CAP`` + 1): past the cap, "100+"."""
    from ledger.selectors import COUNT_CAP

    return f"{COUNT_CAP}+" if n is not None and n > COUNT_CAP else n


@register.filter
def duration(seconds):
    """Seconds as people say them (``86400|duration`` → "1 day"): every TTL, lease and stage length."""
    return duration_words(seconds)


ENDED_WORDS = {
    "all_stages_done": "every stage is done",
    "not_leased": "it was queued for an agent and nobody leased it in time, so it never ran (it spends no retry)",
    "lease_expired": "its agent stopped reporting and the lease ran out",
    "oncall_abandon": "on-call abandoned it",
    "approval_rejected": "an editor rejected its request",
    "compensation_verified": "its effects were undone and the undo verified",
}


@register.filter
def ended_words(reason_code: str) -> str:
    """Why a run ended, in words (a stage's own failure code is shown as that code)."""
    return ENDED_WORDS.get(reason_code or "", f"a stage failed: {reason_code}" if reason_code else "")


@register.filter
def demo_tidying(reason) -> bool:
    """Whether a decision's reason says the demo settled it itself (``identities.DEMO_TIDYING``)."""
    return isinstance(reason, str) and reason.startswith(DEMO_TIDYING)


def relative_words(moment: datetime, now: datetime) -> str:
    """"just now" within a minute (never "0 minutes ago"), else "5 minutes ago" / "in 2 hours"."""
    if abs((now - moment).total_seconds()) < 60:
        return "just now"
    return f"{timesince(moment, now)} ago" if moment <= now else f"in {timesince(now, moment)}"


@register.simple_tag(takes_context=True)
def may(context, action: str, subject=None) -> bool:
    """Whether the signed-in user may do ``action`` (an authorizer of ``ledger.authorizers.BY_NAME``) on
    ``subject``: pages show only the buttons the same rule lets through."""
    try:
        BY_NAME[action](context["request"].user, subject)
    except Refused:
        return False
    return True


@register.simple_tag(takes_context=True)
def when(context, value, mode: str = ""):
    """A moment as one component: UTC (zone shown), browser-local or relative, per the user's choice;
    the full UTC timestamp on hover. ``local`` is converted by app.js (the server cannot know the zone)."""
    if value in (None, ""):
        return "—"
    if isinstance(value, str):
        parsed = parse_datetime(value)
        if parsed is None:
            return value
        value = parsed
    if not isinstance(value, datetime):
        return str(value)
    if timezone.is_naive(value):
        value = timezone.make_aware(value, dt_timezone.utc)
    utc = value.astimezone(dt_timezone.utc)
    request = context.get("request")
    mode = mode or (request.session.get("time_mode", "utc") if request is not None and hasattr(request, "session")
                    else "utc")
    full = utc.strftime("%Y-%m-%d %H:%M:%S UTC")
    if mode == "relative":
        now = timezone.now()
        text = relative_words(utc, now)
    else:
        text = full
    return format_html('<time datetime="{}" title="{}" data-when="{}">{}</time>', utc.isoformat(), full, mode, text)


@register.simple_tag(takes_context=True)
def time_mode_options(context):
    """[(mode, selected)] for the menu's time selector."""
    request = context.get("request")
    current = request.session.get("time_mode", "utc") if request is not None and hasattr(request, "session") else "utc"
    return [(mode, mode == current) for mode in TIME_MODES]
