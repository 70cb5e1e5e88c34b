#!/usr/bin/env bash
# System programs the tests need, installed from Debian's packages when missing (`make test` runs this):
# a PostgreSQL server (initdb, pg_ctl; tests/backend_fixtures.py starts a throwaway server for the
# SQL-engine, ledger and service-replica tests), a Java runtime for Spark, and Chromium with its driver for
# the dashboard's browser test. On a machine without apt-get, install them with its own package manager.
set -euo pipefail

missing=()
if ! command -v initdb >/dev/null 2>&1 && ! compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null; then
  missing+=(postgresql)
fi
if ! command -v java >/dev/null 2>&1; then
  missing+=(default-jre-headless)
fi
if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then
  missing+=(chromium chromium-driver)
fi
if ((${#missing[@]} == 0)); then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "missing system packages: ${missing[*]}; install them (PostgreSQL server, a Java 17+ runtime, Chromium and chromedriver)" >&2
  exit 1
fi
echo "installing ${missing[*]}"
sudo=()
if [ "$(id -u)" -ne 0 ]; then sudo=(sudo); fi
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -q
"${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
