"""HTML/JS in user data is shown as text on every page, in real headless Chromium.

A Flickr8k-Expert subset whose image keys, system names, captions, references, description,
uploaded metric names, campaign titles and instructions and worker labels are attack strings
(tests/hostile.py: script tags, event handlers, attribute breakouts, ``</script>``, ``javascript:``
URLs, ``{{ 7*7 }}``, TeX that matplotlib's mathtext would parse or choke on). Every page that shows
them is opened: dashboard, dataset, benchmark, comparison, diversity and image pages with their plots,
owner pages, the rater pages of the five task kinds, the MTurk ExternalQuestion page inside a
cross-site <iframe> and its forward page, the HTMLQuestion document and the requester-website layout
filled in the way MTurk fills it. On each: no payload ran (``window.__pwned`` undefined, no alert) and
the payload text is there literally.

A script installed before every document (Chrome DevTools ``Page.addScriptToEvaluateOnNewDocument``)
logs any write to ``window.__pwned`` and any ``alert`` into the page's ``localStorage``, so a payload
that runs on a page the browser leaves at once is still caught.
"""
import csv
import io
import json
from html.parser import HTMLParser
from urllib.parse import urlencode

import pytest
import requests
from django.contrib.auth.models import User
from selenium.webdriver.common.by import By

from crowd import engine
from crowd.kinds.description import system_name
from crowd.models import Campaign, Caption, Image, MTurkHIT
from crowd.mturk import publish as pub
from crowd.mturk import website
from crowd.simulate import simulate

from .conftest import run_command, stale
from .hostile import XSS, hostile_dataset, upload_metric
from .test_mturk_browser import fake, open_hit, published, submitted_to_mturk, turk, wait  # noqa: F401 (fixtures)

pytestmark = pytest.mark.django_db(transaction=True)
INSTRUCTIONS = "Read this: " + " / ".join(XSS)
SETTINGS = "resamples=100&permutations=100"
WATCH = """
(function () {
  function note(what) {
    try {
      var log = JSON.parse(localStorage.getItem("__xss") || "[]");
      log.push(what + " @ " + location.href);
      localStorage.setItem("__xss", JSON.stringify(log));
    } catch (e) {}
  }
  Object.defineProperty(window, "__pwned", {configurable: true, get: function () { return window.__xssValue; },
                                            set: function (v) { note("__pwned=" + v); window.__xssValue = v; }});
  window.alert = function (m) { note("alert " + m); };
})();
"""


@pytest.fixture
def watched(browser, tmp_path):
    """The browser with the watch script; checked on a page that does run a payload."""
    browser.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": WATCH})
    probe = tmp_path / "probe.html"
    probe.write_text("<!DOCTYPE html><script>window.__pwned = 1; alert(2);</script>", encoding="utf-8")
    browser.get(probe.as_uri())
    assert browser.execute_script("return window.__pwned") == 1
    log = browser.execute_script("const log = localStorage.getItem('__xss'); localStorage.clear(); return log;")
    assert "__pwned=1" in log and "alert 2" in log
    return browser


@pytest.fixture
def xss(tmp_path):
    ds = hostile_dataset(tmp_path, "xss", XSS, reference_prefix=XSS[0])
    Image.objects.filter(dataset=ds, key=XSS[4]).update(url="javascript:window.__pwned=5")
    return ds


def scored(ds, tmp_path):
    """BLEU-4, the set-level diversity metrics and two uploaded metrics with hostile names."""
    run_command("compute_metrics", "--dataset", ds.name, "--metric", "bleu_4", "self_cider", "lsa", "set_accuracy",
                "vocabulary", "--wait")
    return {upload_metric(ds, tmp_path, XSS[7], 1.0): XSS[7], upload_metric(ds, tmp_path, XSS[1], -1.0): XSS[1]}


# --- checks -------------------------------------------------------------------------------------------------
def clean(driver, *visible):
    """No payload ran in the current document (and none was logged in its origin), and every text of
    ``visible`` is on the page literally. Returns the page text."""
    assert driver.execute_script("return typeof window.__pwned") == "undefined", driver.current_url
    log = driver.execute_script("try { return localStorage.getItem('__xss'); } catch (e) { return null; }")
    assert not log, log
    text = driver.find_element(By.TAG_NAME, "body").text
    for v in visible:
        assert v in text, f"{v!r} is not shown on {driver.current_url}"
    return text


