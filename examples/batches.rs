//! A batch: an import whose rows are jobs of a `rows` queue, and whose
//! end, counted on the `imports` queue, enqueues one "import done" job
//! (or, at the first row that fails for good, one "import failed" job).
//! The rows sit on another queue than the batch (`Batch::on`), so each is
//! made there, and its end counted back home, by relayed message; on a
//! Cluster the two queues may live on different masters.
//!
//! Run: `cargo run --example batches --features local-server`.
//! Connects to `ECHOMQ_URL` when set; otherwise starts a private server.

use std::time::Duration;

use echomq::batch::{BatchOptions, Callback};
use echomq::{Client, HandlerError, Job, JobKind, JobState, Kinds, Worker};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
struct Row {
    import: u64,
    line: u64,
}
impl JobKind for Row {
    const KIND: &'static str = "row";
}

#[derive(Serialize, Deserialize)]
struct ImportDone {
    import: u64,
}
impl JobKind for ImportDone {
    const KIND: &'static str = "import-done";
}

#[derive(Serialize, Deserialize)]
struct ImportFailed {
    import: u64,
}
impl JobKind for ImportFailed {
    const KIND: &'static str = "import-failed";
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt().with_env_filter("echomq=info").init();
    let (url, _server) = echomq::server::url_from_env_or_start()?;
    let client = Client::connect(&url).await?;
    let imports = client.queue("imports").await?;
    let rows = client.queue("rows").await?;

    let callbacks = Kinds::new()
        .kind::<ImportDone>(|job: Job<ImportDone>| async move {
            println!(
                "import {} done: email the uploader ({})",
                job.payload().import,
                job.id()
            );
            Ok::<_, HandlerError>(())
        })
        .kind::<ImportFailed>(|job: Job<ImportFailed>| async move {
            println!("import {} failed: alert someone", job.payload().import);
            Ok::<_, HandlerError>(())
        })
        .build()?;
    let row = |job: Job<Row>| async move {
        println!("row     import {} line {}", job.payload().import, job.payload().line);
        Ok::<_, HandlerError>(())
    };
    let worker = Worker::new()
        .queue(imports.clone(), callbacks)
        .queue(rows.clone(), row)
        .spawn()?;

    // What the upload handler does: one batch per import, its rows added
    // (here in two calls) to the rows queue, then the close.
    let import = 7;
    let batch = imports
        .open_batch(
            &BatchOptions::new()
                .id(format!("import-{import}"))
                .on_success(Callback::job(&ImportDone { import })?)
                .on_death(Callback::job(&ImportFailed { import })?),
        )
        .await?;
    let lines: Vec<Row> = (1..=5).map(|line| Row { import, line }).collect();
    let on_rows = batch.on(&rows)?;
    on_rows.add_jobs(&lines[..3]).await?;
    on_rows.add_jobs(&lines[3..]).await?;
    batch.close().await?;

    // Poll the batch's counts until its success callback was enqueued.
    let status = loop {
        let status = batch.status().await?;
        if status.success_at.is_some() {
            break status;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    println!(
        "batch {}: {} of {} rows completed",
        status.id, status.completed, status.total
    );
    assert_eq!((status.total, status.completed), (5, 5));
    // the callback is an ordinary job of the batch's queue: wait for its run
    let callback = format!("{}:success", batch.id());
    while imports.job(&callback).await?.state != JobState::Completed {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    worker.shutdown().await?;
    Ok(())
}
