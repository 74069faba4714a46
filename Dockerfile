# Image for the web server and the Celery workers (docker-compose.yml).
FROM python:3.11-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends default-jre-headless \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /app
# the server's lock only (every version pinned; no test tools); the checkout runs in place
COPY requirements/server.txt requirements/server.txt
RUN pip install --no-cache-dir -r requirements/server.txt
COPY . .
# Production settings by default: DJANGO_SECRET_KEY, DJANGO_ALLOWED_HOSTS and DATABASE_URL must be
# given at run time (docker-compose.yml passes them from the environment); nothing secret is baked in.
ENV PYTHONUNBUFFERED=1 DJANGO_SETTINGS_MODULE=evalsite.production
EXPOSE 8000
CMD ["gunicorn", "evalsite.wsgi", "--bind", "0.0.0.0:8000", "--workers", "3", "--worker-class", "gthread", "--threads", "4", "--access-logfile", "-"]
