//! The dashboard over HTTP without a browser (tower's `oneshot` on the
//! router, mounted as a user mounts it): the CSRF checks, escaping of user
//! data, paging, and what an unknown queue or state answers.

use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode};
use echomq::server::LocalServer;
use echomq::{Client, EnqueueOptions, EventSettings, JobState, QueueOptions, Retention};
use echomq_dashboard::{DashboardOptions, Source};
use tower::ServiceExt;

const SECRET: &str = "0123456789abcdef0123456789abcdef-test";

async fn call(app: &Router, req: Request<Body>) -> (StatusCode, HeaderMap, String) {
    let resp = app.clone().oneshot(req).await.unwrap();
    let (parts, body) = resp.into_parts();
    let bytes = axum::body::to_bytes(body, 1 << 20).await.unwrap();
    (parts.status, parts.headers, String::from_utf8(bytes.to_vec()).unwrap())
}

async fn get(app: &Router, uri: &str) -> (StatusCode, String) {
    let (s, _, b) = call(app, Request::get(uri).body(Body::empty()).unwrap()).await;
    (s, b)
}

fn post(uri: &str, headers: &[(&str, &str)], body: &str) -> Request<Body> {
    let mut req = Request::post(uri)
        .header("host", "app.test")
        .header("content-type", "application/x-www-form-urlencoded");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    req.body(Body::from(body.to_owned())).unwrap()
}

fn mounted(client: &Client, page_size: usize) -> Router {
    let opts = DashboardOptions::new()
        .page_size(page_size)
        .csrf_secret(SECRET)
        .unwrap();
    Router::new().nest(
        "/admin/queues",
        echomq_dashboard::router(Source::from(client.clone()), opts),
    )
}

// A POST without the token, with a wrong one, or from another site is
// refused with 403 and changes nothing; the page's own form pauses the
// queue and redirects to a relative URL.
#[tokio::test]
async fn actions_need_the_token_and_the_same_origin() {
    let server = LocalServer::start().unwrap();
    let client = Client::connect(&server.url()).await.unwrap();
    let queue = client.queue("csrf").await.unwrap();
    let app = mounted(&client, 10);
    let uri = "/admin/queues/csrf/pause";
    let good = format!("csrf={SECRET}");
    let refused = [
        post(uri, &[], ""),
        post(uri, &[], "csrf=nope"),
        post(uri, &[], &format!("csrf={SECRET}x")),
        post(uri, &[("sec-fetch-site", "cross-site")], &good),
        post(uri, &[("origin", "https://evil.test")], &good),
    ];
    for req in refused {
        let (status, _, _) = call(&app, req).await;
        assert_eq!(status, StatusCode::FORBIDDEN);
    }
    assert!(!queue.is_paused().await.unwrap());

    let ok = post(
        uri,
        &[("sec-fetch-site", "same-origin"), ("origin", "http://app.test")],
        &good,
    );
    let (status, headers, _) = call(&app, ok).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(headers["location"], "../csrf?done=paused");
    assert!(queue.is_paused().await.unwrap());
    // The form on the page carries the token.
    let (_, page) = get(&app, "/admin/queues/csrf").await;
    assert!(page.contains(&format!("name=\"csrf\" value=\"{SECRET}\"")));
    assert!(page.contains("action=\"./csrf/resume\""));
}

