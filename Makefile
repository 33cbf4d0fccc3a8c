# ARES Console. `make run` sets everything up and serves the site; `make test` runs the tests.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: install dev run serve worker test lint format bench

install: $(VENV)/.installed

# What running the site needs; the test toolchain comes with `make test` (dev below).
$(VENV)/.installed: pyproject.toml
	@echo "== [1/4] creating $(VENV) and installing ARES Console's runtime packages (about a minute the first time)"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet --progress-bar off -e .
	touch $@

dev: $(VENV)/.dev

# The tests' toolchain (pytest, Playwright, ruff...) and the instrumentation libraries whose
# README setups tests/otlp_libraries/ runs.
$(VENV)/.dev: $(VENV)/.installed
	@echo "== installing the test toolchain and the OTLP instrumentation libraries"
	$(BIN)/pip install --quiet --progress-bar off -e '.[dev,otel-libraries]'
	touch $@

# Development server on the embedded defaults: SQLite in var/, Celery tasks inline.
run: install
	@echo "== [2/4] creating the database (SQLite in var/)"
	DEBUG=1 $(BIN)/python manage.py migrate --noinput
	@echo "== [3/4] loading 2,000 demo spans"
	DEBUG=1 $(BIN)/python manage.py ares_demo --invocations 2000
	@echo "== [4/4] the admin login, then the server"
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

test: dev
	SECRET_KEY=$${SECRET_KEY:-tests-only-secret} $(BIN)/pytest $(PYTEST_ARGS)

PY_PATHS := manage.py ares_site tools_app planner_app traces_app tests bench

lint: dev
	$(BIN)/ruff check $(PY_PATHS)
	$(BIN)/ruff format --check $(PY_PATHS)

format: dev
	$(BIN)/ruff check --fix $(PY_PATHS)
	$(BIN)/ruff format $(PY_PATHS)

bench: dev
	$(BIN)/python bench/ingest.py $(BENCH_ARGS)
