"""Template helpers of the claim pages."""

from django import template

register = template.Library()

# A claim status (stored, or ``stale`` as ``selectors.claim_status`` reports it) as the app's badge colours.
BADGE = {"active": "state-verified", "stale": "state-pending", "pending": "state-pending",
         "invalidated": "state-rejected", "revoked": "state-rejected"}


@register.filter
def claim_badge(status) -> str:
    """``<span class="badge {{ status|claim_badge }}">``: ok, warning or bad for the claim's status."""
    return BADGE.get(str(status or ""), f"state-{status}")
