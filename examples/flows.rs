//! A flow: an order whose card charge and stock reservation run in
//! parallel, then the confirmation email (which reads both results), then
//! the shipment. Each step is a typed job routed to its handler by kind.
//!
//! Run: `cargo run --example flows --features local-server`.
//! Connects to `ECHOMQ_URL` when set; otherwise starts a private server.

use std::time::Duration;

use echomq::flow::{ChildOutcome, FlowSpec, Step, StepState};
use echomq::{Consumer, HandlerError, Job, JobKind, Kinds, Queue};
use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Serialize, Deserialize)]
struct Charge {
    order: u64,
    cents: u64,
}
impl JobKind for Charge {
    const KIND: &'static str = "charge";
}

#[derive(Serialize, Deserialize)]
struct Reserve {
    order: u64,
    sku: String,
}
impl JobKind for Reserve {
    const KIND: &'static str = "reserve";
}

#[derive(Serialize, Deserialize)]
struct Email {
    order: u64,
}
impl JobKind for Email {
    const KIND: &'static str = "email";
}

#[derive(Serialize, Deserialize)]
struct Ship {
    order: u64,
}
impl JobKind for Ship {
    const KIND: &'static str = "ship";
}

/// What the web handler does: one flow per order, added in one call.
async fn place_order(queue: &Queue, order: u64) -> echomq::Result<echomq::Flow> {
    queue
        .add_flow(
            &FlowSpec::new()
                .id(format!("order-{order}"))
                .step(Step::job("charge", &Charge { order, cents: 4_200 })?)
                .step(Step::job(
                    "reserve",
                    &Reserve {
                        order,
                        sku: "mug".into(),
                    },
                )?)
                .step(Step::job("email", &Email { order })?.after("charge").after("reserve"))
                .step(Step::job("ship", &Ship { order })?.after("email")),
        )
        .await
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt().with_env_filter("echomq=info").init();
    let (url, _server) = echomq::server::url_from_env_or_start()?;
    let queue = Queue::connect(&url, "orders").await?;

    let router = Kinds::new()
        .kind::<Charge>(|job: Job<Charge>| async move {
            println!("charge  order {}: {} cents", job.payload().order, job.payload().cents);
            Ok::<_, HandlerError>(format!("receipt-{}", job.payload().order))
        })
        .kind::<Reserve>(|job: Job<Reserve>| async move {
            println!("reserve order {}: one {}", job.payload().order, job.payload().sku);
            Ok::<_, HandlerError>(format!("bin-{}", job.payload().order % 10))
        })
        .kind::<Email>(|job: Job<Email>| async move {
            // runs only once both children completed; reads their results
            for child in job.child_results::<Value>().await? {
                if let ChildOutcome::Completed(result) = child.outcome {
                    println!("email   order {}: {} gave {result}", job.payload().order, child.name);
                }
            }
            Ok::<_, HandlerError>(())
        })
        .kind::<Ship>(|job: Job<Ship>| async move {
            println!("ship    order {}", job.payload().order);
            Ok::<_, HandlerError>(())
        })
        .build()?;
    let worker = Consumer::new(queue.clone(), router).concurrency(4).spawn()?;

    let flow = place_order(&queue, 7).await?;
    // Poll the flow's status until every step ended (a dashboard would).
    let status = loop {
        let status = flow.status().await?;
        if status.is_ended() {
            break status;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    for step in &status.steps {
        println!("{:<8} {:?}", step.name, step.state);
    }
    assert_eq!(status.count(StepState::Completed), 4);
    worker.shutdown().await?;
    Ok(())
}
