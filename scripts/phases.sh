#!/usr/bin/env bash
# Phase timing for the set-up and test scripts and CI: every phase prints its elapsed time as it ends and, when
# HA_OPS_PHASES names a file, appends "<name>\t<seconds>\t<status>" to it, so CI can print one summary at the end
# (the pytest plugin in tests/integration/conftest.py adds one line per integration module to the same file).
#
#   . scripts/phases.sh; phase NAME COMMAND...    run COMMAND as phase NAME (its exit status is returned; call it
#                                                 as a plain command, never inside `... || ...`, where bash
#                                                 ignores errexit in COMMAND)
#   bash scripts/phases.sh --summary FILE         the table of FILE's phases

phase() {
  local name=$1 start=$SECONDS rc errexit=0
  shift
  # In a subshell with errexit on: a failing step inside a phase's function ends the phase (bash ignores set -e in
  # anything run as `cmd || ...`, so the status is taken with errexit off here instead).
  [[ $- == *e* ]] && errexit=1
  set +e
  (set -e; "$@")
  rc=$?
  ((errexit)) && set -e
  local took=$((SECONDS - start))
  echo "phase: $name: ${took} s$([ "$rc" -eq 0 ] || echo " (exit $rc)")" >&2
  if [ -n "${HA_OPS_PHASES:-}" ]; then
    printf '%s\t%s\t%s\n' "$name" "$took" "$([ "$rc" -eq 0 ] && echo ok || echo "exit $rc")" >>"$HA_OPS_PHASES"
  fi
  return "$rc"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -euo pipefail
  [ "${1:-}" = "--summary" ] && [ -n "${2:-}" ] || { echo "usage: $0 --summary FILE" >&2; exit 2; }
  [ -s "$2" ] || { echo "phases: no phase was recorded in $2" >&2; exit 0; }
  echo "== phases (seconds) =="
  awk -F'\t' '{ printf "  %-58s %6d  %s\n", $1, $2, $3 }' "$2"
fi
