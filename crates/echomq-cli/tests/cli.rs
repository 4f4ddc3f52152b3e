//! The `echomq` binary run as a process against a private server: what it
//! prints, what it changes on the server (checked through the library),
//! and its exit codes.

use std::process::Command;
use std::time::Duration;

use echomq::server::LocalServer;
use echomq::{Client, EnqueueOptions, JobState, Lease, Queue};
use serde_json::Value;

/// What one run of the binary did.
#[derive(Debug)]
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    /// Its stdout as the one JSON document it must be.
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {self:?}"))
    }
}

/// Runs `echomq --url URL ARGS...` with none of the ECHOMQ_* variables of
/// the test's environment.
async fn echomq(url: &str, args: &[&str]) -> Run {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_echomq"));
    cmd.arg("--url")
        .arg(url)
        .args(args)
        .env_remove("ECHOMQ_URL")
        .env_remove("ECHOMQ_QUEUE")
        .env_remove("ECHOMQ_PREFIX");
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    }
}

/// A private server and a client on it.
async fn server() -> (LocalServer, Client) {
    let server = LocalServer::start().expect("start a local server (set ECHOMQ_SERVER_BIN)");
    let client = Client::connect(&server.url()).await.unwrap();
    (server, client)
}

/// Enqueues a job with id `id`.
async fn add(q: &Queue, id: &str, opts: EnqueueOptions) {
    q.enqueue_with(&serde_json::json!({"job": id}), &opts.id(id))
        .await
        .unwrap();
}

/// Claims the next pending job, which must be `id`.
async fn claim(q: &Queue, id: &str) -> Lease {
    let mut leases = q.claim(1, Duration::from_secs(60)).await.unwrap();
    let lease = leases.pop().expect("a pending job");
    assert_eq!(lease.id(), id);
    lease
}

/// Makes job `id` fail for good after two attempts ("boom 1", "boom 2").
async fn failed(q: &Queue, id: &str) {
    add(q, id, EnqueueOptions::new().max_attempts(2)).await;
    let lease = claim(q, id).await;
    q.retry(&lease, Some(Duration::ZERO), "boom 1").await.unwrap();
    let lease = claim(q, id).await;
    q.retry(&lease, Some(Duration::ZERO), "boom 2").await.unwrap();
    assert_eq!(q.job(id).await.unwrap().state, JobState::Failed);
}

/// Makes job `id` (of kind "mail") completed with result `{"sent": 3}`.
async fn completed(q: &Queue, id: &str) {
    add(q, id, EnqueueOptions::new().kind("mail")).await;
    let lease = claim(q, id).await;
    q.complete_with_result(&lease, &serde_json::json!({"sent": 3}))
        .await
        .unwrap();
}

/// The keys on the server.
async fn dbsize(server: &LocalServer) -> u64 {
    let mut c = echomq::redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    echomq::redis::cmd("DBSIZE").query_async(&mut c).await.unwrap()
}

