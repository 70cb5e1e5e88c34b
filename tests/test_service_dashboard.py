"""The query service's budget dashboard (issue 7): its JSON endpoint through FastAPI's test client (who sees
what, and that every number is the ledger's), its static files and their Content-Security-Policy, and the
page itself in headless Chromium against a real server (Debian's chromium and chromedriver, via selenium):
charts, history rows, remaining budgets, hostile SQL shown as text, and a screenshot that really has a chart.
"""

from __future__ import annotations

import io
import re
import statistics
from collections.abc import Iterator
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from fastapi.testclient import TestClient
from PIL import Image
from selenium.webdriver import Chrome
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement

from kakeibo.accounting import Ledger
from kakeibo.accounting.ledger import Scope
from kakeibo.accounting.overlap import Box
from kakeibo.privacy import PrivacyLoss
from kakeibo.service import AnalystRegistry, ServiceConfig, create_app, new_key
from kakeibo.service.browser import headless_chromium, missing_browser, open_dashboard
from kakeibo.service.dashboard import CONTENT_SECURITY_POLICY, Viewer, dashboard_data
from kakeibo.service.process import free_port, start_server
from test_service import ask, bearer, make_analyst, write_service

HOSTILE = "<img src=x onerror=alert(1)>"
QUERIES = {
    "alice": [
        ("SELECT COUNT(*) AS n FROM visits", 0.1),
        ("SELECT category, SUM(amount) AS total, COUNT(*) AS n FROM visits GROUP BY category", 0.2),
        (f"SELECT COUNT(*) AS n FROM visits WHERE category = '{HOSTILE}'", 0.05),
    ],
    "bob": [
        ("SELECT AVG(amount) AS bob_mean FROM visits", 0.25),
        ("SELECT category, COUNT(*) AS bob_n FROM visits GROUP BY category", 0.15),
    ],
}


def populate(client: httpx.Client, admin_key: str) -> tuple[dict[str, str], dict[str, list[Any]]]:
    """Create the analysts of :data:`QUERIES` (granted shop) and ask their queries; returns their keys and
    the answers (JSON) in order. ``client`` is a test client or an httpx client of a real server."""
    keys, answers = {}, {}
    for name, queries in QUERIES.items():
        keys[name] = make_analyst(client, admin_key, name)
        answers[name] = []
        for sql, epsilon in queries:
            answer = ask(client, keys[name], sql=sql, epsilon=epsilon)
            assert answer.status_code == 200, answer.text
            answers[name].append(answer.json())
    return keys, answers


def widths_of(answer: dict[str, Any]) -> list[dict[str, Any]]:
    """From a query answer: per aggregate, the median CI width over its groups and the number of groups."""
    columns = answer["columns"]
    out = []
    for alias in [c.removesuffix("_ci_low") for c in columns if c.endswith("_ci_low")]:
        low, high = columns.index(f"{alias}_ci_low"), columns.index(f"{alias}_ci_high")
        spans = [row[high] - row[low] for row in answer["rows"]]
        out.append({"aggregate": alias, "median_width": statistics.median(spans), "groups": len(spans)})
    return out


def loss_of(loss: PrivacyLoss) -> dict[str, float]:
    return {"epsilon": float(loss.epsilon), "delta": float(getattr(loss, "delta", 0))}


@pytest.fixture
def client(tmp_path: Path) -> Iterator[tuple[TestClient, str]]:
    config, admin_key = write_service(tmp_path)
    with TestClient(create_app(ServiceConfig.from_toml(config))) as test_client:
        yield test_client, admin_key


@pytest.fixture
def served(client: tuple[TestClient, str]) -> tuple[TestClient, str, dict[str, str], dict[str, list[Any]]]:
    test_client, admin_key = client
    return (test_client, admin_key, *populate(test_client, admin_key))


# -- the JSON endpoint ---------------------------------------------------------------------------------


def test_an_analyst_sees_only_their_own_rows(
    served: tuple[TestClient, str, dict[str, str], dict[str, list[Any]]], tmp_path: Path
) -> None:
    test_client, _, keys, _ = served
    answer = test_client.get("/v1/dashboard", headers=bearer(keys["alice"]))
    assert answer.status_code == 200 and answer.headers["cache-control"] == "no-store"
    data = answer.json()
    assert data["viewer"] == {"role": "analyst", "name": "alice"}
    [dataset] = data["datasets"]
    assert dataset["name"] == "shop" and [a["name"] for a in dataset["analysts"]] == ["alice"]
    with Ledger(tmp_path / "ledger.sqlite") as ledger:
        own = [e.seq for e in ledger.entries(analyst="alice", dataset="shop")]
        dataset_remaining = float(ledger.remaining(dataset="shop").epsilon)
    assert [row["entry"] for row in dataset["analysts"][0]["history"]] == own
    assert dataset["remaining"]["epsilon"] == dataset_remaining  # the dataset-wide total, as /v1/budget
    assert "bob" not in answer.text  # neither bob's name nor any of his SQL (its aliases name him)


