"""The claims the demo seeds (plain data: agent processes read the keys without Django)."""

# Claims the fleet reads through the resume packet (SPEC §9.2). `stale` ones were observed long ago and
# are past refresh_after (served as leads); `revoke` ones are tombstoned by the owner (never served).
SEC = {"system": "payments-api", "version": "4", "task": "security"}
BLOG = {"system": "blog", "version": "2", "task": "publish"}
CI = {"system": "ci", "version": "2026.11", "task": "triage"}
CLAIMS = [
    {"key": "payments-api/tls-minimum", "scope": SEC, "statement": "payments-api refuses TLS below 1.2.",
     "source_refs": ["https://docs.example.com/payments-api/security#tls"]},
    {"key": "payments-api/waf-admin-block", "scope": SEC, "stale": True,
     "statement": "The WAF blocks /admin for every external address.",
     "source_refs": ["https://wiki.example.com/waf/rules"]},
    {"key": "payments-api/key-rotation", "scope": SEC, "revoke": "The 90-day rotation runbook was replaced.",
     "statement": "API keys are rotated every 90 days.", "source_refs": ["https://wiki.example.com/runbooks/keys"]},
    {"key": "payments-api/cve-reachability", "scope": SEC, "confidence": "engineering-inference",
     "source_type": "repo", "statement": "The vulnerable parser is unreachable from public routes.",
     "source_refs": ["https://ci.example.com/security/scans/1187"]},
    {"key": "blog/publish-window", "scope": BLOG, "statement": "Posts publish between 06:00 and 07:00 UTC.",
     "source_refs": ["https://docs.example.com/blog/publishing"]},
    {"key": "blog/cdn-ttl", "scope": BLOG, "stale": True, "statement": "The CDN caches posts for 10 minutes.",
     "source_refs": ["https://docs.example.com/cdn"]},
    {"key": "ci/integration-suite-flaky", "scope": CI, "statement": "The integration suite retries network tests twice.",
     "source_refs": ["https://ci.example.com/docs/retries"]},
]
FACT_KEYS = {c["key"] for c in CLAIMS if not (c.get("stale") or c.get("revoke") or c.get("confidence"))}
STALE_KEYS = {c["key"] for c in CLAIMS if c.get("stale")}
ABSENT_KEYS = {c["key"] for c in CLAIMS if c.get("revoke") or c.get("confidence")}
