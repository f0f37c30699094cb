"""The claims API: validate → one service or selector → serialize."""

from urllib.parse import urlencode

from django.utils import timezone
from rest_framework import serializers, status
from rest_framework.response import Response

from knowledge import authorizers, selectors, services
from knowledge.api.components import (
    OPS,
    ClaimDetailSerializer,
    ClaimProposalSerializer,
    ClaimRefreshSerializer,
    ReconcileResultSerializer,
    ReconcileSerializer,
)
from knowledge.models import Claim
from stateboard.errors import NotFound
from stateboard.openapi import operation, page_of
from stateboard.policy import ANY, Policy, PolicyApi

PAGE_SIZE, MAX_PAGE_SIZE = 100, 500


class ClaimOutput(serializers.Serializer):
    """One claim version. ``status`` is computed at read time (``stale`` past refresh_after);
    ``use_as`` is "fact", "lead" (stale, or flagged for review) or null (pending, tombstone)."""

    key = serializers.CharField()
    version = serializers.IntegerField()
    store_version = serializers.IntegerField()
    status = serializers.SerializerMethodField()
    use_as = serializers.SerializerMethodField()
    needs_review = serializers.SerializerMethodField()
    statement = serializers.CharField()
    source_refs = serializers.JSONField()
    source_type = serializers.CharField()
    scope = serializers.JSONField()
    confidence = serializers.CharField()
    observed_at = serializers.DateTimeField()
    refresh_after = serializers.DateTimeField()
    owner = serializers.SerializerMethodField()
    sensitivity = serializers.CharField()
    retention_until = serializers.DateTimeField()
    derived_from = serializers.JSONField()
    ledger_event = serializers.IntegerField()
    actor = serializers.CharField()
    reason = serializers.CharField()
    provenance = serializers.JSONField()
    pending_reasons = serializers.JSONField()
    policy_version = serializers.CharField()
    created_at = serializers.DateTimeField()

    def _now(self):
        return self.context.get("now") or timezone.now()

    def get_status(self, claim: Claim) -> str:
        return selectors.claim_status(claim, now=self._now())

    def get_needs_review(self, claim: Claim) -> bool:
        return bool(getattr(claim, "needs_review", False))

    def get_use_as(self, claim: Claim) -> str | None:
        if not getattr(claim, "is_current", True):
            return None  # an older version in a history listing is never to be used
        return selectors.claim_use_as(claim, now=self._now(), needs_review=self.get_needs_review(claim))

    def get_owner(self, claim: Claim) -> str | None:
        return claim.owner.get_username() if claim.owner_id else None


def _claim_data(claim: Claim, *, now=None, needs_review: bool = False, is_current: bool = True) -> dict:
    claim.needs_review, claim.is_current = needs_review, is_current
    return ClaimOutput(claim, context={"now": now}).data


def _claims_data(claims: list[Claim], *, now=None) -> list[dict]:
    """Many at once: one serializer for the list (building one per item costs more than the query)."""
    return ClaimOutput(claims, many=True, context={"now": now}).data


def _key_of_path(request, kwargs) -> str:
    return kwargs["key"]


def _on_key(authorizer, action: str) -> Policy:
    return Policy(roles=ANY, authorizer=authorizer, subject=_key_of_path, audit=action, audit_all=True)


class ClaimListProposeApi(PolicyApi):
    """GET: current claims by scope and key (facts and leads, never tombstones).
    POST: propose a claim through the write gate."""

    policy = {"GET": Policy(roles=ANY),
              "POST": Policy(roles=ANY, authorizer=authorizers.may_propose, audit="claim_propose")}

    class FilterSerializer(serializers.Serializer):
        system = serializers.CharField(required=False, allow_blank=True)
        version = serializers.CharField(required=False, allow_blank=True)
        task = serializers.CharField(required=False, allow_blank=True)
        key = serializers.CharField(required=False, allow_blank=True)
        use_as = serializers.ChoiceField(choices=["fact", "lead"], required=False)
        cursor = serializers.CharField(required=False, allow_blank=True)
        limit = serializers.IntegerField(required=False, min_value=1, max_value=MAX_PAGE_SIZE)

    @operation(OPS["claims_list"], parameters=[FilterSerializer], responses={200: page_of(
        "ClaimList", ClaimOutput, store_version=serializers.IntegerField(help_text="the store's version now"))})
    def get(self, request):
        filters = self.FilterSerializer(data=request.query_params)
        filters.is_valid(raise_exception=True)
        params = filters.validated_data
        limit = params.get("limit", PAGE_SIZE)
        now = timezone.now()
        heads = list(selectors.claims_live(
            user=request.user, system=params.get("system"), version=params.get("version"),
            task=params.get("task"), key=params.get("key"), use_as=params.get("use_as"),
            after_key=params.get("cursor"), now=now,
        )[: limit + 1])
        page = heads[:limit]
        for head in page:
            head.current.needs_review, head.current.is_current = head.needs_review, True
        results = _claims_data([h.current for h in page], now=now)
        next_url = None
        if len(heads) > limit:
            query = {k: v for k, v in request.query_params.items() if k != "cursor"}
            query["cursor"] = page[-1].key
            next_url = request.build_absolute_uri(f"{request.path}?{urlencode(query)}")
        return Response({"results": results, "next": next_url, "store_version": selectors.store_version()})

    @operation(OPS["claims_create"], request=ClaimProposalSerializer, responses={201: ClaimOutput})
    def post(self, request):
        if not isinstance(request.data, dict):
            raise serializers.ValidationError({"non_field_errors": ["A claim proposal is a JSON object."]})
        claim = services.claim_propose(user=request.user, data=dict(request.data))
        return Response(_claim_data(claim), status=status.HTTP_201_CREATED)