// Job ids, payloads and errors with markup come out escaped on every page,
// ids in links percent-encoded; nothing of them runs as HTML.
#[tokio::test]
async fn user_data_is_escaped() {
    let server = LocalServer::start().unwrap();
    let client = Client::connect(&server.url()).await.unwrap();
    let queue = client.queue("esc").await.unwrap();
    let id = "<img src=x onerror=alert(1)>";
    let payload = serde_json::json!({"note": "</pre><script>alert(2)</script>"});
    queue
        .enqueue_with(&payload, &EnqueueOptions::new().id(id).max_attempts(1))
        .await
        .unwrap();
    let lease = queue.claim(1, Duration::from_secs(30)).await.unwrap().remove(0);
    queue.fail(&lease, "<svg onload=alert(3)>").await.unwrap();
    let app = mounted(&client, 10);

    let (status, list) = get(&app, "/admin/queues/esc?state=failed").await;
    assert_eq!(status, StatusCode::OK);
    let (status, page) = get(
        &app,
        "/admin/queues/esc/jobs/%3Cimg%20src%3Dx%20onerror%3Dalert%281%29%3E",
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{page}");
    for html in [&list, &page] {
        assert!(!html.contains("<img"), "{html}");
        assert!(!html.contains("<svg onload"), "{html}");
        assert!(html.contains("&lt;img src=x onerror=alert(1)&gt;"));
        assert!(html.contains("&lt;svg onload=alert(3)&gt;"));
    }
    assert!(list.contains("href=\"./esc/jobs/%3Cimg%20src%3Dx%20onerror%3Dalert%281%29%3E\""));
    assert!(!page.contains("<script>alert"));
    assert!(page.contains("&lt;/pre&gt;&lt;script&gt;alert(2)&lt;/script&gt;"));
}

// A state's jobs come a page at a time, each page linking to the next,
// until all are shown once.
#[tokio::test]
async fn listings_are_paged() {
    let server = LocalServer::start().unwrap();
    let client = Client::connect(&server.url()).await.unwrap();
    let queue = client.queue("paged").await.unwrap();
    for i in 0..5 {
        queue
            .enqueue_with(&i, &EnqueueOptions::new().id(format!("job-{i}")))
            .await
            .unwrap();
    }
    let app = mounted(&client, 2);
    let ids = |page: &str| -> Vec<String> {
        page.match_indices("<tr data-job=\"")
            .map(|(at, m)| {
                let rest = &page[at + m.len()..];
                rest[..rest.find('"').unwrap()].to_owned()
            })
            .collect()
    };
    // the link with `rel` on the page, as a URI to get
    let follow = |page: &str, rel: &str| -> Option<String> {
        let at = page.find(&format!("rel=\"{rel}\""))?;
        let href_at = page[..at].rfind("href=\"").unwrap() + 6;
        let href = &page[href_at..page[href_at..].find('"').unwrap() + href_at];
        // `./paged?...` seen from /admin/queues/paged.
        Some(format!(
            "/admin/queues/{}",
            href.trim_start_matches("./").replace("&amp;", "&")
        ))
    };
    let mut uri = "/admin/queues/paged?state=pending".to_owned();
    let mut seen = Vec::new();
    let mut pages = Vec::new();
    loop {
        let (status, page) = get(&app, &uri).await;
        assert_eq!(status, StatusCode::OK);
        seen.extend(ids(&page));
        pages.push(ids(&page));
        let Some(next) = follow(&page, "next") else { break };
        uri = next;
    }
    assert_eq!(seen, ["job-0", "job-1", "job-2", "job-3", "job-4"]);
    // and back: "previous page" walks the same pages in reverse
    let mut back = vec![ids(&get(&app, &uri).await.1)];
    while let Some(prev) = follow(&get(&app, &uri).await.1, "prev") {
        uri = prev;
        back.push(ids(&get(&app, &uri).await.1));
    }
    back.reverse();
    assert_eq!(back, pages);
    assert_eq!(queue.counts().await.unwrap().pending, 5);
    assert_eq!(queue.job("job-0").await.unwrap().state, JobState::Pending);
}

// An unknown queue is a 404 and is not created by asking; an unknown state
// or a bad cursor is a 400; the root answers with and without the mount
// (and its slash form through the documented redirect).
#[tokio::test]
async fn unknown_things_are_refused() {
    let server = LocalServer::start().unwrap();
    let client = Client::connect(&server.url()).await.unwrap();
    client.queue("known").await.unwrap();
    let app = mounted(&client, 10);
    assert_eq!(get(&app, "/admin/queues/nope").await.0, StatusCode::NOT_FOUND);
    assert!(!client.queue_exists("emq", "nope").await.unwrap());
    assert_eq!(get(&app, "/admin/queues/known/jobs/x").await.0, StatusCode::NOT_FOUND);
    assert_eq!(
        get(&app, "/admin/queues/known?state=bogus").await.0,
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        get(&app, "/admin/queues/known?after=zz").await.0,
        StatusCode::BAD_REQUEST
    );
    // `nest` leaves the slash form unrouted (the dashboard's own router
    // never sees it); the redirect its docs show sits beside it.
    assert_eq!(get(&app, "/admin/queues/").await.0, StatusCode::NOT_FOUND);
    let app = app.route(
        "/admin/queues/",
        axum::routing::get(|| async { axum::response::Redirect::permanent("../queues") }),
    );
    let slash = Request::get("/admin/queues/").body(Body::empty()).unwrap();
    let (status, headers, _) = call(&app, slash).await;
    assert_eq!(
        (status, &headers["location"]),
        (StatusCode::PERMANENT_REDIRECT, &"../queues".parse().unwrap())
    );
    let (status, root) = get(&app, "/admin/queues").await;
    assert_eq!(status, StatusCode::OK);
    assert!(root.contains("href=\"./queues/known\""), "{root}");
    let bare = echomq_dashboard::router(vec![client.queue("known").await.unwrap()], DashboardOptions::new());
    let (status, root) = get(&bare, "/").await;
    assert_eq!(status, StatusCode::OK);
    assert!(root.contains("href=\"./known\""), "{root}");
}

/// The dashboard mounted over `client`, sampling every 100 ms (the chart's
/// window is then 6 s).
fn fast(client: &Client) -> Router {
    let opts = DashboardOptions::new()
        .sample_every(Duration::from_millis(100))
        .csrf_secret(SECRET)
        .unwrap();
    Router::new().nest(
        "/admin/queues",
        echomq_dashboard::router(Source::from(client.clone()), opts),
    )
}

/// GETs `uri` until its page satisfies `done`, for up to 10 s.
async fn page_until(app: &Router, uri: &str, what: &str, done: impl Fn(&str) -> bool) -> String {
    let start = std::time::Instant::now();
    loop {
        let (status, page) = get(app, uri).await;
        assert_eq!(status, StatusCode::OK, "{page}");
        if done(&page) {
            return page;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "timed out waiting for {what}:\n{page}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The first `counts` event of the live stream at `uri`, as JSON.
async fn first_sample(app: &Router, uri: &str) -> serde_json::Value {
    use futures_util::StreamExt;
    let resp = app
        .clone()
        .oneshot(Request::get(uri).body(Body::empty()).unwrap())
        .await
        .unwrap();
    let mut body = resp.into_body().into_data_stream();
    let mut text = String::new();
    while let Some(chunk) = body.next().await {
        text.push_str(std::str::from_utf8(&chunk.unwrap()).unwrap());
        if let Some(at) = text.find("event: counts\ndata: ") {
            let rest = &text[at + 20..];
            if let Some(end) = rest.find('\n') {
                return serde_json::from_str(&rest[..end]).unwrap();
            }
        }
    }
    panic!("the stream ended without a sample: {text}");
}

// With retention holding the completed count flat (here `Retention::None`,
// the count stays 0; a full `keep_completed` is the same case) the
// throughput counted from the events still sees every completion.
#[tokio::test]
async fn throughput_counts_events_past_retention() {
    let server = LocalServer::start().unwrap();
    let client = Client::connect(&server.url()).await.unwrap();
    let queue = client
        .queue_with("kept", QueueOptions::new().keep_completed(Retention::None))
        .await
        .unwrap();
    let app = fast(&client);
    // Two completions before the dashboard first looks (its feed reads the
    // chart's window back from the stream), four after.
    for round in [2, 4] {
        for i in 0..round {
            queue.enqueue(&i).await.unwrap();
        }
        for lease in queue.claim(round, Duration::from_secs(30)).await.unwrap() {
            queue.complete(&lease).await.unwrap();
        }
        if round == 2 {
            get(&app, "/admin/queues").await;
        }
    }
    assert_eq!(queue.counts().await.unwrap().completed, 0, "no record kept");
    let page = page_until(&app, "/admin/queues", "6 completions in the chart", |p| {
        p.contains("data-completed=\"6\"")
    })
    .await;
    assert!(page.contains("data-estimated hidden"), "{page}");
    let live = first_sample(&app, "/admin/queues/events").await;
    let t = &live["queues"][0]["throughput"];
    assert_eq!(
        t["series"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .sum::<u64>(),
        6,
        "{live}"
    );
    assert!(t.get("estimated").is_none(), "{live}");
}

// A queue whose events are off falls back to the counts, and the page and
// the live stream say the rate is an estimate.
#[tokio::test]
async fn throughput_without_events_is_labelled_an_estimate() {
    let server = LocalServer::start().unwrap();
    let client = Client::connect(&server.url()).await.unwrap();
    let queue = client.queue("quiet").await.unwrap();
    queue
        .set_events(&EventSettings::default().enabled(false))
        .await
        .unwrap();
    let app = fast(&client);
    let (_, page) = get(&app, "/admin/queues").await;
    assert!(
        page.contains("<span class=\"note\" data-estimated>events off: estimated from counts</span>"),
        "{page}"
    );
    let live = first_sample(&app, "/admin/queues/events").await;
    assert_eq!(live["queues"][0]["throughput"]["estimated"], true, "{live}");
    let (_, page) = get(&app, "/admin/queues/quiet").await;
    assert!(page.contains("Events are off for this queue"), "{page}");
}

// The queue page lists the latest events (time, event, job link, attempt,
// error, escaped), the live stream carries them, and a job's timeline is
// built from its events.
#[tokio::test]
async fn the_feed_shows_the_latest_events() {
    let server = LocalServer::start().unwrap();
    let client = Client::connect(&server.url()).await.unwrap();
    let queue = client.queue("feed").await.unwrap();
    let app = fast(&client);
    let opts = |id: &str| EnqueueOptions::new().id(id).max_attempts(1);
    // Enqueued while events were off: no feed can see that event (the feed
    // reads back the chart's window, so events on would show it).
    queue
        .set_events(&EventSettings::default().enabled(false))
        .await
        .unwrap();
    queue.enqueue_with(&0, &opts("early")).await.unwrap();
    queue.set_events(&EventSettings::default()).await.unwrap();
    get(&app, "/admin/queues/feed").await;
    queue.enqueue_with(&1, &opts("ok/1")).await.unwrap();
    queue.enqueue_with(&2, &opts("bad")).await.unwrap();
    for lease in queue.claim(3, Duration::from_secs(30)).await.unwrap() {
        if lease.id() != "bad" {
            queue.complete(&lease).await.unwrap();
        } else {
            queue.fail(&lease, "<i>boom</i>").await.unwrap();
        }
    }
    let page = page_until(&app, "/admin/queues/feed", "both outcomes in the feed", |p| {
        p.contains("data-kind=\"completed\"") && p.contains("data-kind=\"failed\"")
    })
    .await;
    assert!(page.contains("<a href=\"./feed/jobs/ok%2F1\">ok/1</a>"), "{page}");
    assert!(
        page.contains("<td class=\"err\">&lt;i&gt;boom&lt;/i&gt;</td>"),
        "{page}"
    );
    assert!(page.contains("<td class=\"num\">1</td>"), "the attempt: {page}");
    assert!(!page.contains("<i>boom"), "{page}");
    let live = first_sample(&app, "/admin/queues/events?queue=feed").await;
    let feed = live["queues"][0]["feed"].as_array().unwrap();
    assert_eq!(feed[0]["event"], "failed", "newest first: {live}");
    assert_eq!(feed[0]["error"], "<i>boom</i>");
    assert!(
        feed.iter().any(|e| e["event"] == "completed" && e["job"] == "ok/1"),
        "{live}"
    );
    let kinds = |job: &str| -> Vec<String> {
        job.match_indices("<span class=\"event\" data-kind=\"")
            .map(|(at, m)| {
                let rest = &job[at + m.len()..];
                rest[..rest.find('"').unwrap()].to_owned()
            })
            .collect()
    };
    let (_, job) = get(&app, "/admin/queues/feed/jobs/ok%2F1").await;
    assert!(job.contains("data-from=\"events\""), "{job}");
    assert_eq!(kinds(&job), ["enqueued", "claimed", "completed"], "{job}");
    // The record fills in what came before the feed.
    let (_, job) = get(&app, "/admin/queues/feed/jobs/early").await;
    assert_eq!(kinds(&job), ["claimed", "completed"], "{job}");
    assert!(job.contains("UTC</time> enqueued</li>"), "{job}");
}

// A burst of more events than one sample reads (5,000) is not read to the
// end: the feed skips ahead, and the page marks its figures as lower bounds.
#[tokio::test]
async fn a_burst_past_the_read_cap_is_skipped_and_marked() {
    let server = LocalServer::start().unwrap();
    let client = Client::connect(&server.url()).await.unwrap();
    let queue = client.queue("burst").await.unwrap();
    let app = fast(&client);
    let (_, page) = get(&app, "/admin/queues").await;
    assert!(page.contains("data-partial hidden"), "{page}");
    let payloads: Vec<u32> = (0..5_001).collect();
    queue.enqueue_bulk(&payloads).await.unwrap();
    page_until(&app, "/admin/queues", "the lower-bound mark", |p| {
        p.contains("<span class=\"note\" data-partial>")
    })
    .await;
    // Skipped ahead: the next read starts after the burst, and is cheap.
    queue
        .enqueue_with(&0, &EnqueueOptions::new().id("after"))
        .await
        .unwrap();
    page_until(&app, "/admin/queues/burst", "the event after the burst", |p| {
        p.contains("href=\"./burst/jobs/after\"")
    })
    .await;
}

/// A same-origin POST of `body` (the CSRF token is added) to `uri`.
async fn act(app: &Router, uri: &str, body: &str) -> (StatusCode, String) {
    let req = post(
        uri,
        &[("sec-fetch-site", "same-origin")],
        &format!("csrf={SECRET}&{body}"),
    );
    let (status, headers, _) = call(app, req).await;
    let to = headers
        .get("location")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    (status, to)
}

// Bulk actions: retry every failed job, run every delayed one now, remove
// or cancel a state's jobs, and act on the jobs ticked in the list; the
// page offers them and says how many jobs changed; a bad state is a 400
// and a missing token a 403, changing nothing.
#[tokio::test]
async fn bulk_actions_act_on_a_state_or_a_selection() {
    let server = LocalServer::start().unwrap();
    let client = Client::connect(&server.url()).await.unwrap();
    let queue = client.queue("bulk").await.unwrap();
    let app = mounted(&client, 10);
    let base = "/admin/queues/bulk";
    for i in 0..3 {
        let id = format!("f{i}");
        queue
            .enqueue_with(&i, &EnqueueOptions::new().id(&id).max_attempts(1))
            .await
            .unwrap();
        let l = queue.claim(1, Duration::from_secs(30)).await.unwrap().remove(0);
        queue.fail(&l, "boom").await.unwrap();
    }
    for i in 0..2 {
        let opts = EnqueueOptions::new()
            .id(format!("d{i}"))
            .delay(Duration::from_secs(3_600));
        queue.enqueue_with(&i, &opts).await.unwrap();
    }
    let (_, page) = get(&app, &format!("{base}?state=failed")).await;
    assert!(page.contains("data-action=\"retry-all\""), "{page}");
    assert!(page.contains("name=\"id\" value=\"f0\" form=\"bulk\""), "{page}");

    // no token: nothing
    let (status, _, _) = call(&app, post(&format!("{base}/retry-all"), &[], "")).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(queue.counts().await.unwrap().failed, 3);
    let (status, _) = act(&app, &format!("{base}/remove-all"), "state=nonsense").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);

    // two of them ticked, then the rest by state
    let (status, to) = act(
        &app,
        &format!("{base}/selected"),
        "state=failed&action=retry&id=f0&id=f2",
    )
    .await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert!(to.ends_with("../bulk?state=failed&n=2&done=retried"), "{to}");
    let c = queue.counts().await.unwrap();
    assert_eq!((c.failed, c.pending), (1, 2));
    let (_, page) = get(&app, &format!("{base}?state=failed&n=2&done=retried")).await;
    assert!(page.contains("2 jobs moved back to pending."), "{page}");
    let (_, to) = act(&app, &format!("{base}/retry-all"), "state=failed").await;
    assert!(to.contains("n=1&done=retried"), "{to}");
    assert_eq!(queue.counts().await.unwrap().pending, 3);

    let (_, to) = act(&app, &format!("{base}/run-all"), "state=delayed").await;
    assert!(to.contains("n=2&done=promoted"), "{to}");
    assert_eq!(queue.counts().await.unwrap().pending, 5);
    let (_, to) = act(&app, &format!("{base}/cancel-all"), "state=pending").await;
    assert!(to.contains("n=5&done=cancelled"), "{to}");
    let (_, to) = act(&app, &format!("{base}/remove-all"), "state=cancelled").await;
    assert!(to.contains("n=5&done=removed"), "{to}");
    let c = queue.counts().await.unwrap();
    assert_eq!((c.pending, c.delayed, c.failed, c.cancelled), (0, 0, 0, 0));
    // a finished state has no cancel
    let (status, _) = act(&app, &format!("{base}/cancel-all"), "state=completed").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

// Find: by job id, by dedup id (the holder's page), and a notice for
// neither (an id the library refuses included).
#[tokio::test]
async fn find_goes_to_the_job_by_id_or_dedup_id() {
    let server = LocalServer::start().unwrap();
    let client = Client::connect(&server.url()).await.unwrap();
    let queue = client.queue("find").await.unwrap();
    let app = mounted(&client, 10);
    queue
        .enqueue_with(&1, &EnqueueOptions::new().id("order-7"))
        .await
        .unwrap();
    let held = queue
        .enqueue_with(&2, &EnqueueOptions::new().dedup("invoice-9"))
        .await
        .unwrap();
    let to = |q: &str| {
        let app = app.clone();
        let uri = format!("/admin/queues/find/find?q={q}");
        async move {
            let (status, headers, _) = call(&app, Request::get(uri).body(Body::empty()).unwrap()).await;
            assert_eq!(status, StatusCode::SEE_OTHER);
            headers["location"].to_str().unwrap().to_owned()
        }
    };
    assert!(to("order-7").await.ends_with("../find/jobs/order-7"));
    assert!(to("invoice-9").await.ends_with(&format!("../find/jobs/{}", held.id)));
    assert!(to("nothing-here").await.ends_with("../find?done=no-match"));
    assert!(to("%00bad").await.ends_with("../find?done=no-match"));
    let (_, page) = get(&app, "/admin/queues/find?done=no-match").await;
    assert!(page.contains("No job has that id"), "{page}");
    assert!(page.contains("action=\"./find/find\""), "{page}");
}

// A flow's page shows its steps as a tree with their states, a step that
// is a job linked to its page; find goes to a flow by its id; an unknown
// flow is a 404.
#[tokio::test]
async fn a_flow_page_shows_its_tree() {
    use echomq::flow::{FlowSpec, Step};
    let server = LocalServer::start().unwrap();
    let client = Client::connect(&server.url()).await.unwrap();
    let queue = client.queue("orders").await.unwrap();
    let app = mounted(&client, 10);
    queue
        .add_flow(
            &FlowSpec::new()
                .id("o<7>")
                .step(Step::new("charge", &1).unwrap())
                .step(Step::new("reserve", &2).unwrap())
                .step(Step::new("email", &3).unwrap().after("charge").after("reserve")),
        )
        .await
        .unwrap();
    let (status, page) = get(&app, "/admin/queues/orders/flows/o%3C7%3E").await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert!(page.contains("Flow o&lt;7&gt;"), "{page}");
    assert!(page.contains("3 steps: 2 pending, 1 waiting"), "{page}");
    // email at the top, its two children inside it, linked to their jobs
    let email = page.find(r#"data-step="email""#).unwrap();
    let charge = page.find(r#"data-step="charge""#).unwrap();
    assert!(email < charge, "{page}");
    assert!(
        page.contains(r#"href="../../orders/jobs/o%3C7%3E%3Acharge">charge</a>"#),
        "{page}"
    );
    assert!(page.contains(r#"data-state="waiting""#), "{page}");
    let (status, headers, _) = call(
        &app,
        Request::get("/admin/queues/orders/find?q=o%3C7%3E")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert!(
        headers["location"]
            .to_str()
            .unwrap()
            .ends_with("../orders/flows/o%3C7%3E")
    );
    let (status, _) = get(&app, "/admin/queues/orders/flows/nope").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

// The schedules page lists each schedule with pause/resume and run now;
// the actions need the token and act through the library.
#[tokio::test]
async fn the_schedules_page_pauses_resumes_and_runs() {
    let server = LocalServer::start().unwrap();
    let client = Client::connect(&server.url()).await.unwrap();
    let queue = client.queue("cron").await.unwrap();
    let app = mounted(&client, 10);
    let nightly = echomq::schedule::Schedule::new("nightly <b>", "0 0 3 * * *").time_zone("Europe/Berlin");
    queue
        .upsert_schedule(&nightly, &serde_json::json!({"r": 1}))
        .await
        .unwrap();
    let base = "/admin/queues/cron/schedules";
    let (status, page) = get(&app, base).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        page.contains("nightly &lt;b&gt;") && page.contains("Europe/Berlin"),
        "{page}"
    );
    assert!(page.contains("data-state=\"running\""), "{page}");
    let one = format!("{base}/nightly%20%3Cb%3E");
    let (status, _, _) = call(&app, post(&format!("{one}/pause"), &[], "")).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, to) = act(&app, &format!("{one}/pause"), "").await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert!(to.ends_with("../cron/schedules?done=schedule-paused"), "{to}");
    assert!(
        queue
            .schedule("nightly <b>")
            .await
            .unwrap()
            .unwrap()
            .paused_ms
            .is_some()
    );
    let (_, page) = get(&app, &format!("{base}?done=schedule-paused")).await;
    assert!(
        page.contains("data-state=\"paused\"") && page.contains("Paused: the schedule"),
        "{page}"
    );
    let (_, to) = act(&app, &format!("{one}/run"), "").await;
    assert!(to.ends_with("done=schedule-run"), "{to}");
    assert_eq!(queue.counts().await.unwrap().pending, 1);
    let (_, to) = act(&app, &format!("{one}/resume"), "").await;
    assert!(to.ends_with("done=schedule-resumed"), "{to}");
    assert!(
        queue
            .schedule("nightly <b>")
            .await
            .unwrap()
            .unwrap()
            .paused_ms
            .is_none()
    );
    let (_, to) = act(&app, &format!("{base}/gone/run"), "").await;
    assert!(to.ends_with("done=no-schedule"), "{to}");
}

// The lanes page: each lane's jobs, cap, weight and turn, and the queue's
// throttles; escaped, paged.
#[tokio::test]
async fn the_lanes_page_shows_lanes_and_throttles() {
    let server = LocalServer::start().unwrap();
    let client = Client::connect(&server.url()).await.unwrap();
    let queue = client.queue("laned").await.unwrap();
    let app = mounted(&client, 10);
    queue.set_max_active(Some(7)).await.unwrap();
    queue.set_lane_cap("acme", Some(1)).await.unwrap();
    for lane in ["acme", "acme", "<b>beta</b>"] {
        queue.enqueue_with(&1, &EnqueueOptions::new().lane(lane)).await.unwrap();
    }
    let _held = queue.claim(1, Duration::from_secs(30)).await.unwrap();
    let (status, page) = get(&app, "/admin/queues/laned/lanes").await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains("<tr data-lane=\"acme\">"), "{page}");
    assert!(
        page.contains("&lt;b&gt;beta&lt;/b&gt;") && !page.contains("<b>beta</b>"),
        "{page}"
    );
    assert!(page.contains("<dt>global cap</dt><dd>7</dd>"), "{page}");
    let (_, page) = get(&app, "/admin/queues/laned").await;
    assert!(page.contains("href=\"./laned/lanes\""), "{page}");
    let (status, _) = get(&app, "/admin/queues/laned/lanes?after=junk").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

// The workers page lists the workers serving the queue, escaped.
#[tokio::test]
async fn the_workers_page_lists_running_workers() {
    let server = LocalServer::start().unwrap();
    let client = Client::connect(&server.url()).await.unwrap();
    let queue = client.queue("served").await.unwrap();
    let app = mounted(&client, 10);
    let (_, page) = get(&app, "/admin/queues/served/workers").await;
    assert!(page.contains("No worker has announced itself"), "{page}");
    let w = echomq::Consumer::new(queue.clone(), |_job: echomq::Job<u32>| async move {
        Ok::<_, echomq::HandlerError>(())
    })
    .name("<i>w-1</i>")
    .concurrency(4)
    .spawn()
    .unwrap();
    let page = page_until(&app, "/admin/queues/served/workers", "the worker listed", |p| {
        p.contains("data-worker=\"&lt;i&gt;w-1&lt;/i&gt;\"")
    })
    .await;
    assert!(page.contains("0 of 4"), "{page}");
    w.shutdown().await.unwrap();
    let (_, page) = get(&app, "/admin/queues/served").await;
    assert!(page.contains("href=\"./served/workers\""), "{page}");
}

/// The chart `id`'s SVG on `page`.
fn chart<'a>(page: &'a str, id: &str) -> &'a str {
    let at = page
        .find(&format!("data-chart=\"{id}\""))
        .expect("the chart is on the page");
    let svg = &page[at..];
    &svg[..svg.find("</svg>").unwrap()]
}

// The queue page's history charts: what a worker counted shows in them,
// with a value axis (0 to a round top) and a time axis, and the 1 h / 24 h
// / 7 d switches change the buckets; a bad span is refused.
#[tokio::test]
async fn the_history_charts_show_what_workers_counted() {
    let server = LocalServer::start().unwrap();
    let client = Client::connect(&server.url()).await.unwrap();
    let queue = client
        .queue_with("charted", QueueOptions::new().max_attempts(1))
        .await
        .unwrap();
    let app = mounted(&client, 10);
    let payloads: Vec<u32> = (0..12).collect();
    queue.enqueue_bulk(&payloads).await.unwrap();
    let w = echomq::Consumer::new(queue.clone(), |job: echomq::Job<u32>| async move {
        if job.payload().is_multiple_of(4) {
            Err(echomq::HandlerError::fail("bad input"))
        } else {
            Ok(())
        }
    })
    .spawn()
    .unwrap();
    page_until(
        &app,
        "/admin/queues/charted?state=completed",
        "every job settled",
        |p| p.contains("data-count=\"completed\">9<") && p.contains("data-count=\"failed\">3<"),
    )
    .await;
    // Its last counts are written as it stops.
    w.shutdown().await.unwrap();
    for (span, buckets, per) in [
        ("1h", 60, "per minute"),
        ("24h", 96, "per 15 minutes"),
        ("7d", 168, "per hour"),
    ] {
        let (status, page) = get(&app, &format!("/admin/queues/charted?span={span}")).await;
        assert_eq!(status, StatusCode::OK);
        assert!(
            page.contains(&format!("data-span=\"{span}\" aria-current=\"page\"")),
            "{page}"
        );
        let done = chart(&page, "completed");
        assert!(done.contains(&format!("data-buckets=\"{buckets}\"")), "{done}");
        assert!(done.contains(&format!("completed, {per}: 9 completed")), "{done}");
        assert!(done.contains("data-max=\"10\""), "{done}");
        // value labels 0, 5, 10 and five time labels
        for v in ["0", "5", "10"] {
            assert!(done.contains(&format!("text-anchor=\"end\">{v}</text>")), "{v}: {done}");
        }
        assert_eq!(done.matches("class=\"axis x\"").count(), 5, "{done}");
        assert!(done.contains("<rect class=\"completed\""), "{done}");
        let failed = chart(&page, "failed");
        assert!(failed.contains(": 3 failed, 0 retried"), "{failed}");
        let wait = chart(&page, "wait");
        assert!(wait.contains("12 jobs started"), "{wait}");
        assert!(
            wait.contains("<polyline class=\"wait\" points=\"") && !wait.contains("points=\"\""),
            "{wait}"
        );
    }
    assert_eq!(
        get(&app, "/admin/queues/charted?span=2h").await.0,
        StatusCode::BAD_REQUEST
    );
}

// Searching a state's jobs by kind, lane and error text: the matches among
// the jobs read, the number read said, a link to read on; an empty search
// or a bad lane is refused.
#[tokio::test]
async fn search_finds_jobs_by_kind_lane_and_error_text() {
    let server = LocalServer::start().unwrap();
    let client = Client::connect(&server.url()).await.unwrap();
    let queue = client
        .queue_with("sought", QueueOptions::new().max_attempts(1))
        .await
        .unwrap();
    let app = mounted(&client, 10);
    for (i, (kind, lane, err)) in [
        ("email", "acme", "SMTP timeout <b>"),
        ("email", "beta", "bounced"),
        ("sms", "acme", "timeout"),
        ("sms", "beta", "no credit"),
    ]
    .into_iter()
    .enumerate()
    {
        let opts = EnqueueOptions::new().id(format!("j{i}")).kind(kind).lane(lane);
        queue.enqueue_with(&i, &opts).await.unwrap();
        let lease = queue.claim(1, Duration::from_secs(30)).await.unwrap().remove(0);
        queue.fail(&lease, err).await.unwrap();
    }
    let ids = |page: &str| -> Vec<String> {
        let mut v: Vec<String> = page
            .match_indices("<tr data-job=\"")
            .map(|(at, m)| {
                let rest = &page[at + m.len()..];
                rest[..rest.find('"').unwrap()].to_owned()
            })
            .collect();
        v.sort();
        v
    };
    let search = |q: &'static str| {
        let app = app.clone();
        async move { get(&app, &format!("/admin/queues/sought/search?state=failed&{q}")).await }
    };
    let (status, page) = search("kind=email").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(ids(&page), ["j0", "j1"]);
    assert!(page.contains("data-scanned=\"4\" data-found=\"2\""), "{page}");
    assert!(page.contains("to the end of the state"), "{page}");
    assert!(page.contains("at most 1000 per page"), "{page}");
    assert_eq!(ids(&search("lane=acme").await.1), ["j0", "j2"]);
    assert_eq!(ids(&search("error=TIMEOUT").await.1), ["j0", "j2"]);
    assert_eq!(ids(&search("kind=sms&lane=acme&error=time").await.1), ["j2"]);
    assert_eq!(ids(&search("kind=push").await.1), Vec::<String>::new());
    // The form keeps what was asked, escaped.
    let (_, page) = search("error=%3Cb%3E").await;
    assert_eq!(ids(&page), ["j0"]);
    assert!(page.contains("value=\"&lt;b&gt;\"") && !page.contains("<b>"), "{page}");
    assert_eq!(search("kind=").await.0, StatusCode::BAD_REQUEST);
    assert_eq!(search("lane=%00").await.0, StatusCode::BAD_REQUEST);
    // The queue page offers the search of its tab.
    let (_, page) = get(&app, "/admin/queues/sought?state=failed").await;
    assert!(page.contains("action=\"./sought/search\""), "{page}");
    assert!(page.contains("reads 1000 failed jobs a page"), "{page}");
}

// A search reads a bounded number of jobs per request and goes on from a
// cursor: over more jobs than one request reads, the pages together find
// every match once.
#[tokio::test]
async fn search_reads_a_bounded_page_and_goes_on() {
    let server = LocalServer::start().unwrap();
    let client = Client::connect(&server.url()).await.unwrap();
    let queue = client.queue("many").await.unwrap();
    let app = mounted(&client, 10);
    let opts: Vec<(u32, EnqueueOptions)> = (0..1_500_u32)
        .map(|i| {
            (
                i,
                EnqueueOptions::new().kind(if i.is_multiple_of(100) { "rare" } else { "common" }),
            )
        })
        .collect();
    for (p, o) in &opts {
        queue.enqueue_with(p, o).await.unwrap();
    }
    let (_, first) = get(&app, "/admin/queues/many/search?state=pending&kind=rare").await;
    assert!(first.contains("data-scanned=\"1000\" data-found=\"10\""), "{first}");
    assert!(first.contains("more to read"), "{first}");
    let at = first.find("rel=\"next\"").unwrap();
    let href_at = first[..at].rfind("href=\"").unwrap() + 6;
    let href = first[href_at..at].trim_end_matches("\" ").replace("&amp;", "&");
    // `../many/search?...` seen from /admin/queues/many/search.
    let next = format!("/admin/queues/{}", href.trim_start_matches("../"));
    let (status, second) = get(&app, &next).await;
    assert_eq!(status, StatusCode::OK, "{next}");
    assert!(second.contains("data-scanned=\"500\" data-found=\"5\""), "{second}");
    assert!(second.contains("to the end of the state"), "{second}");
}

// Queue pages live at `/{queue}`; the old `/queues/{queue}/…` paths are
// permanent redirects there (relative, the query kept), and a queue named
// like one of the dashboard's own paths still has its pages.
#[tokio::test]
async fn queue_pages_live_at_the_root_and_old_paths_redirect() {
    let server = LocalServer::start().unwrap();
    let client = Client::connect(&server.url()).await.unwrap();
    let queue = client.queue("moved").await.unwrap();
    queue.enqueue_with(&1, &EnqueueOptions::new().id("a/b")).await.unwrap();
    client.queue("events").await.unwrap();
    client.queue("queues").await.unwrap();
    let app = mounted(&client, 10);
    let old = |uri: &'static str| {
        let app = app.clone();
        async move {
            let (status, headers, _) = call(&app, Request::get(uri).body(Body::empty()).unwrap()).await;
            (status, headers["location"].to_str().unwrap().to_owned())
        }
    };
    assert_eq!(
        old("/admin/queues/queues/moved?state=pending").await,
        (StatusCode::PERMANENT_REDIRECT, "../moved?state=pending".into())
    );
    assert_eq!(
        old("/admin/queues/queues/moved/jobs/a%2Fb").await,
        (StatusCode::PERMANENT_REDIRECT, "../../../moved/jobs/a%2Fb".into())
    );
    assert_eq!(
        old("/admin/queues/queues/events/workers").await,
        (StatusCode::PERMANENT_REDIRECT, "../../%65vents/workers".into())
    );
    // A form posted to an old path is sent on with its method (308).
    let (status, headers, _) = call(&app, post("/admin/queues/queues/moved/pause", &[], "")).await;
    assert_eq!(
        (status, &headers["location"]),
        (StatusCode::PERMANENT_REDIRECT, &"../../moved/pause".parse().unwrap())
    );
    let (status, page) = get(&app, "/admin/queues/moved/jobs/a%2Fb").await;
    assert_eq!(status, StatusCode::OK, "{page}");
    let (_, root) = get(&app, "/admin/queues").await;
    assert!(
        root.contains("href=\"./queues/%65vents\"") && root.contains("href=\"./queues/%71ueues\""),
        "{root}"
    );
    for uri in [
        "/admin/queues/%65vents",
        "/admin/queues/%71ueues",
        "/admin/queues/%71ueues/workers",
    ] {
        let (status, page) = get(&app, uri).await;
        assert_eq!(status, StatusCode::OK, "{uri}: {page}");
        assert!(page.contains("<h1>") && !page.contains("no queue"), "{uri}: {page}");
    }
}
