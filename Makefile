# Two commands for a newcomer (see README): `make book` and `make test`.
# Both create .venv from the pinned requirements first (torch is the local CPU build).
SIZE ?= cpu
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: book test venv clean

venv: $(VENV)/.installed

$(VENV)/.installed: requirements.txt requirements-test.txt constraints.txt pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -r requirements.txt -r requirements-test.txt -c constraints.txt
	$(BIN)/pip install -q --no-deps -e .
	touch $@

test: venv
	$(BIN)/python -m pytest -q

clean:
	rm -rf _build book/_build