// `stats` counts every state and the pause of one queue, and lists every
// queue of the server when given none, as text and as JSON.
#[tokio::test]
async fn stats_counts_every_state() {
    let (server, client) = server().await;
    let url = server.url();
    let q = client.queue("mail").await.unwrap();
    client.queue("billing").await.unwrap();
    failed(&q, "f1").await;
    completed(&q, "c1").await;
    add(&q, "active-1", EnqueueOptions::new()).await;
    let _held = claim(&q, "active-1").await;
    add(&q, "p1", EnqueueOptions::new()).await;
    add(&q, "p2", EnqueueOptions::new()).await;
    add(&q, "x1", EnqueueOptions::new()).await;
    q.cancel("x1").await.unwrap();
    add(&q, "d1", EnqueueOptions::new().delay(Duration::from_secs(3_600))).await;
    add(&q, "e1", EnqueueOptions::new().discard_after(Duration::from_millis(20))).await;
    let xa = q.job("e1").await.unwrap().expires_at_ms.unwrap();
    while q.server_time_ms().await.unwrap() <= xa {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(q.reap(10).await.unwrap().expired_waiting, 1);
    q.pause().await.unwrap();

    let run = echomq(&url, &["stats", "-q", "mail", "--json"]).await;
    assert_eq!(run.code, 0, "{run:?}");
    let doc = run.json();
    let row = &doc["queues"][0];
    assert_eq!(doc["queues"].as_array().unwrap().len(), 1);
    assert_eq!(row["queue"], "mail");
    assert_eq!(row["paused"], true);
    for (state, n) in [
        ("pending", 2),
        ("delayed", 1),
        ("active", 1),
        ("completed", 1),
        ("failed", 1),
        ("cancelled", 1),
        ("expired", 1),
    ] {
        assert_eq!(row[state], n, "{state}: {row}");
    }
    assert_eq!(row["backlog"], 2, "{row}");
    let lag = row["lag_ms"].as_u64().unwrap();
    assert_eq!(
        std::time::Duration::from_millis(lag).as_secs(),
        q.lag().await.unwrap().as_secs(),
        "{row}"
    );

    let run = echomq(&url, &["stats"]).await;
    assert_eq!(run.code, 0, "{run:?}");
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{}", run.stdout);
    assert!(lines[0].starts_with("QUEUE "), "{}", run.stdout);
    assert!(
        lines[1].starts_with("billing ") && lines[2].starts_with("mail "),
        "{}",
        run.stdout
    );
    let mail: Vec<&str> = lines[2].split_whitespace().collect();
    assert_eq!(mail[..9], ["mail", "yes", "2", "1", "1", "1", "1", "1", "1"]);
    assert!(mail[9].ends_with('s'), "the lag: {}", run.stdout);
    let all = echomq(&url, &["stats", "--json"]).await.json();
    assert_eq!(all["queues"].as_array().unwrap().len(), 2);
}

// `jobs` pages through a state in its order with the cursor it prints,
// each job once, and shows the lease holder and deadline of active jobs.
#[tokio::test]
async fn jobs_pages_with_the_cursor() {
    let (server, client) = server().await;
    let url = server.url();
    let q = client.queue("pages").await.unwrap();
    let ids: Vec<String> = (0..7).map(|i| format!("job-{i}")).collect();
    for id in &ids {
        add(&q, id, EnqueueOptions::new()).await;
    }
    let mut seen = Vec::new();
    let mut after: Option<String> = None;
    let mut pages = 0;
    loop {
        let mut args = vec!["jobs", "pending", "-q", "pages", "--limit", "3", "--json"];
        if let Some(c) = &after {
            args.extend(["--after", c.as_str()]);
        }
        let run = echomq(&url, &args).await;
        assert_eq!(run.code, 0, "{run:?}");
        let doc = run.json();
        assert_eq!(doc["state"], "pending");
        for job in doc["jobs"].as_array().unwrap() {
            assert_eq!(job["state"], "pending");
            seen.push(job["id"].as_str().unwrap().to_owned());
        }
        pages += 1;
        match doc["next"].as_str() {
            Some(c) => after = Some(c.to_owned()),
            None => break,
        }
    }
    assert_eq!(seen, ids, "in claim order, each once");
    assert_eq!(pages, 3);

    // Text: a table and the next page's flag.
    let run = echomq(&url, &["jobs", "pending", "-q", "pages", "--limit", "2"]).await;
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.stdout.starts_with("ID "), "{}", run.stdout);
    assert!(
        run.stdout.contains("job-0 ") && run.stdout.contains("job-1 "),
        "{}",
        run.stdout
    );
    assert!(!run.stdout.contains("job-2"), "{}", run.stdout);
    assert!(run.stdout.contains("next page: --after "), "{}", run.stdout);

    // Active jobs with their holder and deadline.
    let lease = claim(&q.with_holder("worker-a:42/1").unwrap(), "job-0").await;
    let run = echomq(&url, &["jobs", "active", "-q", "pages"]).await;
    assert!(run.stdout.contains("worker-a:42/1"), "{}", run.stdout);
    assert!(
        run.stdout.contains("(in 59s)") || run.stdout.contains("(in 1m)"),
        "{}",
        run.stdout
    );
    let doc = echomq(&url, &["jobs", "active", "-q", "pages", "--json"]).await.json();
    assert_eq!(doc["jobs"][0]["deadline_ms"], lease.deadline_ms());
    assert_eq!(doc["jobs"][0]["holder"], "worker-a:42/1");

    // A cursor that is not one is a usage error.
    let run = echomq(&url, &["jobs", "pending", "-q", "pages", "--after", "nonsense"]).await;
    assert_eq!(run.code, 2, "{run:?}");
}

