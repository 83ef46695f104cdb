# cases.sh - sourced by the tools' test scripts: run_case NAME FUNCTION runs
# one case, prints PASS or FAIL with the case's $why, and counts them in
# $passed and $failed.
passed=0
failed=0
why=""

run_case() { # NAME FUNCTION
  why=""
  if "$2"; then
    echo "PASS: $1"
    passed=$((passed + 1))
  else
    echo "FAIL: $1: $why"
    failed=$((failed + 1))
  fi
}