def fetch(driver, url):
    """(status, content type) of a GET from the page's own origin (cookies included)."""
    return driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "fetch(arguments[0], {credentials: 'same-origin'}).then(r => done([r.status, r.headers.get('content-type')]),"
        " e => done([0, String(e)]));", url)


def plots_ok(driver, origin):
    """Every <img> of the page served by us, and every PNG figure of its interactive charts
    (a.export-png), is a PNG that was drawn (HTTP 200, image/png)."""
    srcs = [img.get_attribute("src") for img in driver.find_elements(By.TAG_NAME, "img")]
    srcs += [a.get_attribute("href") for a in driver.find_elements(By.CSS_SELECTOR, "a.export-png")]
    ours = [s for s in srcs if s.startswith(origin)]
    for src in ours:
        assert fetch(driver, src) == [200, "image/png"], src
    return len(ours)


def login(driver, live_server, username):
    driver.get(live_server.url + "/accounts/login/")
    driver.find_element(By.NAME, "username").send_keys(username)
    driver.find_element(By.NAME, "password").send_keys("pw")
    form = driver.find_element(By.CSS_SELECTOR, "main form")
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait(driver).until(stale(form))


# --- plots -------------------------------------------------------------------------------------------------
def test_every_plot_draws_hostile_names_as_text():
    """Names that mathtext would parse (or fail to parse) are drawn as typed, and a bootstrap interval
    that does not contain its estimate gives clipped error bars rather than an exception."""
    from analysis import plots

    names = XSS[-3:]  # "{{ 7*7 }}", "$\\frac{a}{b}$ $unbalanced", "$\\notacommand{x}$ ..."
    pngs = [
        plots.scatter_png([0.1, 0.5, 0.9], [1, 3, 2], names[2], names[1], names[0]),
        plots.correlation_bars_png({n: {"name": n, "kendall_tau_b": 0.3, "ci95": {"kendall_tau_b": [0.35, 0.5]}}
                                    for n in names}, {"kendall_tau_b": 0.6}, title=names[2]),
        plots.diversity_accuracy_png([(n, 0.2 * i, 0.5) for i, n in enumerate(names)]),
        plots.f_score_bars_png(names, [0.1, 0.2, 0.3], 5.0),
        plots.vocabulary_png({n: (3, [9, 4, 1]) for n in names}),
        plots.radar_png([[0.1, 0.4, 0.2], [0.3, 0.1, 0.5]], names[1:], title=names[2]),
        plots.mds_png([[0, 1], [1, 0], [0.5, 0.5]], names, title=names[2]),
        plots.benchmark_bars_png([{"name": n, "value": 0.4, "ci95": [0.5, 0.6], "rank": 1} for n in names], names[1], None,
                                 title=names[2]),
        plots.p_value_heatmap_png(names, [[None, 0.01, 0.2], [0.9, None, 0.5], [0.3, 0.04, None]], 0.05, title=names[2]),
    ]
    assert all(p[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)
    import matplotlib

    # process-wide (rc_context per call is not thread-safe under a threaded server)
    assert matplotlib.rcParams["text.parse_math"] is False and matplotlib.rcParams["text.usetex"] is False


# --- dashboard ----------------------------------------------------------------------------------------------
def test_dashboard_pages_and_plots(watched, live_server, xss, tmp_path):
    driver, origin = watched, live_server.url
    metrics = scored(xss, tmp_path)
    driver.get(origin + "/")
    clean(driver, "xss")

    driver.get(origin + "/datasets/xss/")
    clean(driver, *XSS)  # the description holds every payload
    names = {r.get_attribute("data-metric"): r.find_element(By.CSS_SELECTOR, "td.name").text
             for r in driver.find_elements(By.CSS_SELECTOR, "#correlations tr[data-metric]")}
    assert {k: names[k] for k in metrics} == metrics
    assert plots_ok(driver, origin) >= 3  # a scatter plot per metric, labelled with its name

    driver.get(f"{origin}/datasets/xss/benchmark/?{SETTINGS}")
    clean(driver, *metrics.values())
    assert plots_ok(driver, origin) >= 5

    driver.get(f"{origin}/compare/?{SETTINGS}")
    clean(driver, *metrics.values())
    assert plots_ok(driver, origin) >= 1

    driver.get(origin + "/datasets/xss/diversity/")
    clean(driver, XSS[0], XSS[1], XSS[2])
    systems = [r.get_attribute("data-system") for r in driver.find_elements(By.CSS_SELECTOR, "#diversity tr[data-system]")]
    assert sorted(systems) == sorted([XSS[0], XSS[1], XSS[2]])  # attributes hold the exact names
    assert plots_ok(driver, origin) == 3
    links = {a.text: a.get_attribute("href") for a in driver.find_elements(By.CSS_SELECTOR, "#images a.image-link")}
    assert set(links) == set(XSS)  # every image key, shown as typed, each with a working link

    for key, href in links.items():
        driver.get(href)
        clean(driver)
        assert driver.find_element(By.TAG_NAME, "h1").text == f"Image {key}"
        image = Image.objects.get(dataset=xss, key=key)
        shown = sorted(li.text for li in driver.find_elements(By.CSS_SELECTOR, "ol.captions li"))
        assert shown == sorted(" ".join(t.split()) for t in Caption.objects.filter(image=image).values_list("text", flat=True))
        sets = {s.get_attribute("data-system") for s in driver.find_elements(By.CSS_SELECTOR, "section.caption-set")}
        assert sets <= {XSS[0], XSS[1], XSS[2]} and len(sets) >= 2
        assert plots_ok(driver, origin) >= 2  # radar charts (legend: captions) and the MDS map (legend: systems)
        assert not driver.find_elements(By.ID, "image-url")  # a javascript: URL is never a link


# --- owner and rater pages ------------------------------------------------------------------------------------
KIND_OPTIONS = {
    "rating": {"images": 2},
    "forced_choice": {"images": 3},
    "diversity": {"images": 2},
    "description": {"images": 2},
    "visual_atom": {"atoms": [[XSS[0], "entity"], [XSS[1], "action"], ["dog", "entity"]]},
}


def answer_and_submit(driver, text):
    """Answer whatever the task form asks (first option of each radio group, 0.5 for numbers, ``text``
    for free text) and submit it with the button."""
    form = driver.find_element(By.ID, "task-form")
    driver.execute_script("""
        const form = arguments[0], seen = {};
        form.querySelectorAll("input[type=radio]").forEach(r => { if (!seen[r.name]) { seen[r.name] = 1; r.checked = true; } });
        form.querySelectorAll("input[type=number]").forEach(n => { n.value = "0.5"; });
        form.querySelectorAll("textarea").forEach(t => { t.value = arguments[1]; });
    """, form, text)
    driver.find_element(By.ID, "submit").click()
    wait(driver).until(stale(form))


def test_owner_and_rater_pages_of_every_kind(watched, live_server, xss, tmp_path):
    driver, origin = watched, live_server.url
    metrics = scored(xss, tmp_path)
    alice = User.objects.create_user("alice", password="pw")
    worker = engine.invite_workers(1, label=XSS[2])[0]
    campaigns = {}
    for n, (kind, options) in enumerate(KIND_OPTIONS.items()):
        campaigns[kind] = engine.create_campaign(xss, kind, name=f"x-{kind.replace('_', '-')}", title=XSS[n],
                                                 instructions=INSTRUCTIONS, owners=[alice], options=options,
                                                 state=Campaign.LIVE, gold_every=0, k=1)
        engine.add_raters(campaigns[kind], [worker])  # one invitation per campaign: the same rater
    answer = f"{XSS[3]} {XSS[5]} a dog runs over the grass"

    # the rater: invitation link, preview, accept, answer, submit; each kind
    for kind, campaign in campaigns.items():
        driver.get(f"{origin}/rate/join/{worker.token}/?next=/rate/{campaign.name}/")
        wait(driver).until(lambda d: d.find_elements(By.ID, "preview-notice"))
        text = clean(driver, campaign.title, *XSS)  # title in the header, instructions open on the preview
        assert driver.title.startswith(f"Preview · {campaign.title}")
        item = engine.preview(campaign, worker)
        key = item.payload.get("image_key")
        if key and item.payload.get("image_url"):  # the javascript: URL: an <img> (inert), the key in its alt text
            assert driver.find_element(By.CSS_SELECTOR, ".image-box img").get_attribute("alt") == \
                f"the image to describe or judge ({key})"
        elif key:
            assert f"Image {key}" in text
        if kind == "rating":
            assert driver.find_element(By.ID, "caption").text == " ".join(item.payload["text"].split())
        if kind == "forced_choice":
            assert driver.find_element(By.ID, "sentence-a").text == " ".join(item.payload["a"][1].split())
        if kind == "visual_atom":
            assert driver.find_element(By.ID, "word").text == item.payload["word"]
        driver.find_element(By.ID, "accept").click()
        wait(driver).until(lambda d: d.find_elements(By.ID, "task-form"))
        clean(driver, campaign.title)
        answer_and_submit(driver, answer)
        wait(driver).until(lambda d: "your answer was saved" in d.find_element(By.TAG_NAME, "body").text)
        clean(driver, "Thank you, your answer was saved.")
    description = Caption.objects.get(system__name=system_name(campaigns["description"]))
    assert description.text == answer  # stored as typed

    # the owner: campaign list, each campaign's page (title, worker label, charts), the upload page
    alice.is_staff = True
    alice.save()
    login(driver, live_server, "alice")
    driver.get(origin + "/campaigns/")
    clean(driver, *(c.name for c in campaigns.values()))
    for campaign in campaigns.values():
        driver.get(f"{origin}/campaigns/{campaign.name}/")
        clean(driver, campaign.title, f"{XSS[2]}1")
        plots_ok(driver, origin)
    rating = campaigns["rating"]
    simulate(rating, raters=3, seed=1)  # judgments of every item: metric correlations and their chart
    driver.get(f"{origin}/campaigns/{rating.name}/")
    clean(driver, rating.title, *metrics.values())
    assert plots_ok(driver, origin) >= 2  # relevance and thoroughness, bars named by metric
    driver.get(f"{origin}/datasets/xss/upload-scores/")
    clean(driver, *metrics.values())
    # descriptions reach the public pages once the owner publishes the results (crowd.privacy)
    driver.get(f"{origin}/campaigns/{campaigns['description'].name}/")
    driver.find_element(By.ID, "publish-results").click()  # the page asks first (crowd.views.owner)
    wait(driver).until(lambda d: d.find_element(By.ID, "confirm-dialog").get_attribute("open") is not None)
    driver.find_element(By.ID, "confirm-ok").click()
    wait(driver).until(lambda d: d.find_elements(By.ID, "results-published"))
    description_image = Image.objects.get(pk=description.image_id)
    driver.get(origin + "/datasets/xss/diversity/")
    driver.find_element(By.LINK_TEXT, description_image.key).click()
    wait(driver).until(lambda d: d.find_elements(By.CSS_SELECTOR, "ol.captions"))
    clean(driver, answer, system_name(campaigns["description"]))


# --- Mechanical Turk ------------------------------------------------------------------------------------------
HOLD_SUBMIT = "HTMLFormElement.prototype.submit = function () { window.__held = true; };"


class Inputs(HTMLParser):
    """The name -> value of every <input> and the number of <script> elements of an HTML page."""

    def __init__(self):
        super().__init__()
        self.values, self.scripts = {}, 0

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "input" and "name" in attrs:
            self.values[attrs["name"]] = attrs.get("value")
        self.scripts += tag == "script"


def test_mturk_frame_forward_html_question_and_layout(watched, live_server, fake, turk, xss, tmp_path):  # noqa: F811
    driver = watched
    campaign = published(xss, fake, "description", name="mt-xss", k=1, options={"images": 3})
    Campaign.objects.filter(pk=campaign.pk).update(title=XSS[3], instructions=INSTRUCTIONS)
    campaign.refresh_from_db()
    hits = MTurkHIT.objects.filter(batch__campaign=campaign).select_related("item").order_by("pk")
    # the dataset's image source (tests/conftest.py) gives every item a picture, the hostile keys
    # percent-encoded into its URL; the key is shown as the picture's alt text
    hit = hits[0]
    key = hit.item.payload["image_key"]
    assert hit.item.payload["image_url"].startswith("http://127.0.0.1:9/test-images/")

    def shown_key():
        alt = driver.find_element(By.CSS_SELECTOR, ".image-box img").get_attribute("alt")
        assert alt == f"the image to describe or judge ({key})", alt

    # preview inside MTurk's (fake) frame: a page of another site frames ours
    open_hit(driver, turk, hit.hit_id)
    clean(driver, *XSS)  # instructions are open on the preview
    shown_key()
    assert driver.execute_script("return document.title") == XSS[3]
    driver.switch_to.default_content()
    clean(driver)

    # accepted: type an answer full of payloads; the forward page is held (its auto-submit deferred)
    # so it can be inspected, then sent with its button
    worker = "AWORKERXSS01"
    aid = fake.accept(hit.hit_id, worker)
    hold = driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": HOLD_SUBMIT})
    open_hit(driver, turk, hit.hit_id, aid, worker)
    clean(driver)
    shown_key()
    answer = f"{XSS[1]} {XSS[6]} {XSS[4]} a dog runs over the grass"
    driver.find_element(By.ID, "description").send_keys(answer)
    form = driver.find_element(By.ID, "task-form")
    driver.find_element(By.ID, "submit").click()
    wait(driver).until(stale(form))
    wait(driver).until(lambda d: d.find_elements(By.ID, "mturk-form"))
    clean(driver, "Your answer was saved.")
    assert driver.execute_script("return window.__held") is True
    posted = {e.get_attribute("name"): e.get_attribute("value")
              for e in driver.find_elements(By.CSS_SELECTOR, "#mturk-form input[type=hidden]")}
    assert posted["description"] == answer and posted["assignmentId"] == aid
    driver.execute_cdp_cmd("Page.removeScriptToEvaluateOnNewDocument", hold)
    driver.find_element(By.ID, "send").click()
    fields = submitted_to_mturk(driver, turk, aid, 0)
    assert fields["description"] == answer  # what MTurk received is what the worker typed
    # reopened, the page sends the stored answer again: the forward page as served, parsed
    query = urlencode({"assignmentId": aid, "hitId": hit.hit_id, "workerId": worker, "turkSubmitTo": turk.origin})
    page = requests.get(f"{live_server.url}/mturk/{campaign.name}/item/{hit.item_id}/?{query}", timeout=10)
    parsed = Inputs()
    parsed.feed(page.text)
    assert parsed.values["ce_answer"] == json.dumps({"text": answer}, sort_keys=True) and parsed.scripts == 1

    # the HTMLQuestion document (hosted by MTurk): turkSubmitTo from the URL must be an MTurk origin
    document = tmp_path / "question.html"
    document.write_text(pub.html_document(campaign, hit.item, hit.order, "sandbox"), encoding="utf-8")
    default = "https://workersandbox.mturk.com/mturk/externalSubmit"
    for submit_to, action in [("javascript:window.__pwned=7//", default), ("https://evil.example", default),
                              ("https://workersandbox.mturk.com/", default), (turk.origin, turk.origin + "/mturk/externalSubmit")]:
        driver.switch_to.default_content()
        driver.get(f"file://{document}?" + urlencode({"assignmentId": "A1", "turkSubmitTo": submit_to}))
        clean(driver)
        shown_key()
        assert driver.execute_script("return document.getElementById('task-form').action") == action

    # the requester-website layout filled in the way MTurk does it (each ${column} replaced as it is)
    web = engine.create_campaign(xss, "description", name="mt-web", title=XSS[5], instructions=INSTRUCTIONS,
                                 provider=Campaign.MTURK)  # one item per image: every hostile key
    batch = website.export_batch(web)
    layout = website.layout_html(web)
    for n, row in enumerate(csv.DictReader(io.StringIO(website.input_csv(batch), newline=""))):
        filled = layout
        for column, value in row.items():
            filled = filled.replace("${" + column + "}", value)
        page = tmp_path / f"layout-{n}.html"
        page.write_text(f"<!DOCTYPE html><html><head><meta charset='utf-8'></head><body><form>{filled}</form></body></html>",
                        encoding="utf-8")
        driver.get(f"file://{page}")
        item = web.items.get(key=row["item_key"])
        clean(driver, *XSS)
        alt = driver.find_element(By.CSS_SELECTOR, ".image-box img").get_attribute("alt")
        assert alt == f"the image to describe or judge ({item.payload['image_key']})"
        assert driver.find_element(By.ID, "description").tag_name == "textarea"  # the task's form is there
    assert n + 1 == len(XSS)