// `show` prints a failed job's errors and a completed job's result, the
// whole record in JSON, and exits 1 for a job that is not there.
#[tokio::test]
async fn show_prints_the_whole_record() {
    let (server, client) = server().await;
    let url = server.url();
    let q = client.queue("shown").await.unwrap();
    failed(&q, "order-17").await;
    completed(&q, "order-18").await;

    let run = echomq(&url, &["show", "order-17", "-q", "shown"]).await;
    assert_eq!(run.code, 0, "{run:?}");
    for text in [
        "state       failed",
        "kind        -",
        "failures 2 of 2",
        "last error  boom 2",
        "errors (newest first):",
        "boom 1",
        "\"job\": \"order-17\"",
        "max_attempts 2",
    ] {
        assert!(run.stdout.contains(text), "{text:?} in\n{}", run.stdout);
    }
    let doc = echomq(&url, &["show", "order-17", "-q", "shown", "--json"])
        .await
        .json();
    let job = &doc["job"];
    assert_eq!(job["state"], "failed");
    assert_eq!(job["attempts"], 2);
    assert_eq!(job["errors"][0]["message"], "boom 2");
    assert_eq!(job["errors"][1]["message"], "boom 1");
    assert_eq!(job["payload"]["job"], "order-17");
    assert_eq!(job["limits"]["max_attempts"], 2);
    assert!(job["finished_ms"].as_u64().unwrap() <= doc["server_time_ms"].as_u64().unwrap());

    let run = echomq(&url, &["show", "order-18", "-q", "shown"]).await;
    assert!(run.stdout.contains("result      {\"sent\":3}"), "{}", run.stdout);
    assert!(run.stdout.contains("kind        mail"), "{}", run.stdout);
    let doc = echomq(&url, &["show", "order-18", "-q", "shown", "--json"])
        .await
        .json();
    assert_eq!(doc["job"]["result"], serde_json::json!({"sent": 3}));
    assert_eq!(doc["job"]["state"], "completed");
    assert_eq!(doc["job"]["kind"], "mail");

    let run = echomq(&url, &["show", "order-99", "-q", "shown"]).await;
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stderr.contains("no job \"order-99\""), "{run:?}");
    let run = echomq(&url, &["show", "order-99", "-q", "shown", "--json"]).await;
    assert_eq!(run.json()["exit_code"], 1);
}

// retry, remove, cancel, promote, pause and resume change the server as
// they say; an id a call leaves alone makes it exit 1.
#[tokio::test]
async fn operations_change_the_server() {
    let (server, client) = server().await;
    let url = server.url();
    let q = client.queue("ops").await.unwrap();
    failed(&q, "f1").await;
    failed(&q, "f2").await;
    failed(&q, "f3").await;
    add(&q, "p1", EnqueueOptions::new()).await;
    add(&q, "p2", EnqueueOptions::new()).await;
    add(&q, "d1", EnqueueOptions::new().delay(Duration::from_secs(3_600))).await;

    let run = echomq(&url, &["retry", "f1", "-q", "ops"]).await;
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.stdout.contains("1 of 1 retried"), "{}", run.stdout);
    assert_eq!(q.job("f1").await.unwrap().state, JobState::Pending);

    // One of two left alone: exit 1, each id's outcome said.
    let run = echomq(&url, &["retry", "f2", "p1", "-q", "ops", "--json"]).await;
    assert_eq!(run.code, 1, "{run:?}");
    let results = run.json()["results"].clone();
    assert_eq!(results[0], serde_json::json!({"id": "f2", "outcome": "retried"}));
    assert_eq!(results[1], serde_json::json!({"id": "p1", "outcome": "not_failed"}));
    assert_eq!(q.job("f2").await.unwrap().state, JobState::Pending);

    let run = echomq(&url, &["retry", "--all", "-q", "ops", "--json"]).await;
    assert_eq!((run.code, run.json()["moved"].as_u64()), (0, Some(1)), "{run:?}");
    assert_eq!(q.counts().await.unwrap().failed, 0);

    let run = echomq(&url, &["promote", "d1", "-q", "ops"]).await;
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(q.job("d1").await.unwrap().state, JobState::Pending);

    let run = echomq(&url, &["cancel", "p2", "-q", "ops"]).await;
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(q.job("p2").await.unwrap().state, JobState::Cancelled);

    let run = echomq(&url, &["remove", "p1", "nope", "-q", "ops"]).await;
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stdout.contains("not found"), "{}", run.stdout);
    assert!(matches!(q.job("p1").await, Err(echomq::Error::JobNotFound(_))));

    let run = echomq(&url, &["pause", "-q", "ops"]).await;
    assert_eq!(run.code, 0, "{run:?}");
    assert!(q.is_paused().await.unwrap());
    let run = echomq(&url, &["resume", "-q", "ops", "--json"]).await;
    assert_eq!(run.json()["paused"], false);
    assert!(!q.is_paused().await.unwrap());

    // drain asks first, then removes every waiting job.
    let waiting = q.counts().await.unwrap().pending;
    assert!(waiting > 0);
    let run = echomq(&url, &["drain", "-q", "ops"]).await;
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stderr.contains("--yes"), "{run:?}");
    assert_eq!(q.counts().await.unwrap().pending, waiting);
    let run = echomq(&url, &["drain", "--yes", "-q", "ops", "--json"]).await;
    assert_eq!(
        (run.code, run.json()["removed"].as_u64()),
        (0, Some(waiting)),
        "{run:?}"
    );
    assert_eq!(q.counts().await.unwrap().pending, 0);
}

