"""``/agents/`` (SPEC §15): the fleet, read by owners and on-call; an owner revokes an agent's token
(``/agents/{name}/revoke/``, audited)."""

from rest_framework import serializers
from rest_framework.response import Response

from ledger import agent_selectors, authorizers
from ledger.api.common import body_of, validated
from ledger.api.operations import OPS
from ledger.identities import agent_revoke
from stateboard.openapi import operation
from stateboard.policy import ANY, Policy, PolicyApi


class TokenStateSerializer(serializers.Serializer):
    state = serializers.ChoiceField(choices=["active", "revoked"])


class FleetRowSerializer(serializers.Serializer):
    name = serializers.CharField()
    last_request_at = serializers.DateTimeField(allow_null=True, help_text="accurate to a minute")
    runs_held = serializers.ListField(child=serializers.UUIDField(), help_text="the runs it holds now")
    leases_last_hour = serializers.IntegerField()
    refusals_last_hour = serializers.DictField(child=serializers.IntegerField(),
                                               help_text="its refused requests of the last hour, by code")
    token = TokenStateSerializer()


class FleetListSerializer(serializers.Serializer):
    results = FleetRowSerializer(many=True)
    next = serializers.CharField(allow_null=True, help_text="always null: the fleet is one page")


class RevokeInputSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=2000)


class AgentListApi(PolicyApi):
    policy = {"GET": Policy(roles=ANY, authorizer=authorizers.may_see_fleet)}

    @operation(OPS["agents_list"], responses={200: FleetListSerializer})
    def get(self, request):
        return Response({"results": FleetRowSerializer(agent_selectors.fleet(), many=True).data, "next": None})


class AgentRevokeApi(PolicyApi):
    policy = {"POST": Policy(roles=ANY, authorizer=authorizers.may_revoke_agent, audit="agent_revoke",
                             audit_all=True)}

    @operation(OPS["agents_revoke_create"], request=RevokeInputSerializer, responses={200: FleetRowSerializer})
    def post(self, request, name):
        reason = validated(RevokeInputSerializer, body_of(request))["reason"]
        agent_revoke(name=name, user=request.user, reason=reason)
        return Response(FleetRowSerializer(agent_selectors.fleet(name=name)[0]).data)
