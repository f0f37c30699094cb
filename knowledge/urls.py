app_name = "knowledge"
urlpatterns = []
