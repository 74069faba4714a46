"""WSGI entry point (``gunicorn evalsite.wsgi`` or ``manage.py runserver``)."""
import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "evalsite.settings")
application = get_wsgi_application()