// obliterate asks for --yes, is refused while a job is active (exit 1,
// nothing deleted), and with --force deletes every key of the queue.
#[tokio::test]
async fn obliterate_is_refused_while_active() {
    let (server, client) = server().await;
    let url = server.url();
    let q = client.queue("doomed").await.unwrap();
    add(&q, "a", EnqueueOptions::new()).await;
    add(&q, "b", EnqueueOptions::new()).await;
    let _held = claim(&q, "a").await;
    let before = dbsize(&server).await;

    let run = echomq(&url, &["obliterate", "-q", "doomed"]).await;
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stderr.contains("--yes and --force"), "{run:?}");
    let run = echomq(&url, &["obliterate", "--yes", "-q", "doomed"]).await;
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stderr.contains("1 active job: obliterate refused"), "{run:?}");
    assert_eq!(dbsize(&server).await, before, "nothing deleted");
    assert_eq!(q.counts().await.unwrap().active, 1);

    let run = echomq(&url, &["obliterate", "--yes", "--force", "-q", "doomed", "--json"]).await;
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.json()["deleted"].as_u64().unwrap() > 0);
    assert_eq!(dbsize(&server).await, 0);
    assert!(!client.queue_exists("emq", "doomed").await.unwrap());
}

// A queue that is not on the server is reported (exit 1) and not created;
// a command that needs a queue and has none is a usage error (exit 2).
#[tokio::test]
async fn unknown_queue_is_not_created() {
    let (server, client) = server().await;
    let url = server.url();
    let run = echomq(&url, &["jobs", "failed", "-q", "mial"]).await;
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stderr.contains("no queue \"mial\""), "{run:?}");
    assert_eq!(dbsize(&server).await, 0);
    assert!(!client.queue_exists("emq", "mial").await.unwrap());
    let run = echomq(&url, &["pause"]).await;
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stderr.contains("needs a queue"), "{run:?}");
    let run = echomq(&url, &["stats", "-q", "a{b"]).await;
    assert_eq!(run.code, 2, "{run:?}");
    let run = echomq(&url, &["stats", "--json"]).await;
    assert_eq!(run.json()["queues"], serde_json::json!([]));
}

// A server that cannot be reached, or a URL that is not one, exits 3 with
// a readable message, and a password in the URL is never printed.
#[tokio::test]
async fn bad_url_exits_3() {
    // A port no server listens on: a free one, closed again.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("redis://:hunter2secret@127.0.0.1:{port}/");
    let run = echomq(&url, &["stats"]).await;
    assert_eq!(run.code, 3, "{run:?}");
    assert!(
        run.stderr
            .contains(&format!("cannot connect to redis://:***@127.0.0.1:{port}/")),
        "{run:?}"
    );
    assert!(!run.stderr.contains("hunter2secret") && !run.stdout.contains("hunter2secret"));
    let run = echomq(&url, &["stats", "--json"]).await;
    assert_eq!(run.json()["exit_code"], 3);
    assert!(!run.stdout.contains("hunter2secret"));

    let run = echomq("nonsense", &["stats"]).await;
    assert_eq!(run.code, 3, "{run:?}");
    assert!(run.stderr.contains("bad server URL nonsense"), "{run:?}");
}

