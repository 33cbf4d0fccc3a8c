# ARES Console. `make run` sets everything up and serves the site; `make test` runs the tests.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: install run serve worker test lint format bench

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

# Development server on the embedded defaults: SQLite in var/, Celery tasks inline.
run: install
	DEBUG=1 $(BIN)/python manage.py migrate --noinput
	DEBUG=1 $(BIN)/python manage.py ares_demo --invocations 2000
	DEBUG=1 $(BIN)/python manage.py ensure_admin
	@echo "ARES Console at http://$(HOST):$(PORT)/ (admin at /admin/, API docs at /api/v1/docs)"
	DEBUG=1 $(BIN)/python manage.py runserver $(HOST):$(PORT)

# Production server: set SECRET_KEY (and DATABASE_URL, CELERY_BROKER_URL) first.
serve: install
	$(BIN)/python manage.py migrate --noinput
	$(BIN)/python manage.py collectstatic --noinput
	$(BIN)/gunicorn ares_site.wsgi --config ares_site/gunicorn.conf.py --bind $(HOST):$(PORT)

worker: install
	$(BIN)/celery -A ares_site worker --loglevel=INFO

# The tests also run the README's OTLP setups with the real instrumentation libraries.
$(VENV)/.otel-libraries: $(VENV)/.installed
	$(BIN)/pip install --quiet -e '.[dev,otel-libraries]'
	touch $@

test: install $(VENV)/.otel-libraries
	SECRET_KEY=$${SECRET_KEY:-tests-only-secret} $(BIN)/pytest $(PYTEST_ARGS)

PY_PATHS := manage.py ares_site tools_app planner_app traces_app tests bench

lint: install
	$(BIN)/ruff check $(PY_PATHS)
	$(BIN)/ruff format --check $(PY_PATHS)

format: install
	$(BIN)/ruff check --fix $(PY_PATHS)
	$(BIN)/ruff format $(PY_PATHS)

bench: install
	$(BIN)/python bench/ingest.py $(BENCH_ARGS)
