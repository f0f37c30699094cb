"""HTML pages of the ledger, one module per page family; URL names are the view names."""

from ledger.views.approvals import approval_approve, approval_list, approval_reject  # noqa: F401
from ledger.views.compare import run_compare  # noqa: F401
from ledger.views.oncall import (  # noqa: F401
    oncall, oncall_bulk, oncall_preview, run_abandon, run_compensate, run_retry,
)
from ledger.views.reports import reports  # noqa: F401
from ledger.views.runs import run_detail, run_list, run_prefix, saved_view_create  # noqa: F401
from ledger.views.workflows import workflow_detail, workflow_list  # noqa: F401
