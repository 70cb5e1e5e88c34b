"""Headless Chromium driven by selenium, for the dashboard's browser test and its README screenshot.

It uses the system's browser and driver (Debian's ``chromium`` and ``chromium-driver``) and names both, so
selenium never runs its manager to download anything: the machines that run this have no internet.
selenium is a development dependency, not one of the package's, so it is imported only when a browser is
started (importing this module needs nothing extra).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from selenium.webdriver import Chrome

__all__ = ["CHROMEDRIVER", "CHROMIUM", "headless_chromium", "missing_browser", "open_dashboard"]

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")

# Quiet, offline, reproducible: no GPU, no network services of the browser's own, no first-run UI, one
# device pixel per CSS pixel and no scroll bars (screenshots of the same page look the same).
_ARGUMENTS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--force-device-scale-factor=1",
)


def missing_browser() -> str | None:
    """What to install when the system browser or its driver is missing, else ``None``."""
    absent = [str(path) for path in (CHROMIUM, CHROMEDRIVER) if not os.access(path, os.X_OK)]
    if not absent:
        return None
    return (
        f"{' and '.join(absent)} not found: install Debian's browser and driver with "
        "`sudo apt-get install chromium chromium-driver` (.ci/run installs them)."
    )


@contextmanager
def headless_chromium(width: int = 1280, height: int = 900) -> Iterator[Chrome]:
    """A headless Chromium with a fresh profile in a temporary directory, its console log kept (read it
    with ``driver.get_log("browser")``); quit and its profile removed on exit."""
    problem = missing_browser()
    if problem is not None:
        raise RuntimeError(problem)
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    with tempfile.TemporaryDirectory(prefix="kakeibo-chromium-") as profile:
        options = Options()
        options.binary_location = str(CHROMIUM)
        for argument in (*_ARGUMENTS, f"--window-size={width},{height}", f"--user-data-dir={profile}"):
            options.add_argument(argument)
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        # the driver's path is given, so selenium does not run its manager (which would download one)
        driver = webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=options)
        try:
            yield driver
        finally:
            driver.quit()


def open_dashboard(driver: Chrome, base_url: str, key: str, *, timeout: float = 20) -> str:
    """Load ``base_url``'s dashboard, enter ``key`` and wait until the page has finished loading; returns
    its final state (``body[data-state]``): "ready", or "denied" / "error" when the key was refused or the
    data could not be loaded."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    def state() -> str:
        return str(driver.find_element(By.TAG_NAME, "body").get_attribute("data-state"))

    driver.get(f"{base_url}/dashboard")
    driver.find_element(By.ID, "api-key").send_keys(key)
    driver.find_element(By.ID, "show").click()
    WebDriverWait(driver, timeout).until(lambda _: state() in ("ready", "denied", "error"))
    return state()
