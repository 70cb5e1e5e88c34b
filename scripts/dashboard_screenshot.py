"""Screenshot the query service's budget dashboard for the README (``docs/img/dashboard.png``).

Builds a small but realistic deployment in a temporary directory -- the bundled household-expense sample
(``kakeibo/data/household_expenses.csv``) and a generated retail table, three analysts with grants on one
or both -- starts ``kakeibo serve`` on a free local port, runs a dozen DP queries of mixed epsilon through
the HTTP API, then opens ``/dashboard`` in headless Chromium with the admin key and saves the whole page,
1280 pixels wide. Needs selenium and Debian's chromium + chromium-driver (no network is used).

Run: ``.venv/bin/python scripts/dashboard_screenshot.py [--out docs/img/dashboard.png]``
"""

from __future__ import annotations

import argparse
import tempfile
import time
from importlib import resources
from pathlib import Path

import duckdb
import httpx
import numpy as np
import pyarrow as pa
from make_sample_data import CATEGORIES  # the sample's category domain is public by construction

from kakeibo.service import hash_key, new_key
from kakeibo.service.browser import headless_chromium, open_dashboard
from kakeibo.service.process import free_port, start_server

OUT = Path(__file__).resolve().parents[1] / "docs" / "img" / "dashboard.png"
WIDTH = 1280
STORES = ("north", "south", "east", "west")
PACE = 1.0  # seconds between queries, so the charts' time axes have something to show

HOUSEHOLD_CATALOG = f"""
[tables.expenses]
privacy_unit = "user_id"
max_partitions = 3
max_rows_per_partition = 5
[tables.expenses.columns]
user_id = {{ type = "int" }}
category = {{ type = "str", public_values = {list(CATEGORIES)!r} }}
amount = {{ type = "float", lower = 0, upper = 100 }}
age = {{ type = "int", lower = 18, upper = 90, user_constant = true }}
"""

RETAIL_CATALOG = f"""
[tables.visits]
privacy_unit = "customer_id"
max_partitions = 2
max_rows_per_partition = 4
[tables.visits.columns]
customer_id = {{ type = "int" }}
store = {{ type = "str", public_values = {list(STORES)!r} }}
basket = {{ type = "float", lower = 0, upper = 200 }}
"""

# (analyst, dataset, budget of the grant)
GRANTS = (
    ("aiko", "household", 1.5),
    ("aiko", "retail", 1.0),
    ("ben", "household", 1.0),
    ("chen", "retail", 1.2),
)

# (analyst, dataset, SQL, epsilon), in the order they are asked
QUERIES = (
    ("aiko", "household", "SELECT COUNT(*) AS n FROM expenses", 0.1),
    ("chen", "retail", "SELECT COUNT(*) AS visits FROM visits", 0.05),
    ("ben", "household", "SELECT category, COUNT(*) AS n FROM expenses GROUP BY category", 0.25),
    ("aiko", "household", "SELECT category, SUM(amount) AS total FROM expenses GROUP BY category", 0.4),
    ("chen", "retail", "SELECT store, SUM(basket) AS revenue FROM visits GROUP BY store", 0.3),
    ("aiko", "retail", "SELECT store, AVG(basket) AS mean_basket FROM visits GROUP BY store", 0.3),
    ("ben", "household", "SELECT AVG(amount) AS mean_amount FROM expenses WHERE age < 40", 0.2),
    ("aiko", "household", "SELECT MEDIAN(amount) AS median_amount FROM expenses", 0.25),
    ("chen", "retail", "SELECT store, COUNT(*) AS n FROM visits GROUP BY store", 0.2),
    ("ben", "household", "SELECT COUNT(*) AS n FROM expenses WHERE category = 'health'", 0.1),
    ("aiko", "household", "SELECT AVG(age) AS mean_age FROM expenses", 0.3),
    ("chen", "retail", "SELECT AVG(basket) AS mean_basket FROM visits WHERE store = 'east'", 0.25),
)


def build_demo(folder: Path) -> tuple[Path, str]:
    """Write the two DuckDB databases, their catalogs and a service configuration into ``folder``; returns
    the configuration's path and the admin key."""
    source = resources.files("kakeibo.data").joinpath("household_expenses.csv")
    with duckdb.connect(str(folder / "household.duckdb")) as con:
        con.execute(f"CREATE TABLE expenses AS SELECT * FROM read_csv_auto('{source}')")
    rng = np.random.default_rng(20261123)
    customers = rng.integers(0, 1500, 12_000)
    stores = np.array(STORES)[rng.choice(len(STORES), 12_000, p=[0.4, 0.3, 0.2, 0.1])]
    baskets = np.round(rng.gamma(2.0, 25.0, 12_000), 2)
    with duckdb.connect(str(folder / "retail.duckdb")) as con:
        con.register("generated", pa.table({"customer_id": customers, "store": stores, "basket": baskets}))
        con.execute("CREATE TABLE visits AS SELECT * FROM generated")
    (folder / "household.toml").write_text(HOUSEHOLD_CATALOG)
    (folder / "retail.toml").write_text(RETAIL_CATALOG)
    admin_key = new_key()[0]
    (folder / "service.toml").write_text(
        f"""
[service]
ledger = "ledger.sqlite"
registry = "analysts.sqlite"
admin_key_hash = "{hash_key(admin_key)}"

[datasets.household]
database = "household.duckdb"
catalog = "household.toml"
budget = 3

[datasets.retail]
database = "retail.duckdb"
catalog = "retail.toml"
budget = 2
"""
    )
    return folder / "service.toml", admin_key


def populate(base_url: str, admin_key: str) -> None:
    """Create the analysts and their grants through the admin API, then ask :data:`QUERIES` as them."""
    with httpx.Client(base_url=base_url, timeout=60) as client:
        admin = {"Authorization": f"Bearer {admin_key}"}
        keys: dict[str, str] = {}
        for name, dataset, budget in GRANTS:
            if name not in keys:
                created = client.post("/v1/admin/analysts", json={"name": name}, headers=admin)
                created.raise_for_status()
                keys[name] = created.json()["key"]
            grant = {"analyst": name, "dataset": dataset, "budget": budget}
            client.post("/v1/admin/grants", json=grant, headers=admin).raise_for_status()
        for name, dataset, sql, epsilon in QUERIES:
            time.sleep(PACE)
            body = {"dataset": dataset, "sql": sql, "epsilon": epsilon}
            answer = client.post("/v1/query", json=body, headers={"Authorization": f"Bearer {keys[name]}"})
            if answer.status_code != 200:
                raise RuntimeError(f"{name}'s query {sql!r} was answered {answer.status_code}: {answer.text}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT, help=f"PNG to write (default: {OUT})")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="kakeibo-dashboard-") as folder:
        config, admin_key = build_demo(Path(folder))
        port = free_port()
        server = start_server(config, port)
        try:
            base_url = f"http://127.0.0.1:{port}"
            populate(base_url, admin_key)
            with headless_chromium(WIDTH, 900) as driver:
                state = open_dashboard(driver, base_url, admin_key)
                if state != "ready":
                    raise RuntimeError(f"the dashboard did not load (state {state!r}).")
                chrome = driver.execute_script("return window.outerHeight - window.innerHeight")
                height = driver.execute_script("return document.documentElement.scrollHeight")
                driver.set_window_size(WIDTH, int(height) + int(chrome))
                args.out.parent.mkdir(parents=True, exist_ok=True)
                args.out.write_bytes(driver.get_screenshot_as_png())
        finally:
            server.terminate()
            server.wait(timeout=30)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
