# The two commands a new user runs: `make setup`, then `make test`. While developing: `make check`.
VENV ?= .venv
PY := $(VENV)/bin/python
export PATH := $(abspath $(VENV))/bin:$(PATH)

.PHONY: setup test check unit lab-test lint bench clean

setup:
	bash scripts/setup.sh

test:
	bash scripts/test.sh

# The inner loop: lint, unit tests and the CLI smoke test; no root, about a minute.
check:
	bash scripts/check.sh

unit:
	$(PY) -m pytest tests/unit -q -n 2

lab-test:
	$(PY) -m pytest tests/integration -q -m "lab or tools"

lint:
	bash scripts/lint.sh

bench:
	for b in tests/bench/*.py; do case $$b in */__init__.py) ;; *) $(PY) $$b || exit 1;; esac; done

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache .hypothesis
