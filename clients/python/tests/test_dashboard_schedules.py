"""The dashboard's schedules page in a real browser (headless chromium, as test_dashboard.py):
an administrator sees a schedule's timing and next fire time, triggers it behind a confirmation
and sees its run appear in the list, linked to the run's page; pauses it with a note and
unpauses it; a role that may read the schedules but not steer them sees no action and is
refused the confirmation page; a client may not see the page."""

import os

from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import WebDriverWait

from serve_support import env, server, sql  # noqa: F401  (fixtures)
from test_dashboard import browser, shots, sign_in  # noqa: F401  (fixtures)


def row(d, name):
    return d.find_element(By.CSS_SELECTOR, f'#schedules tr.schedule[data-name="{name}"]')


def test_schedules_page_trigger_pause_unpause(server, env, sql, browser, shots):
    d = browser
    name = f"ui-nightly-{env.tag}"
    sql.execute("SELECT dex.create_schedule(%s, 'report', %s, cron => '30 2 * * *', "
                "timezone => 'Europe/Berlin')", (name, env.wf))
    sql.execute("SELECT dex.create_schedule(%s, 'sync', %s, every => '5 minutes', overlap => 'buffer_one', "
                "paused => true)", (name + "-sync", env.wf))
    try:
        sign_in(d, server, env.tokens["admin"])
        d.find_element(By.LINK_TEXT, "Schedules").click()
        WebDriverWait(d, 10).until(EC.presence_of_element_located((By.ID, "schedules")))
        r = row(d, name)
        assert "30 2 * * *" in r.text and "Europe/Berlin" in r.text and env.wf in r.text
        assert r.find_element(By.CSS_SELECTOR, "td.next").text       # a next fire time
        assert r.find_element(By.CSS_SELECTOR, "td.last").text == ""
        assert r.find_element(By.CSS_SELECTOR, "td.paused").text == "no"
        s = row(d, name + "-sync")
        assert "every 300 s" in s.text and "paused" in s.find_element(By.CSS_SELECTOR, "td.paused").text
        assert s.find_element(By.CSS_SELECTOR, "td.next").text == ""
        assert {a.text for a in s.find_elements(By.CSS_SELECTOR, "a.action")} == {"Unpause", "Trigger"}

        # trigger, confirmed first: the run appears, linked to its page
        r.find_element(By.CSS_SELECTOR, "a.action.trigger").click()
        assert "Trigger schedule" in d.find_element(By.TAG_NAME, "h1").text
        d.find_element(By.ID, "confirm").click()
        WebDriverWait(d, 10).until(EC.presence_of_element_located((By.ID, "done")))
        rid = d.find_element(By.ID, "done-run").text
        assert str(sql.execute("SELECT last_run_id FROM dex.schedules WHERE name = %s",
                               (name,)).fetchone()[0]) == rid
        r = row(d, name)
        link = r.find_element(By.CSS_SELECTOR, "td.last a.run-link")
        assert link.get_attribute("href").endswith(f"/ui/runs/{rid}")
        assert "CREATED" in r.find_element(By.CSS_SELECTOR, "td.last").text
        assert r.find_element(By.CSS_SELECTOR, "td.started").text == "1"
        d.save_screenshot(os.path.join(shots, "schedules.png"))
        # the live list follows the run's status without a reload
        sql.execute("SELECT dex.terminate_run(%s)", (rid,))
        WebDriverWait(d, 10).until(lambda d: "TERMINATED" in row(d, name).find_element(By.CSS_SELECTOR, "td.last").text)
        row(d, name).find_element(By.CSS_SELECTOR, "td.last a.run-link").click()
        WebDriverWait(d, 10).until(EC.presence_of_element_located((By.ID, "timeline")))
        assert d.find_element(By.ID, "status").text == "TERMINATED"
        labels = sql.execute("SELECT labels FROM dex.runs WHERE id = %s", (rid,)).fetchone()[0]
        assert labels["dex.schedule"] == name

        # pause with a note, then unpause
        d.get(server.url + "/ui/schedules")
        row(d, name).find_element(By.CSS_SELECTOR, "a.action.pause").click()
        d.find_element(By.ID, "note").send_keys("warehouse migration")
        d.find_element(By.ID, "confirm").click()
        WebDriverWait(d, 10).until(EC.presence_of_element_located((By.ID, "done")))
        assert sql.execute("SELECT paused, note FROM dex.schedules WHERE name = %s",
                           (name,)).fetchone() == (True, "warehouse migration")
        assert "warehouse migration" in row(d, name).find_element(By.CSS_SELECTOR, "td.paused").text
        row(d, name).find_element(By.CSS_SELECTOR, "a.action.unpause").click()
        d.find_element(By.ID, "confirm").click()
        WebDriverWait(d, 10).until(EC.presence_of_element_located((By.ID, "done")))
        assert sql.execute("SELECT paused FROM dex.schedules WHERE name = %s", (name,)).fetchone()[0] is False

        # a role that may read the schedules but call none of their functions: no actions
        viewer = f"rest_viewer_{env.tag}"
        sql.execute(f"CREATE ROLE {viewer} IN ROLE dex_client")
        sql.execute(f"GRANT SELECT ON dex.schedules TO {viewer}")
        sql.execute(f"GRANT {viewer} TO {env.roles['server']}")
        token = sql.execute("SELECT dex.create_api_token(%s, %s)", (f"rest-viewer-{env.tag}", viewer)).fetchone()[0]
        try:
            sign_in(d, server, token)
            d.get(server.url + "/ui/schedules")
            assert row(d, name).find_elements(By.CSS_SELECTOR, "a.action") == []
            d.get(server.url + f"/ui/schedules/{name}/confirm/trigger")
            assert "403" in d.find_element(By.TAG_NAME, "h1").text
            assert d.find_elements(By.ID, "confirm") == []
        finally:
            sql.execute("SELECT dex.revoke_api_token(%s)", (f"rest-viewer-{env.tag}",))
            sql.execute(f"REVOKE SELECT ON dex.schedules FROM {viewer}")
            sql.execute(f"DROP ROLE {viewer}")
        assert sql.execute("SELECT runs_started FROM dex.schedules WHERE name = %s", (name,)).fetchone()[0] == 1

        # a client may not see the page
        sign_in(d, server, env.tokens["client"])
        d.get(server.url + "/ui/schedules")
        assert "403" in d.find_element(By.TAG_NAME, "h1").text
    finally:
        sql.execute("DELETE FROM dex.schedule WHERE name LIKE %s", (name + "%",))
