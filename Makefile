# The two commands a new user runs: `make setup`, then `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
export PATH := $(abspath $(VENV))/bin:$(PATH)

.PHONY: setup test unit lab-test lint bench clean

setup:
	bash scripts/setup.sh

test:
	bash scripts/test.sh

unit:
	$(PY) -m pytest tests/unit -q

lab-test:
	$(PY) -m pytest tests/integration -q -m "lab or tools"

lint:
	$(VENV)/bin/ruff check ha_ops tests
	$(VENV)/bin/ruff format --check ha_ops tests

bench:
	for b in tests/bench/*.py; do case $$b in */__init__.py) ;; *) $(PY) $$b || exit 1;; esac; done

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache .hypothesis
