//! Process faults a test injects: kill (`SIGKILL`), restart on the same
//! port and directory (so an append-only file is replayed), pause and
//! resume (`SIGSTOP` / `SIGCONT`).

use std::fs;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::error::ServerError;
use super::process::{Attempt, LocalServer, START_ATTEMPTS};

impl LocalServer {
    /// Kills the server with `SIGKILL` (even while paused) and reaps it.
    /// Does nothing if it is not running.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Kills the server if it is running, then starts it again on the same
    /// port and directory (so an append-only file is replayed) and waits
    /// until it answers `PING` (after loading its data).
    ///
    /// If the new process exits at once (another process grabbed the port
    /// in between), it is retried a few times on the same port.
    pub fn restart(&mut self) -> Result<(), ServerError> {
        self.kill();
        let mut last_failure = String::new();
        for attempt in 1..=START_ATTEMPTS {
            if attempt > 1 {
                std::thread::sleep(Duration::from_millis(100 * u64::from(attempt)));
            }
            match self.spawn_and_wait()? {
                Attempt::Ready => return Ok(()),
                Attempt::TimedOut(why) => return Err(ServerError::NotReady(why)),
                Attempt::Retry(why) => last_failure = why,
            }
        }
        Err(ServerError::NotReady(format!(
            "restart on port {} gave up after {START_ATTEMPTS} attempts; last: {last_failure}",
            self.port
        )))
    }

    /// Pauses the server with `SIGSTOP`: it keeps its connections (the
    /// kernel even accepts new ones) but answers nothing until
    /// [`resume`](Self::resume). Does nothing if it is not running.
    ///
    /// On Linux it returns once the process is seen stopped (up to 1 s).
    pub fn pause(&self) {
        self.signal("STOP");
        self.await_stopped(true);
    }

    /// Resumes a paused server with `SIGCONT`. Does nothing if it is not
    /// running. On Linux it returns once the process is seen running again
    /// (up to 1 s).
    pub fn resume(&self) {
        self.signal("CONT");
        self.await_stopped(false);
    }

    /// Polls `/proc/PID/stat` until the process is (or is no longer) in
    /// the stopped state `T`, so callers never race the signal's delivery.
    /// Gives up silently after 1 s or where `/proc` is unavailable.
    fn await_stopped(&self, stopped: bool) {
        let Some(pid) = self.pid() else { return };
        let path = format!("/proc/{pid}/stat");
        let deadline = Instant::now() + Duration::from_secs(1);
        while Instant::now() < deadline {
            let Ok(stat) = fs::read_to_string(&path) else {
                return;
            };
            // The state follows the parenthesised command name.
            let state = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next());
            match state {
                Some(s) => {
                    if (s == "T") == stopped {
                        return;
                    }
                }
                None => return,
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Whether the server process is alive (a paused server is). Reaps the
    /// process if it has exited, after which [`pid`](Self::pid) is `None`.
    pub fn is_running(&mut self) -> bool {
        let alive = match self.child.as_mut() {
            None => return false,
            Some(child) => matches!(child.try_wait(), Ok(None)),
        };
        if !alive {
            self.child = None;
        }
        alive
    }

    /// Sends a signal by name with the `kill` command (no `libc` here). The
    /// child is never reaped behind our back, so its pid cannot be reused.
    fn signal(&self, name: &str) {
        let Some(child) = &self.child else { return };
        let pid = child.id().to_string();
        let quiet = |cmd: &mut Command| {
            cmd.stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
        };
        let sent = quiet(Command::new("kill").args(["-s", name, &pid]));
        if !matches!(sent, Ok(status) if status.success()) {
            // No `kill` binary on PATH: fall back to the shell's builtin.
            let _ = quiet(Command::new("sh").args(["-c", "kill -s \"$0\" \"$1\"", name, &pid]));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io;

    use super::super::resp::{ping, roundtrip, send};
    use super::*;

    #[test]
    fn aof_write_survives_kill_and_restart() {
        let mut server = LocalServer::builder().aof(true).appendfsync("always").start().unwrap();
        let port = server.port();
        assert_eq!(send(&server, b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n"), "+OK\r\n");
        server.kill();
        assert_eq!(server.pid(), None);
        assert!(!server.is_running());
        assert!(roundtrip(port, b"*1\r\n$4\r\nPING\r\n", Duration::from_secs(1)).is_err());
        server.kill(); // no-op while stopped
        server.restart().unwrap();
        assert_eq!(server.port(), port);
        assert!(server.is_running());
        assert_eq!(send(&server, b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"), "$1\r\nv\r\n");
        // Restarting a running server works too.
        let old_pid = server.pid();
        server.restart().unwrap();
        assert_ne!(server.pid(), old_pid);
        assert_eq!(send(&server, b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"), "$1\r\nv\r\n");
    }

    #[test]
    fn without_aof_restart_starts_empty() {
        let mut server = LocalServer::start().unwrap();
        assert_eq!(send(&server, b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n"), "+OK\r\n");
        server.restart().unwrap();
        assert_eq!(send(&server, b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"), "$-1\r\n");
    }

    #[test]
    fn pause_and_resume() {
        let mut server = LocalServer::start().unwrap();
        server.pause();
        let err = roundtrip(server.port(), b"*1\r\n$4\r\nPING\r\n", Duration::from_millis(300)).unwrap_err();
        assert!(
            matches!(err.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut),
            "expected a timeout while paused, got {err:?}"
        );
        assert!(server.is_running(), "a paused server is still running");
        server.resume();
        assert_eq!(ping(&server), "+PONG\r\n");
    }

    #[test]
    fn kill_while_paused() {
        let mut server = LocalServer::start().unwrap();
        server.pause();
        server.kill();
        assert!(!server.is_running());
        server.restart().unwrap();
        assert_eq!(ping(&server), "+PONG\r\n");
    }
}
