//! The crate's one error type.

/// What can go wrong in the outbox and its relay.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An option or argument out of its range (`name` says which).
    #[error("invalid {name}: {reason}")]
    InvalidOption {
        /// The option or argument.
        name: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// The payload could not be encoded as JSON.
    #[error("could not encode the payload as JSON: {0}")]
    Encode(#[source] serde_json::Error),
    /// Postgres refused or failed a statement, or could not be reached.
    #[error("postgres: {0}")]
    Database(#[from] sqlx::Error),
    /// The crate's migrations could not be applied.
    #[error("outbox migration: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// echomq refused or failed an enqueue, or Valkey could not be reached.
    #[error("echomq: {0}")]
    Queue(#[from] echomq::Error),
    /// A relay batch took longer than
    /// [`RelayOptions::batch_timeout`](crate::RelayOptions::batch_timeout);
    /// its rows stay in the outbox for the next batch.
    #[error("relay batch timed out after {0:?}")]
    Timeout(std::time::Duration),
}

impl Error {
    /// True when the same call may succeed later: Postgres or Valkey
    /// unreachable or restarting, a timeout, a shortfall of the queue's
    /// durability. A relay keeps the rows of such a batch and tries again.
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Queue(e) => e.is_transient(),
            Error::Database(e) => {
                matches!(
                    e,
                    sqlx::Error::Io(_)
                        | sqlx::Error::PoolTimedOut
                        | sqlx::Error::PoolClosed
                        | sqlx::Error::WorkerCrashed
                        | sqlx::Error::Tls(_)
                        | sqlx::Error::Protocol(_)
                ) || e
                    .as_database_error()
                    .and_then(|d| d.code())
                    // Class 08 (connection), 57P (operator intervention: a
                    // shutdown or restart), 40001/40P01 (serialization, deadlock),
                    // 25P03 (idle-in-transaction timeout).
                    .is_some_and(|c| {
                        c.starts_with("08") || c.starts_with("57P") || c == "40001" || c == "40P01" || c == "25P03"
                    })
            }
            Error::Timeout(_) => true,
            _ => false,
        }
    }
}

/// The crate's result type.
pub type Result<T = (), E = Error> = std::result::Result<T, E>;