def test_the_admin_sees_every_analyst_with_the_ledgers_numbers(
    served: tuple[TestClient, str, dict[str, str], dict[str, list[Any]]], tmp_path: Path
) -> None:
    test_client, admin_key, _, answers = served
    make_analyst(test_client, admin_key, "carol", budget=None)  # no grant, no query: nothing to show
    data = test_client.get("/v1/dashboard", headers=bearer(admin_key)).json()
    assert data["viewer"] == {"role": "admin"}
    [dataset] = data["datasets"]
    with Ledger(tmp_path / "ledger.sqlite") as ledger:
        budgets = ledger.budgets()
        assert dataset["budget"] == loss_of(budgets[Scope(dataset="shop")])
        assert dataset["spent"] == loss_of(ledger.spent(dataset="shop"))
        assert dataset["remaining"] == loss_of(ledger.remaining(dataset="shop"))
        assert [a["name"] for a in dataset["analysts"]] == sorted(QUERIES)
        for shown in dataset["analysts"]:
            name = shown["name"]
            entries = ledger.entries(analyst=name, dataset="shop")
            assert shown["budget"] == loss_of(budgets[Scope(name, "shop")])
            assert shown["spent"] == loss_of(ledger.spent(analyst=name, dataset="shop"))
            assert shown["remaining"] == loss_of(ledger.remaining(analyst=name, dataset="shop"))
            assert [p["time"] for p in shown["series"]] == [e.created_at.isoformat() for e in entries]
            assert shown["series"][-1]["epsilon"] == shown["spent"]["epsilon"]
            assert [
                (h["entry"], h["sql"], {"epsilon": h["epsilon"], "delta": h["delta"]})
                for h in shown["history"]
            ] == [(e.seq, e.label, loss_of(e.loss)) for e in entries]
            by_entry = {a["ledger_entry"]: a for a in answers[name]}
            assert [h["intervals"] for h in shown["history"]] == [widths_of(by_entry[e.seq]) for e in entries]


def test_the_spending_curve_is_the_ledgers_spent_after_each_charge(tmp_path: Path) -> None:
    """Charges over disjoint regions compose in parallel: the curve follows the ledger, not a running sum.
    A stored payload that is not a released table, like none at all, gives no interval widths."""
    ledger = Ledger(tmp_path / "ledger.sqlite", budget=3)
    registry = AnalystRegistry(tmp_path / "analysts.sqlite")
    registry.create("alice")
    registry.grant("alice", "d")
    ledger.set_budget(2, analyst="alice", dataset="d")
    young, old = Box({"age": (18, 40)}, unit="user"), Box({"age": (41, 90)}, unit="user")
    charges = [(0.5, young), (0.75, old), (0.25, None), (0.5, young)]
    after = []
    for i, (epsilon, region) in enumerate(charges):
        opaque = b"not a table" if i == 0 else None
        ledger.charge(
            epsilon,
            label="q",
            analyst="alice",
            dataset="d",
            region=region,
            request_id=f"r{i}",
            release=opaque,
        )
        after.append(float(ledger.spent(analyst="alice", dataset="d").epsilon))
    [shown] = dashboard_data(ledger, registry, ["d"], Viewer(None))["datasets"][0]["analysts"]
    assert [p["epsilon"] for p in shown["series"]] == after
    assert after[-1] < sum(epsilon for epsilon, _ in charges)  # a running sum would overstate it
    assert [h["intervals"] for h in shown["history"]] == [None] * len(charges)  # no released table stored
    registry.close()
    ledger.close()


def test_wrong_revoked_and_missing_keys_get_401(
    served: tuple[TestClient, str, dict[str, str], dict[str, list[Any]]],
) -> None:
    test_client, admin_key, keys, _ = served
    assert test_client.get("/v1/dashboard").status_code == 401
    for key in (new_key()[0], keys["alice"].replace("kak_", "kak_0"), admin_key + "x"):
        assert test_client.get("/v1/dashboard", headers=bearer(key)).status_code == 401
    assert test_client.post("/v1/admin/analysts/alice/revoke", headers=bearer(admin_key)).status_code == 200
    refused = test_client.get("/v1/dashboard", headers=bearer(keys["alice"]))
    assert refused.status_code == 401 and "alice" not in refused.text
    [dataset] = test_client.get("/v1/dashboard", headers=bearer(admin_key)).json()["datasets"]
    assert [a["revoked"] for a in dataset["analysts"]] == [True, False]  # alice's history stays visible