// doctor passes a healthy queue (exit 0); a record torn out of its set by
// raw commands makes it exit 4, and its sweep puts the job back.
#[tokio::test]
async fn doctor_finds_and_repairs_a_torn_record() {
    let (server, client) = server().await;
    let url = server.url();
    let q = client.queue("health").await.unwrap();
    completed(&q, "c1").await;
    add(&q, "j1", EnqueueOptions::new()).await;
    add(&q, "j2", EnqueueOptions::new()).await;

    let run = echomq(&url, &["doctor"]).await;
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.stdout.contains("no problems, "), "{}", run.stdout);
    assert!(
        run.stdout.contains("maxmemory") || run.stdout.contains("noeviction"),
        "{}",
        run.stdout
    );

    // A torn write: the record says pending, the pending set lost it.
    let mut raw = echomq::redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let removed: u64 = echomq::redis::cmd("ZREM")
        .arg("emq:{health}:pending")
        .arg("j2")
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(removed, 1);
    assert_eq!(q.counts().await.unwrap().pending, 1);

    let run = echomq(&url, &["doctor", "-q", "health", "--json"]).await;
    assert_eq!(run.code, 4, "{run:?}");
    let doc = run.json();
    assert!(doc["queues"][0]["repaired"].as_u64().unwrap() >= 1, "{doc}");
    assert_eq!(doc["problems"].as_array().unwrap().len(), 1, "{doc}");
    assert_eq!(doc["server"]["maxmemory_policy"], "noeviction");
    assert_eq!(q.counts().await.unwrap().pending, 2, "the sweep put j2 back");
    let page = q.list(JobState::Pending, None, 10).await.unwrap();
    assert!(page.jobs.iter().any(|j| j.id == "j2"));

    let run = echomq(&url, &["doctor", "-q", "health"]).await;
    assert_eq!(run.code, 0, "repaired: {run:?}");

    // Another build's function library left in the server is named in a
    // warning (not a problem: exit 0), beside this build's.
    let old = "#!lua name=echomq_0123456789ab\nredis.register_function('emq_0123456789ab_x', function() return 1 end)";
    let _: String = echomq::redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg(old)
        .query_async(&mut raw)
        .await
        .unwrap();
    let run = echomq(&url, &["doctor", "-q", "health", "--json"]).await;
    assert_eq!(run.code, 0, "{run:?}");
    let doc = run.json();
    let libs = &doc["server"]["function_libraries"];
    assert_eq!(libs["loaded"], true, "{doc}");
    assert_eq!(libs["others"][0], "echomq_0123456789ab", "{doc}");
    assert!(doc["warnings"].to_string().contains("echomq_0123456789ab"), "{doc}");
}

// schedules lists a queue's schedules (every queue's without -q) and
// removes one by name; removing it again exits 1.
#[tokio::test]
async fn schedules_list_and_remove() {
    let (server, client) = server().await;
    let url = server.url();
    let q = client.queue("cron").await.unwrap();
    let nightly = echomq::Schedule::new("nightly", "0 30 2 * * *").time_zone("Europe/Berlin");
    q.upsert_schedule(&nightly, &serde_json::json!({"report": "sales"}))
        .await
        .unwrap();

    let run = echomq(&url, &["schedules"]).await;
    assert_eq!(run.code, 0, "{run:?}");
    assert!(
        run.stdout.contains("nightly") && run.stdout.contains("Europe/Berlin"),
        "{}",
        run.stdout
    );
    let doc = echomq(&url, &["schedules", "-q", "cron", "--json"]).await.json();
    let s = &doc["schedules"][0];
    assert_eq!(
        (s["queue"].as_str(), s["name"].as_str()),
        (Some("cron"), Some("nightly"))
    );
    assert_eq!(s["payload"]["report"], "sales");
    assert!(s["next_tick_ms"].as_u64().unwrap() > doc["server_time_ms"].as_u64().unwrap());

    let run = echomq(&url, &["schedules", "remove", "nightly", "-q", "cron"]).await;
    assert_eq!(run.code, 0, "{run:?}");
    assert!(q.schedule("nightly").await.unwrap().is_none());
    let run = echomq(&url, &["schedules", "remove", "nightly", "-q", "cron"]).await;
    assert_eq!(run.code, 1, "{run:?}");
}

