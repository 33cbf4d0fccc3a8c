# ARES Console. `make run` sets everything up and serves the site; `make test` runs the tests.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: install dev run serve worker beat test lint format bench

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
# setups in docs/opentelemetry.md that tests/otlp_libraries/ runs.
$(VENV)/.dev: $(VENV)/.installed
	@echo "== installing the test toolchain and the OTLP instrumentation libraries"
	$(BIN)/pip install --quiet --progress-bar off -e '.[dev,otel-libraries]'
	touch $@

# The periodic jobs' scheduler (settings.ARES_PERIODIC_JOBS). Without CELERY_BROKER_URL it
# runs the jobs itself; with one it sends them to the workers (`make worker`).
BEAT := $(BIN)/celery -A ares_site beat --loglevel=WARNING
# Start the beat in the background for the recipe line that follows, and stop it with it.
WITH_BEAT = $(BEAT) & beat=$$!; trap 'kill $$beat 2>/dev/null' EXIT INT TERM;

# Development server on the embedded defaults: SQLite in var/, Celery tasks inline, and
# the beat beside it for the periodic jobs (retention, pending scores, recounts).
run: install
	@echo "== [2/4] creating the database (SQLite in var/)"
	DEBUG=1 $(BIN)/python manage.py migrate --noinput
	@echo "== [3/4] loading 2,000 demo spans, and 1,600 of the day before (for the changes)"
	DEBUG=1 $(BIN)/python manage.py ares_demo --invocations 2000 --previous-period
	@echo "== [4/4] the admin login, then the server"
	DEBUG=1 $(BIN)/python manage.py ensure_admin
	@echo "ARES Console at http://$(HOST):$(PORT)/ (admin at /admin/, API docs at /api/v1/docs)"
	export DEBUG=1; $(WITH_BEAT) $(BIN)/python manage.py runserver $(HOST):$(PORT)

# Production server, with the beat beside it: set SECRET_KEY (and DATABASE_URL,
# CELERY_BROKER_URL) first. With a broker, run `make worker` too.
serve: install
	$(BIN)/python manage.py migrate --noinput
	$(BIN)/python manage.py collectstatic --noinput
	$(WITH_BEAT) $(BIN)/gunicorn ares_site.wsgi --config ares_site/gunicorn.conf.py --bind $(HOST):$(PORT)

worker: install
	$(BIN)/celery -A ares_site worker --loglevel=INFO

# The beat alone, for a deployment that runs gunicorn some other way.
beat: install
	$(BIN)/celery -A ares_site beat --loglevel=INFO

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
