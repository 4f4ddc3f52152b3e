//! The dashboard in a real browser: headless Chromium, driven over
//! WebDriver by chromedriver (Debian's `chromium` and `chromium-driver`
//! packages), against the router mounted under `/admin/queues` in an axum
//! app over a private server with a live consumer. Screenshots go to
//! `target/dashboard-screenshots/`.
//!
//! `ECHOMQ_CHROMIUM` and `ECHOMQ_CHROMEDRIVER` name other binaries; when
//! either is missing the test fails, saying which (it never passes
//! without a browser).

use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use echomq::server::LocalServer;
use echomq::{Client, Consumer, EnqueueOptions, HandlerError, Job, JobState};
use echomq_dashboard::{DashboardOptions, Source};
use fantoccini::{ClientBuilder, Locator};
use serde_json::{Value, json};

/// The longest any one page condition may take.
const WAIT: Duration = Duration::from_secs(20);

/// A binary the test needs, or a failure that says how to get it.
fn tool(env: &str, default: &str, package: &str) -> PathBuf {
    let path = std::env::var_os(env).map_or_else(|| PathBuf::from(default), PathBuf::from);
    assert!(
        path.is_file(),
        "{} is missing: the browser test needs Debian's `{package}` package \
         (apt-get install -y chromium chromium-driver; scripts/test installs it) or {env} set",
        path.display()
    );
    path
}