// `watch --json --count N` prints N events, one JSON object per line, in
// order, and `--from ID` resumes right after an event it printed.
#[tokio::test]
async fn watch_prints_events_and_resumes_from_an_id() {
    let (s, client) = server().await;
    let q = client.queue("watched").await.unwrap();
    add(&q, "a", EnqueueOptions::new().lane("acme")).await;
    let lease = claim(&q, "a").await;
    q.complete(&lease).await.unwrap();
    q.pause().await.unwrap();
    let run = echomq(
        &s.url(),
        &["-q", "watched", "--json", "watch", "--from", "0", "--count", "3"],
    )
    .await;
    assert_eq!(run.code, 0, "{run:?}");
    let lines: Vec<Value> = run.stdout.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let events: Vec<&str> = lines.iter().map(|l| l["event"].as_str().unwrap()).collect();
    assert_eq!(events, ["enqueued", "claimed", "completed"]);
    assert_eq!(lines[1]["job"], "a");
    assert_eq!(lines[1]["lane"], "acme");
    assert_eq!(lines[1]["attempt"], 1);
    assert_eq!(lines[1]["token"], lease.token());
    let after = lines[2]["id"].as_str().unwrap();
    let run = echomq(&s.url(), &["-q", "watched", "watch", "--from", after, "--count", "1"]).await;
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.stdout.contains(" paused"), "{run:?}");
    assert_eq!(run.stdout.lines().count(), 1, "{run:?}");
    let run = echomq(&s.url(), &["-q", "watched", "watch", "--from", "junk"]).await;
    assert_eq!(run.code, 2, "{run:?}");
    // --no-follow: a --count larger than the history prints what is there
    // (4 events) and exits instead of waiting for more
    let run = echomq(
        &s.url(),
        &["-q", "watched", "watch", "--from", "0", "--count", "100", "--no-follow"],
    )
    .await;
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(run.stdout.lines().count(), 4, "{run:?}");
    let run = echomq(&s.url(), &["-q", "watched", "watch", "--no-follow"]).await;
    assert_eq!((run.code, run.stdout.as_str()), (0, ""), "from now: nothing yet");
}

