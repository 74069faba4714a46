from django.contrib import admin

from .models import Caption, Dataset, HumanJudgment, Image, System


@admin.register(Dataset)
class DatasetAdmin(admin.ModelAdmin):
    list_display = ("name", "kind", "criterion", "created_at")
    search_fields = ("name",)


@admin.register(Image)
class ImageAdmin(admin.ModelAdmin):
    list_display = ("key", "dataset")
    list_filter = ("dataset",)
    search_fields = ("key",)


@admin.register(System)
class SystemAdmin(admin.ModelAdmin):
    list_display = ("name", "kind", "dataset")
    list_filter = ("dataset", "kind")


@admin.register(Caption)
class CaptionAdmin(admin.ModelAdmin):
    list_display = ("key", "text", "system", "image")
    list_filter = ("system__dataset", "system")
    search_fields = ("key", "text")
    raw_id_fields = ("image",)


@admin.register(HumanJudgment)
class HumanJudgmentAdmin(admin.ModelAdmin):
    list_display = ("caption", "criterion", "rater", "score", "source")
    list_filter = ("criterion", "source")
    raw_id_fields = ("caption",)
