"""The home pages' URLs (no namespace: ``dashboard``, ``prometheus_metrics``, ``time_mode``)."""

from django.urls import path

from ledger.web import home

urlpatterns = [
    path("metrics", home.prometheus_metrics, name="prometheus_metrics"),
    path("prefs/time/", home.time_mode, name="time_mode"),
    path("", home.dashboard, name="dashboard"),
]