def test_an_analyst_over_the_rate_limit_stays_refused(tmp_path: Path) -> None:
    """Trying the admin key after a failed analyst check must not turn an analyst's 429 into anything else."""
    config, admin_key = write_service(tmp_path, per_minute=2)
    with TestClient(create_app(ServiceConfig.from_toml(config))) as test_client:
        key = make_analyst(test_client, admin_key, "alice")
        statuses = [test_client.get("/v1/dashboard", headers=bearer(key)).status_code for _ in range(3)]
        assert statuses == [200, 200, 429]


# -- the static page -----------------------------------------------------------------------------------


class _Tags(HTMLParser):
    """Every start tag with its attributes, and whatever text appears inside <script> elements."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.script_text = ""
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self._in_script = tag == "script"

    def handle_endtag(self, tag: str) -> None:
        self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script:
            self.script_text += data.strip()


@pytest.mark.parametrize(
    ("path", "media_type"),
    [
        ("/dashboard", "text/html"),
        ("/dashboard/dashboard.js", "text/javascript"),
        ("/dashboard/dashboard.css", "text/css"),
        ("/dashboard/favicon.svg", "image/svg+xml"),
    ],
)
def test_the_page_is_served_with_a_content_security_policy(
    client: tuple[TestClient, str], path: str, media_type: str
) -> None:
    page = client[0].get(path)
    assert page.status_code == 200 and page.headers["content-type"].startswith(media_type)
    assert page.headers["content-security-policy"] == CONTENT_SECURITY_POLICY == "default-src 'self'"
    assert page.headers["x-content-type-options"] == "nosniff"


def test_the_page_has_no_inline_code_nor_outside_resources_and_inserts_text_only(
    client: tuple[TestClient, str],
) -> None:
    parser = _Tags()
    parser.feed(client[0].get("/dashboard").text)
    scripts = [attrs for tag, attrs in parser.tags if tag == "script"]
    assert scripts and all(attrs.get("src") for attrs in scripts) and parser.script_text == ""
    attributes = [(name, value) for _, attrs in parser.tags for name, value in attrs.items()]
    assert not [name for name, _ in attributes if name.startswith("on") or name == "style"]
    links = [value or "" for name, value in attributes if name in ("src", "href", "action")]
    assert links and not [link for link in links if ":" in link or link.startswith("/")]
    [key] = [attrs for _, attrs in parser.tags if attrs.get("id") == "api-key"]
    assert key["type"] == "password" and "name" not in key  # without the script, a submit sends no key
    script = client[0].get("/dashboard/dashboard.js").text
    assert not re.findall(
        r"innerHTML|outerHTML|insertAdjacentHTML|document\.write|eval\(|localStorage", script
    )


# -- the page in headless Chromium, against a real server ---------------------------------------------


@dataclass
class Live:
    base_url: str
    admin_key: str
    keys: dict[str, str]
    ledger: Path


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    folder = tmp_path_factory.mktemp("dashboard")
    config, admin_key = write_service(folder)
    port = free_port()
    server = start_server(config, port)
    try:
        base_url = f"http://127.0.0.1:{port}"
        with httpx.Client(base_url=base_url, timeout=60) as http:
            keys, _ = populate(http, admin_key)
        yield Live(base_url, admin_key, keys, folder / "ledger.sqlite")
    finally:
        server.terminate()
        server.wait(timeout=30)


def require_browser() -> None:
    problem = missing_browser()
    if problem is not None:
        pytest.fail(problem)


def api_view(live: Live, key: str) -> dict[str, Any]:
    answer = httpx.get(f"{live.base_url}/v1/dashboard", headers=bearer(key), timeout=60)
    assert answer.status_code == 200
    data: dict[str, Any] = answer.json()
    return data


def check_page(driver: Chrome, live: Live, api: dict[str, Any]) -> None:
    """One chart per (dataset, analyst) of the API's view, one history row per ledger entry, the API's
    remaining budgets, SQL as text only, and no console errors."""
    pairs = sorted((ds["name"], a["name"]) for ds in api["datasets"] for a in ds["analysts"])
    charts = driver.find_elements(By.CSS_SELECTOR, "svg.chart")
    assert sorted((c.get_attribute("data-dataset"), c.get_attribute("data-analyst")) for c in charts) == pairs
    with Ledger(live.ledger) as ledger:
        for ds in api["datasets"]:
            section = driver.find_element(By.CSS_SELECTOR, f'section.dataset[data-dataset="{ds["name"]}"]')
            check_number(section.find_element(By.CSS_SELECTOR, ".dataset-remaining .value"), ds["remaining"])
            for shown in ds["analysts"]:
                card = section.find_element(
                    By.CSS_SELECTOR, f'article.analyst[data-analyst="{shown["name"]}"]'
                )
                rows = card.find_elements(By.CSS_SELECTOR, "tr.history-row")
                entries = ledger.entries(analyst=shown["name"], dataset=ds["name"])
                assert [int(str(row.get_attribute("data-entry"))) for row in rows] == [e.seq for e in entries]
                assert [row.find_element(By.CSS_SELECTOR, "td.sql").text for row in rows] == [
                    e.label for e in entries
                ]
                check_number(card.find_element(By.CSS_SELECTOR, ".remaining-value"), shown["remaining"])
    assert (
        driver.execute_script("return document.querySelectorAll('td.sql *:not(code), td.sql code *').length")
        == 0
    )
    assert driver.execute_script("return document.images.length") == 0
    assert [e for e in driver.get_log("browser") if e["level"] == "SEVERE"] == []


def check_number(element: WebElement, loss: dict[str, float]) -> None:
    """The element carries the API's epsilon exactly (data-epsilon) and shows it rounded."""
    assert float(str(element.get_attribute("data-epsilon"))) == loss["epsilon"]
    assert float(element.text) == pytest.approx(loss["epsilon"], rel=1e-3, abs=1e-12)


