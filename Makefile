# The two commands of the README: `make up` runs the system, `make test` runs every test.
# Both install what they need into .venv from requirements.lock first.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: install browser promtool postgres up test lint chaos bench bench-ledger bench-read bench-topup bench-withdrawal bench-onboarding bench-staff bench-front bench-webhooks bench-bff bench-growth schema

$(BIN)/hiwallet: requirements.lock pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q -r requirements.lock
	$(BIN)/pip install -q --no-deps -e .
	touch $(BIN)/hiwallet

install: $(BIN)/hiwallet

# The broker's consistent-hash exchange is a plugin that ships with RabbitMQ
# (docs/architecture.md): enabled here (as root; harmless when it is already) so that nothing is
# enabled by hand.
up: install
	-command -v rabbitmq-plugins >/dev/null && rabbitmq-plugins enable rabbitmq_consistent_hash_exchange >/dev/null 2>&1
	$(BIN)/hiwallet migrate
	$(BIN)/hiwallet up

lint: install
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
	$(BIN)/mypy
	$(BIN)/lint-imports --no-logo --no-cache  # the layering: [tool.importlinter] in pyproject.toml

# The tests create and migrate their own databases (a template per database, a clone per
# test); they never touch the databases `make up` runs on.
#
# Three pytest-xdist workers on two cores: most of the run waits on processes, sockets and the
# databases (one worker left a core idle half the time; two still left a third of the machine
# idle), so a third worker fills the waits; --dist loadfile keeps each file on one worker (a
# module's processes and virtual host are set up once). PYTEST_ARGS="-n 0" runs in one process. The broker plugin is enabled as for `make up`: a new machine's `make test` needs it too.
test: install lint browser promtool postgres
	-command -v rabbitmq-plugins >/dev/null && rabbitmq-plugins enable rabbitmq_consistent_hash_exchange >/dev/null 2>&1
	$(BIN)/pytest -q -n 3 --dist loadfile $(PYTEST_ARGS)

# The suite runs whole systems (`hiwallet up`: every service's pools and dedicated connections)
# on three workers beside other tests' servers: PostgreSQL's default 100 connections runs out
# (53300 too_many_connections). Raised to 300 once, as root, like the broker plugin: ALTER SYSTEM
# and a restart of the local cluster, only when it is lower and this machine's cluster answers.
PG_MAX_CONNECTIONS = 300
postgres:
	@n=$$(psql -h 127.0.0.1 -U postgres -tAc "SHOW max_connections" 2>/dev/null || echo 0); \
	if [ "$$n" -gt 0 ] && [ "$$n" -lt $(PG_MAX_CONNECTIONS) ] && command -v pg_ctlcluster >/dev/null; then \
	  echo "PostgreSQL: max_connections $$n -> $(PG_MAX_CONNECTIONS) (a restart)"; \
	  { psql -h 127.0.0.1 -U postgres -qc "ALTER SYSTEM SET max_connections = $(PG_MAX_CONNECTIONS)" && \
	    pg_ctlcluster --skip-systemctl-redirect $$(ls /etc/postgresql | sort -V | tail -1) main restart; } \
	  || echo "PostgreSQL: could not raise max_connections; the whole systems' tests may run out"; \
	  for i in $$(seq 1 300); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 0.2; done; \
	fi

# The fault campaign's long run (tests/chaos/campaign.py, docs/chaos.md): ten minutes of the bank
# workload under `hiwallet up` while every kind of process is killed in turn, one stopped, and the
# campaign's own PostgreSQL cluster and RabbitMQ node (made by tests/chaos/servers.py, never the
# shared ones) restarted. CHAOS_ARGS, e.g. "--seed 7 --duration 120". The report is printed and
# written to chaos-report.json.
chaos: install
	$(BIN)/python -m tests.chaos.campaign $(CHAOS_ARGS)

# Debian's chromium, which the browser tests drive with Playwright (tests/browser): installed when
# missing (as root, as the broker plugin is; apt's lists are refreshed only if the first try fails).
browser:
	@command -v chromium >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null 2>&1 \
	  || (apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null)

# promtool, which checks and unit-tests the alert rules (deploy/prometheus, tests/test_alerts.py):
# taken out of Debian's prometheus package into .venv/bin when missing, the package itself not
# installed (it would install a Prometheus server, and start it where systemd runs); apt's lists
# are refreshed only if the first download fails. A promtool on the PATH does as well.
promtool: install
	@test -x $(BIN)/promtool || command -v promtool >/dev/null || { \
	  dir=$$(mktemp -d) && chmod 755 $$dir && cd $$dir && \
	  { apt-get download -q prometheus >/dev/null 2>&1 \
	    || { apt-get update -q >/dev/null && apt-get download -q prometheus >/dev/null 2>&1; }; } && \
	  dpkg-deb --fsys-tarfile prometheus_*.deb | tar -xO ./usr/bin/promtool >$(CURDIR)/$(BIN)/promtool.part && \
	  chmod 755 $(CURDIR)/$(BIN)/promtool.part && mv $(CURDIR)/$(BIN)/promtool.part $(CURDIR)/$(BIN)/promtool; \
	  rc=$$?; rm -rf $$dir $(CURDIR)/$(BIN)/promtool.part; exit $$rc; }

