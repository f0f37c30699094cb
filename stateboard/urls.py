from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from stateboard import signin, views

handler400 = "stateboard.errors.handler400"
handler403 = "stateboard.errors.handler403"
handler404 = "stateboard.errors.handler404"
handler500 = "stateboard.errors.handler500"

api_v1 = [
    path("", include("ledger.api.urls")),
    path("", include("knowledge.api.urls")),
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    path("docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="docs"),
]

urlpatterns = [
    path("api/v1/", include(api_v1)),
    path("healthz", views.healthz, name="healthz"),
    path("integrations/slack/", include("ledger.api.slack")),
    path("login/", signin.sign_in, name="login"),
    path("logout/", signin.sign_out, name="logout"),
    path("admin/", admin.site.urls),
    path("", include("ledger.web.urls")),
    path("", include("knowledge.web.urls")),
    path("", include("ledger.web.home_urls")),
]
