"""HTML pages of the ledger, one module per page family; URL names are the view names."""

from ledger.web.approvals import approval_approve, approval_list, approval_reject
from ledger.web.compare import run_compare
from ledger.web.oncall import oncall, oncall_bulk, oncall_preview, run_abandon, run_compensate, run_retry
from ledger.web.reports import reports
from ledger.web.runs import run_detail, run_list, run_prefix, saved_view_create
from ledger.web.workflows import workflow_detail, workflow_list

__all__ = [
    "approval_approve", "approval_list", "approval_reject", "run_compare", "oncall", "oncall_bulk",
    "oncall_preview", "run_abandon", "run_compensate", "run_retry", "reports", "run_detail", "run_list",
    "run_prefix", "saved_view_create", "workflow_detail", "workflow_list",
]
