"""The controller's status page in a real browser (Debian's Chromium, headless, driven by Selenium)."""

from __future__ import annotations

import shutil
import time

import pytest

from tests.integration.test_operator_status import start_mirroring
from tests.support.kafka_io import wait_for

pytestmark = pytest.mark.integration

RED = "rgb(255, 214, 214)"  # tr.problem in controller/status_page.html


@pytest.fixture
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_path = shutil.which("chromedriver")
    assert chromium and driver_path, "Chromium and its driver are needed: apt-get install -y chromium chromium-driver"
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


def _rows(driver, table: str) -> list[dict]:
    return driver.execute_script(
        """return Array.from(document.querySelectorAll(arguments[0] + ' tbody tr[data-worker], '
                                                      + arguments[0] + ' tbody tr[data-topic]')).map(r => ({
             worker: r.dataset.worker, topic: r.dataset.topic, partition: r.dataset.partition,
             owner: r.dataset.owner, text: r.innerText,
             background: getComputedStyle(r.cells[0]).backgroundColor}));""", f"#{table}")


def test_status_page_shows_the_pipeline_and_a_stopped_workers_rows_turn_red(pipeline, services, tmp_path, browser):
    # Given a pipeline mirroring a 4-partition topic with workers w1 and w2 and a passing verification
    topic, run_id = start_mirroring(pipeline, services, tmp_path)
    w2 = pipeline.start_worker("w2")

    def spread():
        code, body = pipeline.api("GET", "/status")
        rows = [p for p in body["partitions"] if p["topic"] == topic]
        owners = {p["owner"] for p in rows if p["health"] == "ok" and p["lag_records"] == 0}
        return body if code == 200 and body["healthy"] and owners == {"w1", "w2"} else None

    wait_for(spread, 120, "both workers own partitions")

    # When a person opens the page
    browser.get(f"{pipeline.url}/ui")

    # Then it shows the verdict, both workers, every partition with owner and lag, and links the report
    assert "healthy" in browser.title
    assert browser.find_element("id", "verdict").text == "Healthy"
    workers = _rows(browser, "workers")
    assert [w["worker"] for w in workers] == ["w1", "w2"]
    partitions = [p for p in _rows(browser, "partitions") if p["topic"] == topic]
    assert [p["partition"] for p in partitions] == ["0", "1", "2", "3"]
    assert all(p["background"] != RED for p in workers + partitions)
    assert all("unknown" not in p["text"] and "-1" not in p["text"].split() for p in partitions)
    assert f"Last run {run_id}: OK" in browser.find_element("id", "verification").text
    browser.find_element("id", "report").click()
    wait_for(lambda: browser.current_url.endswith("/ui/verification"), 10, "the report opens")
    assert "orders" in browser.page_source
    browser.back()
    wait_for(lambda: browser.current_url.endswith("/ui"), 10, "back on the status page")
    w2_partitions = {p["partition"] for p in _rows(browser, "partitions") if p["owner"] == "w2"}
    assert w2_partitions

    # When worker w2 is stopped (it keeps its partitions for the restart grace)
    w2.terminate()

    # Then without a reload, the page refreshes itself and w2's rows turn red while w1's stay as they were
    def red():
        rows = _rows(browser, "workers") + [p for p in _rows(browser, "partitions") if p["topic"] == topic]
        flagged = {(r["worker"] or f"{r['topic']}:{r['partition']}") for r in rows if r["background"] == RED}
        return rows if flagged == {"w2", *(f"{topic}:{p}" for p in w2_partitions)} else None

    started = time.monotonic()
    rows = wait_for(red, 30, "w2's rows turn red")
    assert time.monotonic() - started < 30
    assert any(r["worker"] == "w2" and "lost" in r["text"] for r in rows)
    assert browser.find_element("id", "verdict").text == "Needs attention"
    assert "worker w2 is lost" in browser.find_element("id", "problems").text
