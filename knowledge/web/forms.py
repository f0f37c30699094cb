"""Forms of the claim review pages: the reasons of tombstones and the fields of a refresh."""

from django import forms


class ClaimActionForm(forms.Form):
    """Every claim action names its key (keys hold slashes, so it travels in the body, not the URL)."""

    key = forms.CharField(max_length=300)


class AcceptForm(ClaimActionForm):
    version = forms.IntegerField(min_value=1, required=False)


class TombstoneForm(ClaimActionForm):
    """Invalidate and revoke: the reason is recorded on the tombstone, so it is required (a blank one
    too: CharField strips it first)."""

    reason = forms.CharField(max_length=2000, error_messages={"required": "A reason is required."})


class RefreshForm(ClaimActionForm):
    """New evidence dates for a live claim; the write gate judges the result."""

    observed_at = forms.DateTimeField(widget=forms.DateTimeInput(attrs={"type": "datetime-local"}))
    refresh_after = forms.DateTimeField(widget=forms.DateTimeInput(attrs={"type": "datetime-local"}))
    source_refs = forms.CharField(required=False, max_length=50 * 2000,
                                  widget=forms.Textarea(attrs={"rows": 2, "placeholder": "one source per line"}))
    reason = forms.CharField(required=False, max_length=2000)

    def refresh_data(self) -> dict:
        """The refresh as the service takes it (call after ``is_valid``)."""
        data = self.cleaned_data
        out = {"observed_at": data["observed_at"].isoformat(), "refresh_after": data["refresh_after"].isoformat()}
        refs = [line.strip() for line in (data.get("source_refs") or "").splitlines() if line.strip()]
        if refs:
            out["source_refs"] = refs
        if (data.get("reason") or "").strip():
            out["reason"] = data["reason"].strip()
        return out