// enqueue: a JSON payload into an existing queue (created, then existing
// for the same --id), options passed through, a payload that is not JSON
// and a queue that is not there refused (exit 1, nothing written) unless
// --create; with --json a failure is one document on stdout and nothing
// on stderr.
#[tokio::test]
async fn enqueue_adds_one_job() {
    let (server, client) = server().await;
    let url = server.url();
    let q = client.queue("inbox").await.unwrap();
    let run = echomq(
        &url,
        &[
            "-q",
            "inbox",
            "--json",
            "enqueue",
            r#"{"to":"ada"}"#,
            "--id",
            "m-1",
            "--lane",
            "t1",
            "--kind",
            "mail",
            "--priority",
            "-3",
            "--max-attempts",
            "4",
        ],
    )
    .await;
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(
        run.json()["enqueued"],
        serde_json::json!({"id": "m-1", "status": "created"})
    );
    let job = q.job("m-1").await.unwrap();
    assert_eq!(job.decode::<Value>().unwrap(), serde_json::json!({"to": "ada"}));
    assert_eq!((job.lane.as_deref(), job.kind.as_deref()), (Some("t1"), Some("mail")));
    assert_eq!(job.limits.max_attempts, 4);
    let again = echomq(&url, &["-q", "inbox", "enqueue", r#"{"to":"ada"}"#, "--id", "m-1"]).await;
    assert_eq!(again.code, 0, "{again:?}");
    assert!(again.stdout.contains("existing"), "{again:?}");

    let delayed = echomq(
        &url,
        &[
            "-q",
            "inbox",
            "enqueue",
            "7",
            "--delay",
            "1h",
            "--dedup",
            "d",
            "--dedup-for",
            "2m",
        ],
    )
    .await;
    assert_eq!(delayed.code, 0, "{delayed:?}");
    assert_eq!(q.counts().await.unwrap().delayed, 1);

    let bad = echomq(&url, &["-q", "inbox", "--json", "enqueue", "{not json"]).await;
    assert_eq!(bad.code, 1, "{bad:?}");
    assert!(bad.json()["error"].as_str().unwrap().contains("not JSON"), "{bad:?}");
    assert_eq!(bad.stderr, "", "--json: the failure only on stdout");
    let none = echomq(&url, &["-q", "nowhere", "enqueue", "1"]).await;
    assert_eq!(none.code, 1, "{none:?}");
    assert!(none.stderr.contains("no queue \"nowhere\""), "{none:?}");
    assert!(!client.queue_exists("emq", "nowhere").await.unwrap());
    let made = echomq(&url, &["-q", "nowhere", "enqueue", "1", "--create"]).await;
    assert_eq!(made.code, 0, "{made:?}");
    assert_eq!(
        client.queue("nowhere").await.unwrap().counts().await.unwrap().pending,
        1
    );
    let counts = q.counts().await.unwrap();
    assert_eq!((counts.pending, counts.delayed), (1, 1));
}

// doctor counts its warnings (the test server has no append-only file) and
// exits 4 on them with --strict; schedules --json always gives the
// server's time; a completed job's error is an earlier attempt's.
#[tokio::test]
async fn doctor_strict_schedules_time_and_earlier_errors() {
    let (server, client) = server().await;
    let url = server.url();
    let q = client.queue("quiet").await.unwrap();
    let run = echomq(&url, &["doctor"]).await;
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.stdout.contains("warning: no append-only file"), "{}", run.stdout);
    assert!(run.stdout.contains("no problems, 1 warning"), "{}", run.stdout);
    let strict = echomq(&url, &["doctor", "--strict"]).await;
    assert_eq!(strict.code, 4, "{strict:?}");

    let sched = echomq(&url, &["--json", "schedules"]).await;
    assert_eq!(sched.code, 0, "{sched:?}");
    assert!(sched.json()["server_time_ms"].as_u64().unwrap() > 0, "{sched:?}");

    add(&q, "r1", EnqueueOptions::new().max_attempts(3)).await;
    let lease = claim(&q, "r1").await;
    q.retry(&lease, Some(Duration::ZERO), "flaky").await.unwrap();
    let lease = claim(&q, "r1").await;
    q.complete(&lease).await.unwrap();
    let show = echomq(&url, &["-q", "quiet", "show", "r1"]).await;
    assert!(
        show.stdout.contains("earlier error  flaky (before it completed)"),
        "{}",
        show.stdout
    );
    assert!(!show.stdout.contains("last error"), "{}", show.stdout);
}

// clean: the completed jobs finished longer ago than --older-than go, the
// newer ones stay; a state that is not finished is refused (exit 1).
#[tokio::test]
async fn clean_removes_old_finished_jobs() {
    let (server, client) = server().await;
    let url = server.url();
    let q = client.queue("tidy").await.unwrap();
    completed(&q, "old-1").await;
    completed(&q, "old-2").await;
    let done_at = q.job("old-2").await.unwrap().finished_ms.unwrap();
    // a wait past the finish, on the server's clock
    let mut now = q.server_time_ms().await.unwrap();
    while now <= done_at + 1_000 {
        tokio::time::sleep(Duration::from_millis(done_at + 1_001 - now)).await;
        now = q.server_time_ms().await.unwrap();
    }
    completed(&q, "new-1").await;
    let run = echomq(
        &url,
        &["-q", "tidy", "--json", "clean", "completed", "--older-than", "1s"],
    )
    .await;
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(run.json()["removed"], 2, "{run:?}");
    assert!(q.job("old-1").await.is_err());
    assert_eq!(q.job("new-1").await.unwrap().state, JobState::Completed);
    let bad = echomq(&url, &["-q", "tidy", "clean", "pending", "--older-than", "1s"]).await;
    assert_eq!(bad.code, 1, "{bad:?}");
    assert!(bad.stderr.contains("not finished"), "{bad:?}");
}

// schedules pause | resume | run: the schedule's state follows, the list
// says "paused", run makes one job; an unknown schedule is exit 1.
#[tokio::test]
async fn schedules_pause_resume_and_run() {
    let (server, client) = server().await;
    let url = server.url();
    let q = client.queue("cron").await.unwrap();
    let nightly = echomq::schedule::Schedule::new("nightly", "0 0 3 * * *");
    q.upsert_schedule(&nightly, &serde_json::json!({"r": 1})).await.unwrap();
    let run = echomq(&url, &["-q", "cron", "schedules", "pause", "nightly"]).await;
    assert_eq!(run.code, 0, "{run:?}");
    assert!(q.schedule("nightly").await.unwrap().unwrap().paused_ms.is_some());
    let list = echomq(&url, &["-q", "cron", "schedules"]).await;
    assert!(list.stdout.contains("paused"), "{}", list.stdout);
    let now = echomq(&url, &["-q", "cron", "--json", "schedules", "run", "nightly"]).await;
    assert_eq!(now.code, 0, "{now:?}");
    let id = now.json()["enqueued"]["id"].as_str().unwrap().to_owned();
    assert_eq!(
        q.job(&id).await.unwrap().decode::<Value>().unwrap(),
        serde_json::json!({"r": 1})
    );
    let run = echomq(&url, &["-q", "cron", "schedules", "resume", "nightly"]).await;
    assert_eq!(run.code, 0, "{run:?}");
    assert!(q.schedule("nightly").await.unwrap().unwrap().paused_ms.is_none());
    let none = echomq(&url, &["-q", "cron", "schedules", "pause", "nope"]).await;
    assert_eq!(none.code, 1, "{none:?}");
    assert!(none.stderr.contains("no schedule"), "{none:?}");
}

// flow ID prints the steps as a tree with their states and counts (JSON:
// every step with its children); batch ID prints the counts and
// callbacks; an unknown one exits 1.
#[tokio::test]
async fn flow_and_batch_show_their_progress() {
    use echomq::batch::{BatchOptions, Callback};
    use echomq::flow::{FlowSpec, Step};
    let (s, client) = server().await;
    let url = s.url();
    let q = client.queue("orders").await.unwrap();
    let o = serde_json::json!({"order": 7});
    q.add_flow(
        &FlowSpec::new()
            .id("o7")
            .step(Step::new("charge", &o).unwrap())
            .step(Step::new("reserve", &o).unwrap())
            .step(Step::new("email", &o).unwrap().after("charge").after("reserve"))
            .step(Step::new("ship", &o).unwrap().after("email")),
    )
    .await
    .unwrap();
    let lease = claim(&q, "o7:charge").await;
    q.complete(&lease).await.unwrap();
    let run = echomq(&url, &["-q", "orders", "flow", "o7"]).await;
    assert_eq!(run.code, 0, "{run:?}");
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert!(
        lines[0].contains("4 steps") && lines[0].contains("1 completed"),
        "{run:?}"
    );
    assert!(lines[1].starts_with("ship") && lines[1].ends_with("waiting"), "{run:?}");
    assert!(
        lines[2].starts_with("└ email") && lines[2].ends_with("waiting"),
        "{run:?}"
    );
    assert!(
        lines[3].starts_with("  ├ charge") && lines[3].ends_with("completed"),
        "{run:?}"
    );
    assert!(
        lines[4].starts_with("  └ reserve") && lines[4].ends_with("pending"),
        "{run:?}"
    );
    let doc = echomq(&url, &["-q", "orders", "--json", "flow", "o7"]).await.json();
    assert_eq!(doc["steps"][2]["after"], serde_json::json!(["charge", "reserve"]));
    assert_eq!(doc["counts"]["waiting"], 2);
    assert_eq!(doc["ended"], false);
    assert_eq!(echomq(&url, &["-q", "orders", "flow", "nope"]).await.code, 1);

    let b = q
        .open_batch(&BatchOptions::new().id("b1").on_success(Callback::new(&1).unwrap()))
        .await
        .unwrap();
    b.add(&[1, 2]).await.unwrap();
    let doc = echomq(&url, &["-q", "orders", "--json", "batch", "b1"]).await.json();
    assert_eq!((doc["total"].as_u64(), doc["pending"].as_u64()), (Some(2), Some(2)));
    assert!(doc["closed_ms"].is_null());
    let run = echomq(&url, &["-q", "orders", "batch", "b1"]).await;
    assert!(
        run.stdout.contains("2 members") && run.stdout.contains("closed -"),
        "{run:?}"
    );
    assert_eq!(echomq(&url, &["-q", "orders", "batch", "nope"]).await.code, 1);
}