def check_screenshot(driver: Chrome, chart: WebElement) -> None:
    """The screenshot has the viewport's size and, inside the chart's rectangle, a line of the series
    colour across at least half its width; the page is not blank."""
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", chart)
    # the rectangle in viewport coordinates, which is what a screenshot shows
    left, top, width, height, ratio, inner_w, inner_h = driver.execute_script(
        "const r = arguments[0].getBoundingClientRect();"
        "return [r.left, r.top, r.width, r.height, devicePixelRatio, innerWidth, innerHeight];",
        chart,
    )
    image = Image.open(io.BytesIO(driver.get_screenshot_as_png())).convert("RGB")
    assert image.size == (round(inner_w * ratio), round(inner_h * ratio))
    pixels = np.asarray(image).astype(int)
    stroke = chart.find_element(By.CSS_SELECTOR, ".series-line").value_of_css_property("stroke")
    colour = np.array([int(part) for part in re.findall(r"\d+", stroke)[:3]])
    box = pixels[
        round(top * ratio) : round((top + height) * ratio),
        round(left * ratio) : round((left + width) * ratio),
    ]
    on_line = np.all(np.abs(box - colour) <= 10, axis=2)
    assert on_line.any(axis=0).sum() >= 0.5 * box.shape[1]
    packed = (pixels[..., 0] << 16) | (pixels[..., 1] << 8) | pixels[..., 2]
    assert np.unique(packed).size > 50 and pixels.std() > 10


def test_the_admin_dashboard_in_chromium(live: Live) -> None:
    require_browser()
    api = api_view(live, live.admin_key)
    with headless_chromium() as driver:
        assert open_dashboard(driver, live.base_url, live.admin_key) == "ready"
        assert driver.execute_script(
            "return [sessionStorage.getItem('kakeibo.dashboard.key'), localStorage.length]"
        ) == [live.admin_key, 0]
        check_page(driver, live, api)
        assert len(driver.find_elements(By.CSS_SELECTOR, "svg.chart")) == len(QUERIES)
        hostile = [c.text for c in driver.find_elements(By.CSS_SELECTOR, "td.sql code") if HOSTILE in c.text]
        assert hostile == [QUERIES["alice"][2][0]]
        check_screenshot(driver, driver.find_element(By.CSS_SELECTOR, 'svg.chart[data-analyst="alice"]'))


def test_an_analyst_sees_only_their_own_chart_in_chromium(live: Live) -> None:
    require_browser()
    api = api_view(live, live.keys["bob"])
    with headless_chromium() as driver:
        assert open_dashboard(driver, live.base_url, live.keys["bob"]) == "ready"
        check_page(driver, live, api)
        [chart] = driver.find_elements(By.CSS_SELECTOR, "svg.chart")
        assert chart.get_attribute("data-analyst") == "bob"
        page = driver.find_element(By.TAG_NAME, "body").text
        assert "alice" not in page and HOSTILE not in page
        check_screenshot(driver, chart)
        assert open_dashboard(driver, live.base_url, new_key()[0]) == "denied"
        assert driver.find_elements(By.CSS_SELECTOR, "svg.chart") == []
        assert driver.execute_script("return sessionStorage.length") == 0
