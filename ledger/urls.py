app_name = "ledger"
urlpatterns = []
