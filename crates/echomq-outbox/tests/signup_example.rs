//! The signup example, end to end: its self-test (two signups over HTTP,
//! a duplicate refused, two welcome emails sent through the outbox, the
//! relay and a worker) against private Postgres and Valkey servers.

#[allow(dead_code)]
#[path = "../examples/signup.rs"]
mod signup;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_signup_example_passes_its_self_test() {
    signup::run(true).await.expect("the example's self-test");
}
