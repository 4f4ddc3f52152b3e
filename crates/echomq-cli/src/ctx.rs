//! What every command works with: the connected client, the prefix, the
//! queue it was given, and what it hands back to be printed.

use echomq::{Client, ClientOptions, Queue, QueueOptions};
use serde_json::Value;

use crate::exit::{Failure, Url};

/// A command's result: its JSON document, its text for people, its exit code.
#[derive(Debug)]
pub struct Output {
    /// What `--json` prints.
    pub json: Value,
    /// What is printed otherwise.
    pub text: String,
    /// The exit code ([`crate::exit`]).
    pub code: u8,
    /// True when the command printed as it went (`watch`): nothing is
    /// left to print.
    pub streamed: bool,
}

impl Output {
    /// A result that exits 0.
    pub fn ok(json: Value, text: String) -> Output {
        Output {
            json,
            text,
            code: crate::exit::OK,
            streamed: false,
        }
    }

    /// A result already printed, exiting 0.
    pub fn streamed() -> Output {
        Output {
            json: Value::Null,
            text: String::new(),
            code: crate::exit::OK,
            streamed: true,
        }
    }
}

/// The connection and the names a command works on.
pub struct Ctx {
    /// The shared connection.
    pub client: Client,
    /// The server's URL, for messages.
    pub url: Url,
    /// The key prefix.
    pub prefix: String,
    /// The queue given with `-q`, if any.
    pub queue: Option<String>,
}

impl Ctx {
    /// Connects to `url`. The server self-check runs but does not refuse
    /// an evicting server: the operator may be here to find that out
    /// (`doctor` reports it).
    ///
    /// # Errors
    /// A [`Failure`] with exit code 3.
    pub async fn connect(url: Url, prefix: String, queue: Option<String>) -> Result<Ctx, Failure> {
        let opts = ClientOptions::new().allow_eviction(true);
        let client = Client::connect_with(&url.raw, opts)
            .await
            .map_err(|e| Failure::connect(&url, &e))?;
        Ok(Ctx {
            client,
            url,
            prefix,
            queue,
        })
    }

    /// A failure from a library error (exit 3 for a lost connection, else 1).
    pub fn err(&self, e: echomq::Error) -> Failure {
        Failure::from_error(&self.url, &e)
    }

    /// The queue given with `-q` (the command line checked it is there).
    pub fn queue_name(&self) -> &str {
        self.queue.as_deref().unwrap_or_default()
    }

    /// Opens queue `name` if it exists: a name that is on the server under
    /// no key is a failure, never a new queue (opening stamps one).
    ///
    /// # Errors
    /// A [`Failure`]: no such queue, or the library's error.
    pub async fn open(&self, name: &str) -> Result<Queue, Failure> {
        self.require(name).await?;
        self.client
            .queue_with(name, QueueOptions::new().prefix(self.prefix.as_str()))
            .await
            .map_err(|e| self.err(e))
    }

    /// Fails unless queue `name` has a key on the server.
    async fn require(&self, name: &str) -> Result<(), Failure> {
        let exists = self
            .client
            .queue_exists(&self.prefix, name)
            .await
            .map_err(|e| self.err(e))?;
        if exists {
            return Ok(());
        }
        Err(Failure::failed(format!(
            "no queue {name:?} under prefix {:?} on {} (`echomq stats` lists the queues)",
            self.prefix,
            self.url.shown()
        )))
    }

    /// Opens the queue given with `-q`.
    ///
    /// # Errors
    /// As [`open`](Self::open).
    pub async fn open_given(&self) -> Result<Queue, Failure> {
        self.open(self.queue_name()).await
    }

    /// The queue given with `-q` (if it exists), or every queue on the server.
    ///
    /// # Errors
    /// A [`Failure`]: no such queue, or the library's error.
    pub async fn queue_names(&self) -> Result<Vec<String>, Failure> {
        match &self.queue {
            Some(name) => {
                self.require(name).await?;
                Ok(vec![name.clone()])
            }
            None => self.client.queue_names(&self.prefix).await.map_err(|e| self.err(e)),
        }
    }

    /// The message for "no queue at all".
    pub fn no_queues(&self) -> String {
        format!("no queues under prefix {:?} on {}\n", self.prefix, self.url.shown())
    }
}

/// `text` quoted for a POSIX shell when it needs it.
pub fn shell_quote(text: &str) -> String {
    let plain = !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.:/@%+=,".contains(c));
    if plain {
        text.to_owned()
    } else {
        format!("'{}'", text.replace('\'', "'\\''"))
    }
}