/// chromedriver, stopped with the test.
struct Driver(Child);

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Where screenshots go: `target/dashboard-screenshots/` of the build
/// this test binary belongs to (`target/debug/deps/browser-…`).
fn shots_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let target = exe.ancestors().nth(3).unwrap().to_path_buf();
    let dir = target.join("dashboard-screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

async fn shot(c: &fantoccini::Client, name: &str) {
    let png = c.screenshot().await.unwrap();
    std::fs::write(shots_dir().join(name), png).unwrap();
}

/// Runs `script` in the page until it returns true (a page reload in
/// between is "not yet"); panics with `what` after [`WAIT`].
async fn until(c: &fantoccini::Client, what: &str, script: &str) {
    let start = Instant::now();
    loop {
        if let Ok(Value::Bool(true)) = c.execute(script, vec![]).await {
            return;
        }
        if start.elapsed() > WAIT {
            let page = c.source().await.unwrap_or_default();
            panic!("timed out waiting for {what}; the page:\n{page}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Work {
    flaky: bool,
}

/// Fails a flaky job's first attempt (its only one, so it stays failed).
async fn handle(job: Job<Work>) -> Result<(), HandlerError> {
    if job.payload().flaky && job.attempt() == 1 {
        return Err(HandlerError::retry("flaky <b>first</b> attempt & fails"));
    }
    Ok(())
}

// A browser sees the counts and the throughput (counted from the events)
// change live as jobs flow, the queue's feed of events, opens the failed
// job (its id and error shown as text, not markup), retries it with a
// click and watches it complete; then the history charts over each span,
// a search by error text, and an old path redirected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_move_and_a_failed_job_is_retried_from_the_browser() {
    let chromium = tool("ECHOMQ_CHROMIUM", "/usr/bin/chromium", "chromium");
    let chromedriver = tool("ECHOMQ_CHROMEDRIVER", "/usr/bin/chromedriver", "chromium-driver");

    let server = LocalServer::start().unwrap();
    let client = Client::connect(&server.url()).await.unwrap();
    let queue = client.queue("browser").await.unwrap();
    let consumer = Consumer::new(queue.clone(), handle).spawn().unwrap();

    let dashboard = echomq_dashboard::router(
        Source::from(client.clone()),
        DashboardOptions::new().sample_every(Duration::from_millis(200)),
    );
    let app = axum::Router::new().nest("/admin/queues", dashboard);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let _driver = Driver(
        Command::new(&chromedriver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let start = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(start.elapsed() < WAIT, "chromedriver did not listen on port {port}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let profile = std::env::temp_dir().join(format!("echomq-chromium-{}", std::process::id()));
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        json!({
            "binary": chromium,
            "args": [
                "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--window-size=1280,900", format!("--user-data-dir={}", profile.display()),
            ],
        }),
    );
    let c = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(caps)
        .connect(&format!("http://127.0.0.1:{port}"))
        .await
        .expect("a chromium session through chromedriver");

    // Mounted without the trailing slash, as `Router::nest` routes it.
    c.goto(&format!("http://{addr}/admin/queues")).await.unwrap();
    until(
        &c,
        "the live stream",
        "return document.getElementById('live').textContent === 'live'",
    )
    .await;
    let cell = |state: &str| {
        format!("document.querySelector('tr[data-queue=\"browser\"] [data-count=\"{state}\"]').textContent")
    };
    assert_eq!(
        c.execute(&format!("return {};", cell("completed")), vec![])
            .await
            .unwrap(),
        json!("0")
    );

    let flaky_id = "flaky <b>&1</b>/../x?y#z";
    for _ in 0..5 {
        queue.enqueue(&Work { flaky: false }).await.unwrap();
    }
    let opts = EnqueueOptions::new().id(flaky_id).max_attempts(1);
    queue.enqueue_with(&Work { flaky: true }, &opts).await.unwrap();
    let flowed = format!("return {} === '5' && {} === '1';", cell("completed"), cell("failed"));
    until(&c, "5 completed and 1 failed on the queue list", &flowed).await;
    let charted = "const row = document.querySelector('tr[data-queue=\"browser\"]'); \
                   const svg = row.querySelector('svg.spark'); \
                   return svg.querySelector('polyline.completed').getAttribute('points').split(' ').length >= 3 \
                   && svg.getAttribute('data-completed') === '5' && svg.getAttribute('data-failed') === '1' \
                   && !isNaN(parseFloat(row.querySelector('[data-rate]').textContent));";
    until(&c, "the throughput chart drawn from the events", charted).await;
    shot(&c, "1-queues.png").await;

    c.find(Locator::Css("tr[data-queue=\"browser\"] a"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    c.wait()
        .for_element(Locator::Css("nav.tabs a[data-state=\"failed\"]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    until(
        &c,
        "the failed tab",
        "return document.querySelector('#jobs').dataset.state === 'failed';",
    )
    .await;
    until(
        &c,
        "a completed event in the feed, linking to its job",
        "const td = document.querySelector('#feed td.event[data-kind=\"completed\"]'); \
         return !!td && !!td.parentElement.querySelector('a[href*=\"/jobs/\"]');",
    )
    .await;
    shot(&c, "2-queue-feed.png").await;
    c.find(Locator::Css("#jobs tbody a"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    until(
        &c,
        "the failed job's page",
        "return document.getElementById('job-state')?.textContent === 'failed';",
    )
    .await;
    let h1 = c.find(Locator::Css("h1")).await.unwrap().text().await.unwrap();
    assert_eq!(h1, format!("Job {flaky_id}"), "the id shows as text");
    let errors = c.find(Locator::Css("ol.errors")).await.unwrap().text().await.unwrap();
    assert!(errors.contains("flaky <b>first</b> attempt & fails"), "{errors}");
    shot(&c, "3-failed-job.png").await;

    c.find(Locator::Css("button[data-action=\"retry\"]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    until(
        &c,
        "the retried job completed",
        "return document.getElementById('job-state')?.textContent === 'completed';",
    )
    .await;
    shot(&c, "4-retried-job.png").await;
    let job = queue.job(flaky_id).await.unwrap();
    assert_eq!((job.state, job.attempts), (JobState::Completed, 2));

    // Two more fail for good; "retry all failed" on the failed tab retries both.
    for i in 0..2 {
        let opts = EnqueueOptions::new().id(format!("bulk-{i}")).max_attempts(1);
        queue.enqueue_with(&Work { flaky: true }, &opts).await.unwrap();
    }
    let start = Instant::now();
    while queue.counts().await.unwrap().failed < 2 {
        assert!(start.elapsed() < WAIT, "the two jobs did not fail");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    c.goto(&format!("http://{addr}/admin/queues/browser?state=failed"))
        .await
        .unwrap();
    c.wait()
        .for_element(Locator::Css("button[data-action=\"retry-all\"]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    until(
        &c,
        "the bulk retry's notice",
        "return document.querySelector('.notice')?.textContent === '2 jobs moved back to pending.';",
    )
    .await;
    shot(&c, "5-bulk-retry.png").await;
    for i in 0..2 {
        let id = format!("bulk-{i}");
        let start = Instant::now();
        while queue.job(&id).await.unwrap().state != JobState::Completed {
            assert!(start.elapsed() < WAIT, "{id} did not complete after the bulk retry");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    // The schedules page: pause one from the browser.
    let nightly = echomq::schedule::Schedule::new("nightly", "0 0 3 * * *");
    queue.upsert_schedule(&nightly, &Work { flaky: false }).await.unwrap();
    c.goto(&format!("http://{addr}/admin/queues/browser/schedules"))
        .await
        .unwrap();
    c.wait()
        .for_element(Locator::Css(
            "tr[data-schedule=\"nightly\"] button[data-action=\"pause\"]",
        ))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    until(
        &c,
        "the schedule paused",
        "return document.querySelector('tr[data-schedule=\"nightly\"]')?.dataset.state === 'paused';",
    )
    .await;
    shot(&c, "6-schedules.png").await;
    assert!(queue.schedule("nightly").await.unwrap().unwrap().paused_ms.is_some());

    // The history charts: the consumer's counts are written as it stops
    // (else at its next announcement). 8 completed (5, the flaky one on
    // its retry, the two bulk ones), 3 failed for good before their retries.
    consumer.shutdown().await.unwrap();
    c.goto(&format!("http://{addr}/admin/queues/browser?state=completed"))
        .await
        .unwrap();
    let chart = |id: &str, text: &str| {
        format!(
            "const svg = document.querySelector('#history [data-chart=\"{id}\"] svg'); \
             return !!svg && svg.getAttribute('aria-label').includes('{text}') \
             && svg.querySelectorAll('text.axis.x').length === 5 && svg.querySelectorAll('text.axis.y').length >= 2;"
        )
    };
    until(
        &c,
        "the completed chart with its axes",
        &chart("completed", ": 8 completed"),
    )
    .await;
    until(&c, "the failed chart", &chart("failed", ": 3 failed, 0 retried")).await;
    until(&c, "the wait chart", &chart("wait", "jobs started")).await;
    shot(&c, "7-history-1h.png").await;
    c.find(Locator::Css("nav.spans a[data-span=\"24h\"]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    until(
        &c,
        "the 24 h charts",
        "const svg = document.querySelector('#history [data-chart=\"completed\"] svg'); \
         return !!svg && svg.dataset.buckets === '96' && svg.getAttribute('aria-label').includes('per 15 minutes: 8 completed') \
         && document.querySelector('nav.spans a[aria-current]').dataset.span === '24h';",
    )
    .await;
    shot(&c, "8-history-24h.png").await;
    c.find(Locator::Css("nav.spans a[data-span=\"7d\"]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    until(
        &c,
        "the 7 d charts",
        "const svg = document.querySelector('#history [data-chart=\"completed\"] svg'); \
         return !!svg && svg.dataset.buckets === '168' && svg.getAttribute('aria-label').includes('per hour: 8 completed');",
    )
    .await;
    shot(&c, "9-history-7d.png").await;

    // Search the completed jobs by error text: the three that failed once.
    c.goto(&format!("http://{addr}/admin/queues/browser?state=completed"))
        .await
        .unwrap();
    c.wait()
        .for_element(Locator::Css("form.search input[name=\"error\"]"))
        .await
        .unwrap()
        .send_keys("FLAKY <b>")
        .await
        .unwrap();
    c.find(Locator::Css("button[data-action=\"search\"]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    until(
        &c,
        "the search's matches",
        "const p = document.getElementById('searched'); \
         return !!p && p.dataset.found === '3' && document.querySelectorAll('#found tbody tr[data-job]').length === 3;",
    )
    .await;
    let typed = c
        .find(Locator::Css("form.search input[name=\"error\"]"))
        .await
        .unwrap()
        .prop("value")
        .await
        .unwrap();
    assert_eq!(typed.as_deref(), Some("FLAKY <b>"), "the form keeps the search");
    shot(&c, "10-search.png").await;

    // An old path lands on the page at its new place.
    c.goto(&format!("http://{addr}/admin/queues/queues/browser/workers"))
        .await
        .unwrap();
    until(
        &c,
        "the workers page through the old path",
        "return location.pathname === '/admin/queues/browser/workers' \
         && document.querySelector('h1').textContent === 'browser: workers';",
    )
    .await;
    shot(&c, "11-old-path-redirected.png").await;

    c.close().await.unwrap();
    let _ = std::fs::remove_dir_all(profile);
}
