"""``{% notifications_unread as n %}``: the signed-in user's unread count, for the menu badge."""

from django import template

from ledger import selectors

register = template.Library()


@register.simple_tag(takes_context=True)
def notifications_unread(context) -> int:
    request = context.get("request")
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return 0
    return selectors.notifications_unread_count(user=user)