# migrations/<db>/schema.sql, the live schema, from freshly migrated databases: run after adding
# a migration (tests/core/test_schema.py fails until the committed files match).
schema: install
	$(BIN)/hiwallet schema dump

# The benchmarks make and drop their own databases (and RabbitMQ virtual host); they print their
# figures and a progress bar, and write their log lines to bench/results/logs/ (the path is
# printed). Today's figures and how to read them: docs/performance.md. `make bench` runs them all; `make bench-ledger` only the
# ledger's and wallet-api's (BENCH_ARGS, e.g. "--wallet-api-only");
# `make bench-topup` only the top-up path's (TOPUP_BENCH_ARGS, e.g. "--only bare");
# `make bench-withdrawal` only the withdrawal saga's (WITHDRAWAL_BENCH_ARGS, e.g. "--duration 10");
# `make bench-onboarding` only the registrations' (ONBOARDING_BENCH_ARGS, e.g. "--concurrency 4");
# `make bench-staff` only staff-admin's GET /v1/me (STAFF_BENCH_ARGS, e.g. "--duration 60");
# `make bench-front` only the front doors' (FRONT_BENCH_ARGS, e.g. "--rounds 3").
# `make bench-webhooks` only the merchants' webhooks (WEBHOOK_BENCH_ARGS, e.g. "--rate 400").
# `make bench-bff` only the personal web app's home page (BFF_BENCH_ARGS, e.g. "--duration 20").
# `make bench-read` only wallet-api's reads against a bare one-query endpoint (READ_BENCH_ARGS,
# e.g. "--rounds 10").
# `make bench-growth` the ledger on a database with years of books vs a fresh one (GROWTH_BENCH_ARGS,
# e.g. "--lines 10_000_000 --wallets 1_000_000"); it loads (and keeps) the database first.
bench: install
	$(BIN)/python bench/ledger_bench.py $(BENCH_ARGS)
	$(BIN)/python bench/topup_bench.py $(TOPUP_BENCH_ARGS)
	$(BIN)/python bench/withdrawal_bench.py $(WITHDRAWAL_BENCH_ARGS)
	$(BIN)/python bench/onboarding_bench.py $(ONBOARDING_BENCH_ARGS)
	$(BIN)/python bench/staff_me_bench.py $(STAFF_BENCH_ARGS)
	$(BIN)/python bench/front_bench.py $(FRONT_BENCH_ARGS)
	$(BIN)/python bench/webhook_bench.py $(WEBHOOK_BENCH_ARGS)
	$(BIN)/python bench/bff_bench.py $(BFF_BENCH_ARGS)
	$(BIN)/python bench/read_bench.py $(READ_BENCH_ARGS)

bench-ledger: install
	$(BIN)/python bench/ledger_bench.py $(BENCH_ARGS)

bench-topup: install
	$(BIN)/python bench/topup_bench.py $(TOPUP_BENCH_ARGS)

bench-withdrawal: install
	$(BIN)/python bench/withdrawal_bench.py $(WITHDRAWAL_BENCH_ARGS)

bench-onboarding: install
	$(BIN)/python bench/onboarding_bench.py $(ONBOARDING_BENCH_ARGS)

# staff-admin's GET /v1/me at 500 calls/s, with a bare baseline in the same run
# (STAFF_BENCH_ARGS, e.g. "--duration 60").
bench-staff: install
	$(BIN)/python bench/staff_me_bench.py $(STAFF_BENCH_ARGS)

# transfers through personal-mobile-api against wallet-api alone, in the same run, at 8 and 32
# (FRONT_BENCH_ARGS, e.g. "--duration 20 --rounds 3").
bench-front: install
	$(BIN)/python bench/front_bench.py $(FRONT_BENCH_ARGS)

# merchant-webhooks to a local receiver: deliveries/s of a burst, commit-to-delivery latency
# (WEBHOOK_BENCH_ARGS, e.g. "--events 10000 --rate 400").
bench-webhooks: install
	$(BIN)/python bench/webhook_bench.py $(WEBHOOK_BENCH_ARGS)

# personal-web-bff's home page against wallet-api's GET /v1/accounts, 8 signed-in people
# (BFF_BENCH_ARGS, e.g. "--duration 20 --rounds 3").
bench-bff: install
	$(BIN)/python bench/bff_bench.py $(BFF_BENCH_ARGS)

# GET /v1/wallets/{id}, its overview and a statement page against a bare one-query endpoint, in
# interleaved rounds (READ_BENCH_ARGS, e.g. "--rounds 10 --round-s 4").
bench-read: install
	$(BIN)/python bench/read_bench.py $(READ_BENCH_ARGS)

bench-growth: install
	$(BIN)/python bench/growth_bench.py $(GROWTH_BENCH_ARGS)
