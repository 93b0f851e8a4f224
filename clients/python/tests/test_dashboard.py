"""The dashboard in a real browser (Debian's chromium and chromedriver, headless, driven by
python3-selenium): a client finds a failed run by filter, opens its timeline, restarts it and
sees the new run complete without reloading; an administrator pauses and resumes a queue on
the queues page; a tenant without the queue's grant sees none of its runs and no action.
Screenshots of each page go to $DEX_SCREENSHOTS (default: a temporary directory)."""

import os
import shutil
import threading
import time

import psycopg
import pytest

from serve_support import env, server, sql  # noqa: F401  (fixtures)

webdriver = pytest.importorskip("selenium.webdriver", reason="python3-selenium is not installed")
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support import expected_conditions as EC  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"


@pytest.fixture(scope="module")
def shots(tmp_path_factory):
    d = os.environ.get("DEX_SCREENSHOTS") or str(tmp_path_factory.mktemp("screenshots"))
    os.makedirs(d, exist_ok=True)
    print(f"screenshots in {d}")
    return d


@pytest.fixture
def browser():
    if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
        pytest.skip("chromium and chromium-driver are not installed")
    from selenium.webdriver.chrome.service import Service
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
              "--window-size=1400,1100", "--no-first-run", "--disable-extensions"):
        opts.add_argument(a)
    d = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    d.implicitly_wait(0)
    yield d
    d.quit()


def sign_in(d, server, token):
    d.delete_all_cookies()
    d.get(server.url + "/ui/login")
    d.find_element(By.ID, "token").send_keys(token)
    d.find_element(By.ID, "sign-in").click()
    WebDriverWait(d, 10).until(EC.presence_of_element_located((By.ID, "filters")))