class ClaimDetailApi(PolicyApi):
    """A key's current version and its full history (newest first)."""

    policy = {"GET": Policy(roles=ANY)}

    @operation(OPS["claims_retrieve"], responses={200: ClaimDetailSerializer})
    def get(self, request, key: str):
        detail = selectors.claim_detail(user=request.user, key=key)
        if detail is None:
            raise NotFound("claim_not_found", f"No claim with key {key!r}.")
        now = timezone.now()
        current = detail["current"]
        head = detail["head"]
        for version in detail["versions"]:
            version.is_current = current is not None and version.pk == current.pk
            version.needs_review = version.is_current and bool(detail["reviews"])
        return Response({
            "key": key,
            "current": (_claim_data(current, now=now, needs_review=bool(detail["reviews"]))
                        if current is not None else None),
            "history": _claims_data(detail["versions"], now=now),
            "pending": [{"version": v.version, "store_version": v.store_version, "actor": v.actor,
                         "pending_reasons": v.pending_reasons} for v in detail["pending"]],
            "reviews": [{"reason": r.reason, "source_key": r.source_key,
                         "source_store_version": r.source_store_version, "actor": r.actor,
                         "created_at": r.created_at} for r in detail["reviews"]],
            "rejections": [{"at": d.at, "actor": d.actor, "action": d.action, "reasons": d.reasons,
                            "policy_version": d.policy_version} for d in detail["rejections"]],
            "removed": ({"status": head.gc_status, "store_version": head.gc_store_version, "at": head.gc_at}
                        if head is not None and head.gc_status else None),
        })


class ClaimRefreshApi(PolicyApi):
    """A new version of a live claim with new evidence and dates (through the write gate)."""

    policy = {"POST": _on_key(authorizers.may_refresh, "claim_refresh")}

    @operation(OPS["claims_refresh_create"], request=ClaimRefreshSerializer, responses={200: ClaimOutput})
    def post(self, request, key: str):
        if not isinstance(request.data, dict):
            raise serializers.ValidationError({"non_field_errors": ["The refresh is a JSON object."]})
        claim = services.claim_refresh(user=request.user, key=key, data=dict(request.data))
        return Response(_claim_data(claim))


class ClaimAcceptApi(PolicyApi):
    """The pending version becomes active (a new version). Inferences: owner or editor;
    sensitive claims: owner; a revoked key: the claim's owner."""

    policy = {"POST": _on_key(authorizers.may_accept, "claim_accept")}  # the service checks the chosen version

    class ClaimAcceptInputSerializer(serializers.Serializer):
        version = serializers.IntegerField(required=False, min_value=1)

    @operation(OPS["claims_accept_create"], request=ClaimAcceptInputSerializer, responses={200: ClaimOutput})
    def post(self, request, key: str):
        data = self.ClaimAcceptInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        claim = services.claim_accept(user=request.user, key=key, version=data.validated_data.get("version"))
        return Response(_claim_data(claim))


class TombstoneInputSerializer(serializers.Serializer):
    reason = serializers.CharField(required=False, allow_blank=True, max_length=2000)


def _tombstone_api(action: str, rule, service, doc: str):
    """Invalidate and revoke: one body (a ``reason``) and one answer; each names its authorizer
    (``rule``), its service, and through ``action`` its operation and refusal code."""

    class ClaimTombstoneApi(PolicyApi):
        __doc__ = doc
        policy = {"POST": _on_key(rule, f"claim_{action}")}
        InputSerializer = TombstoneInputSerializer

        @operation(OPS[f"claims_{action}_create"], request=InputSerializer, responses={200: ClaimOutput})
        def post(self, request, key: str):
            data = self.InputSerializer(data=request.data)
            data.is_valid(raise_exception=True)
            claim = service(user=request.user, key=key, reason=data.validated_data.get("reason", ""))
            return Response(_claim_data(claim))

    ClaimTombstoneApi.__name__ = ClaimTombstoneApi.__qualname__ = f"Claim{action.title()}Api"
    return ClaimTombstoneApi


ClaimInvalidateApi = _tombstone_api(
    "invalidate", authorizers.may_invalidate, services.claim_invalidate,
    "Tombstone a claim (``reason`` required); claims derived from it are flagged for review.")
ClaimRevokeApi = _tombstone_api(
    "revoke", authorizers.may_revoke, services.claim_revoke,
    "Tombstone by the claim's owner alone (any owner-role user when it has none).")


class KnowledgeReconcileApi(PolicyApi):
    """Merge a checkpoint's memory snapshot into the live store (a live value or a tombstone wins)."""

    policy = {"POST": Policy(roles=ANY, authorizer=authorizers.may_reconcile, audit="knowledge_reconcile")}

    class ReconcileInputSerializer(serializers.Serializer):
        entries = serializers.JSONField()
        checkpoint = serializers.JSONField(required=False, allow_null=True)
        version_boundary = serializers.IntegerField(required=False, allow_null=True, min_value=0)

    @operation(OPS["knowledge_reconcile_create"], request=ReconcileSerializer, responses={200: ReconcileResultSerializer})
    def post(self, request):
        data = self.ReconcileInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        result = services.knowledge_reconcile(
            user=request.user, entries=data.validated_data["entries"],
            checkpoint=data.validated_data.get("checkpoint"),
            version_boundary=data.validated_data.get("version_boundary"),
        )
        return Response(result)