def lease(conn, queue, run_id, timeout=15.0):
    """Lease the run's task on the queue (as the superuser test connection)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for t in conn.execute("SELECT run_id, task_id, lock_version FROM dex.poll_tasks(%s, 'ui-w', 50, '1 min')",
                              (queue,)).fetchall():
            if str(t[0]) == str(run_id):
                return t
        time.sleep(0.1)
    raise AssertionError(f"no task of {run_id} on {queue}")


def failed_run(conn, env, workflow):
    """A run whose activity fails both its attempts while a timer fires, and which then fails."""
    rid = conn.execute("SELECT dex.create_run(%s, %s, '{\"order\": 1042}', labels => '{\"shop\": \"berlin\"}')",
                       (workflow, env.wf)).fetchone()[0]
    r = lease(conn, env.wf, rid)
    conn.execute("SELECT dex.complete_task(%s, %s, %s, %s)", (*r, psycopg.types.json.Jsonb([
        {"id": 1, "scheduleActivity": {"name": "charge", "queue": env.act,
                                       "retryPolicy": {"maxAttempts": 2, "initialDelay": "0.3s"}}},
        {"id": 2, "startTimer": {"name": "cool-off", "delay": "0.6s"}},
        {"setCustomStatus": {"customStatus": "charging"}}])))
    for _ in range(2):
        a = lease(conn, env.act, rid)
        time.sleep(0.2)
        conn.execute("SELECT dex.fail_task(%s, %s, %s, '{\"message\": \"card network timed out\"}')", a)
    time.sleep(0.8)     # the timer fires
    r = lease(conn, env.wf, rid)
    conn.execute("SELECT dex.complete_task(%s, %s, %s, %s)", (*r, psycopg.types.json.Jsonb([
        {"failRun": {"failure": {"message": "card declined", "type": "Payment"}}}])))
    return str(rid)


def test_find_a_failed_run_restart_it_and_see_it_complete(server, env, sql, browser, shots, conninfo):
    d = browser
    workflow = f"checkout-{env.tag}"
    for i in range(3):      # runs that the filter must leave out
        sql.execute("SELECT dex.create_run(%s, %s, %s)", (workflow, env.wf, psycopg.types.json.Jsonb({"order": i})))
    rid = failed_run(sql, env, workflow)

    sign_in(d, server, env.tokens["client"])
    assert d.find_element(By.ID, "role").text == env.roles["client"]
    Select(d.find_element(By.ID, "f-status")).select_by_value("FAILED")
    d.find_element(By.ID, "f-workflow").send_keys(workflow)
    d.find_element(By.ID, "apply").click()
    WebDriverWait(d, 10).until(lambda d: "status=FAILED" in d.current_url)
    rows = d.find_elements(By.CSS_SELECTOR, "#runs tr.run")
    assert [r.get_attribute("data-id") for r in rows] == [rid]
    counts = d.find_element(By.ID, "counts").text
    assert "FAILED 1" in counts and "CREATED 3" in counts, counts
    d.save_screenshot(os.path.join(shots, "runs.png"))

    rows[0].find_element(By.CSS_SELECTOR, "a.run-link").click()
    WebDriverWait(d, 10).until(EC.presence_of_element_located((By.ID, "timeline")))
    assert d.find_element(By.ID, "status").text == "FAILED"
    assert "card declined" in d.find_element(By.ID, "failure").text
    assert d.find_element(By.ID, "custom-status").text == "charging"
    assert '"order": 1042' in d.find_element(By.ID, "argument").text
    tl = d.find_element(By.CSS_SELECTOR, "#timeline svg")
    lanes = [t.text for t in tl.find_elements(By.CSS_SELECTOR, "text.lane")]
    assert lanes[0] == "workflow tasks" and "activity charge #1" in lanes and "timer cool-off" in lanes, lanes
    # both attempts of the activity failed: two red bars on its lane; the timer fired: green
    assert len(tl.find_elements(By.CSS_SELECTOR, "rect.bar.bad")) == 2
    assert len(tl.find_elements(By.CSS_SELECTOR, "rect.bar.ok")) >= 3     # two workflow tasks, the timer
    actions = {a.get_attribute("id") for a in d.find_elements(By.CSS_SELECTOR, "#actions a")}
    assert actions == {"action-restart", "action-reset"}, actions    # it has ended: nothing else applies
    d.save_screenshot(os.path.join(shots, "run-failed.png"))

    d.find_element(By.ID, "action-restart").click()
    WebDriverWait(d, 10).until(EC.presence_of_element_located((By.ID, "confirm")))
    d.save_screenshot(os.path.join(shots, "confirm-restart.png"))
    assert sql.execute("SELECT count(*) FROM dex.runs WHERE origin_run_id = %s", (rid,)).fetchone()[0] == 0
    d.find_element(By.ID, "confirm").click()
    WebDriverWait(d, 10).until(EC.presence_of_element_located((By.ID, "origin")))
    new_id = d.find_element(By.ID, "run-id").text
    assert new_id != rid and d.find_element(By.ID, "origin").text == rid
    assert d.find_element(By.ID, "done").text.startswith("restart")
    assert d.find_element(By.ID, "status").text in ("CREATED", "RUNNING")

    # a worker completes the new run; the page shows it without being reloaded
    marker = d.execute_script("window.__notReloaded = true; return window.__notReloaded;")
    assert marker

    def work():
        with psycopg.connect(conninfo, autocommit=True) as c:
            r = lease(c, env.wf, new_id)
            c.execute("SELECT dex.complete_task(%s, %s, %s, %s)", (*r, psycopg.types.json.Jsonb([
                {"id": 1, "scheduleActivity": {"name": "charge", "queue": env.act}}])))
            a = lease(c, env.act, new_id)
            c.execute("SELECT dex.complete_task(%s, %s, %s, '{\"receipt\": \"R-1042\"}')", a)
            r = lease(c, env.wf, new_id)
            c.execute("SELECT dex.complete_task(%s, %s, %s, %s)", (*r, psycopg.types.json.Jsonb([
                {"completeRun": {"result": {"json": "{\"receipt\": \"R-1042\"}"}}}])))

    th = threading.Thread(target=work)
    th.start()
    th.join(60)
    WebDriverWait(d, 15).until(lambda d: d.find_element(By.ID, "status").text == "COMPLETED")
    assert d.execute_script("return window.__notReloaded === true")
    assert "R-1042" in d.find_element(By.ID, "result").text
    assert "runCompleted" in d.find_element(By.ID, "history").text      # the history too, live
    assert len(d.find_elements(By.CSS_SELECTOR, "#timeline rect.bar.ok")) >= 4
    d.save_screenshot(os.path.join(shots, "run-completed.png"))
    # the list, filtered by workflow, shows the new run as it completes
    d.get(server.url + f"/ui/runs?workflow={workflow}")
    first = d.find_elements(By.CSS_SELECTOR, "#runs tr.run")[0]
    assert first.get_attribute("data-id") == new_id and "COMPLETED" in first.text

    # the failed run reset to its first workflow task: a new run that goes back there
    d.get(server.url + f"/ui/runs/{rid}")
    d.find_element(By.ID, "action-reset").click()
    options = Select(d.find_element(By.ID, "event-id")).options
    assert len(options) == 2        # the run completed two workflow tasks
    Select(d.find_element(By.ID, "event-id")).select_by_index(0)
    d.find_element(By.ID, "reason").send_keys("retry the charge")
    d.find_element(By.ID, "confirm").click()
    WebDriverWait(d, 10).until(EC.presence_of_element_located((By.ID, "origin")))
    reset_id = d.find_element(By.ID, "run-id").text
    assert d.find_element(By.ID, "done").text.startswith("reset")
    assert sql.execute("SELECT origin, origin_run_id::text FROM dex.runs WHERE id = %s",
                       (reset_id,)).fetchone() == ("RESET", rid)
    sql.execute("SELECT dex.terminate_run(%s)", (reset_id,))


def test_queues_page_pause_and_resume(server, env, sql, browser, shots):
    d = browser
    sign_in(d, server, env.tokens["admin"])
    d.get(server.url + f"/ui/queues?name={env.tag}")
    section = d.find_element(By.ID, f"queue-{env.act}")
    assert len(section.find_elements(By.CSS_SELECTOR, "svg.chart")) == 2
    section.find_element(By.CSS_SELECTOR, "button.pause").click()
    d.switch_to.alert.accept()
    WebDriverWait(d, 10).until(EC.presence_of_element_located((By.ID, "done")))
    assert sql.execute("SELECT status FROM dex.queue WHERE name = %s", (env.act,)).fetchone()[0] == "PAUSED"
    section = d.find_element(By.ID, f"queue-{env.act}")
    assert "PAUSED" in section.find_element(By.CSS_SELECTOR, "h2").text
    # the charts have samples by now (one a second)
    time.sleep(2.5)
    d.get(server.url + f"/ui/queues?name={env.tag}")
    d.execute_script("document.getElementById('queue-%s').scrollIntoView()" % env.wf)
    wf_section = d.find_element(By.ID, f"queue-{env.wf}")
    assert wf_section.find_elements(By.CSS_SELECTOR, "polyline.series")
    assert "p50" in wf_section.find_element(By.CSS_SELECTOR, ".latency").text
    d.save_screenshot(os.path.join(shots, "queues.png"))
    section = d.find_element(By.ID, f"queue-{env.act}")
    section.find_element(By.CSS_SELECTOR, "button.pause").click()
    d.switch_to.alert.accept()
    WebDriverWait(d, 10).until(EC.presence_of_element_located((By.ID, "done")))
    assert sql.execute("SELECT status FROM dex.queue WHERE name = %s", (env.act,)).fetchone()[0] == "ACTIVE"
    # a client may not see the queues page at all
    sign_in(d, server, env.tokens["client"])
    d.get(server.url + f"/ui/queues?name={env.tag}")
    assert "403" in d.find_element(By.TAG_NAME, "h1").text


def test_another_tenant_sees_nothing_of_the_queue(server, env, sql, browser, shots):
    d = browser
    rid = str(sql.execute("SELECT dex.create_run('hidden', %s)", (env.wf,)).fetchone()[0])
    sign_in(d, server, env.tokens["other"])
    d.get(server.url + f"/ui/runs?queue={env.wf}")
    assert d.find_elements(By.CSS_SELECTOR, "#runs tr.run") == []
    assert "no runs match" in d.find_element(By.ID, "counts").text
    d.get(server.url + "/ui/runs")
    assert rid not in [r.get_attribute("data-id") for r in d.find_elements(By.CSS_SELECTOR, "#runs tr.run")]
    d.save_screenshot(os.path.join(shots, "other-tenant-runs.png"))
    d.get(server.url + f"/ui/runs/{rid}")
    assert "404" in d.find_element(By.TAG_NAME, "h1").text
    assert d.find_elements(By.CSS_SELECTOR, "#actions a") == []
    d.get(server.url + f"/ui/runs/{rid}/confirm/terminate")
    assert "404" in d.find_element(By.TAG_NAME, "h1").text
    assert d.find_elements(By.ID, "confirm") == []
    d.save_screenshot(os.path.join(shots, "other-tenant-run.png"))
    # the client of the queue sees it, with its actions
    sign_in(d, server, env.tokens["client"])
    d.get(server.url + f"/ui/runs/{rid}")
    actions = {a.get_attribute("id") for a in d.find_elements(By.CSS_SELECTOR, "#actions a")}
    assert {"action-cancel", "action-terminate", "action-restart", "action-event"} <= actions, actions
    assert "action-suspend" not in actions and "action-resume" not in actions     # not running
    assert sql.execute("SELECT status FROM dex.runs WHERE id = %s", (rid,)).fetchone()[0] == "CREATED"
    # sends it an event, then cancels it (not executing: it ends at once), each confirmed first
    d.find_element(By.ID, "action-event").click()
    d.find_element(By.ID, "event-id").send_keys("approval")
    d.find_element(By.ID, "payload").send_keys('{"by": "ana"}')
    d.find_element(By.ID, "confirm").click()
    WebDriverWait(d, 10).until(EC.presence_of_element_located((By.ID, "done")))
    assert sql.execute("SELECT dex.send_external_event(%s, 'approval')", (rid,)).fetchone()[0] is False
    d.find_element(By.ID, "action-cancel").click()
    d.find_element(By.ID, "reason").send_keys("customer asked")
    d.save_screenshot(os.path.join(shots, "confirm-cancel.png"))
    d.find_element(By.ID, "confirm").click()
    WebDriverWait(d, 10).until(lambda d: d.find_element(By.ID, "status").text == "CANCELLED")
    assert "customer asked" in d.find_element(By.ID, "history").text
    assert {a.get_attribute("id") for a in d.find_elements(By.CSS_SELECTOR, "#actions a")} == {"action-restart"}
