//! A server inside a network namespace this process creates, reached over
//! a veth pair, so a test can partition it with iptables without touching
//! the host's loopback (where other servers live). Needs root, `ip` and
//! `iptables`; [`NetNs::create`] says why when it cannot be had.
//!
//! Everything it creates is named after this process id and removed on drop.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The server's port inside the namespace.
const PORT: u16 = 6501;

/// A namespace with a server in it.
pub struct NetNs {
    name: String,
    host_if: String,
    ns_addr: String,
    server: Option<Child>,
    dir: PathBuf,
    partitioned: bool,
}

fn run(args: &[&str]) -> Result<(), String> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{}: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl NetNs {
    /// Creates the namespace and the veth pair, or says why it cannot.
    pub fn create() -> Result<NetNs, String> {
        let uid = Command::new("id").arg("-u").output().map_err(|e| e.to_string())?;
        if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
            return Err("not root".into());
        }
        for tool in ["ip", "iptables"] {
            let found = Command::new("sh")
                .args(["-c", &format!("command -v {tool}")])
                .stdout(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if !found {
                return Err(format!(
                    "{tool} not installed (scripts/test installs iproute2 and iptables)"
                ));
            }
        }
        let pid = std::process::id();
        let k = pid % 16_000;
        let (third, fourth) = (k / 64, (k % 64) * 4);
        let name = format!("emqf{pid}");
        let host_if = format!("emqh{}", pid % 10_000_000);
        let ns_if = format!("emqn{}", pid % 10_000_000);
        let host_addr = format!("10.213.{third}.{}", fourth + 1);
        let ns_addr = format!("10.213.{third}.{}", fourth + 2);
        let dir = std::env::temp_dir().join(format!("echomq-netns-{pid}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let ns = NetNs {
            name: name.clone(),
            host_if: host_if.clone(),
            ns_addr: ns_addr.clone(),
            server: None,
            dir,
            partitioned: false,
        };
        run(&["ip", "netns", "add", &name])?;
        run(&["ip", "link", "add", &host_if, "type", "veth", "peer", "name", &ns_if])?;
        run(&["ip", "link", "set", &ns_if, "netns", &name])?;
        run(&["ip", "addr", "add", &format!("{host_addr}/30"), "dev", &host_if])?;
        run(&["ip", "link", "set", &host_if, "up"])?;
        run(&[
            "ip",
            "netns",
            "exec",
            &name,
            "ip",
            "addr",
            "add",
            &format!("{ns_addr}/30"),
            "dev",
            &ns_if,
        ])?;
        run(&["ip", "netns", "exec", &name, "ip", "link", "set", &ns_if, "up"])?;
        run(&["ip", "netns", "exec", &name, "ip", "link", "set", "lo", "up"])?;
        run(&["ip", "netns", "exec", &name, "iptables", "-L", "-n"])?;
        Ok(ns)
    }

    /// Starts `binary` (valkey-server / redis-server) inside the namespace
    /// and waits until it answers from the host side.
    pub fn start_server(&mut self, binary: &Path, extra: &[&str]) -> Result<(), String> {
        let log = self.dir.join("server.log");
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.name])
            .arg(binary)
            .args(["--bind", &self.ns_addr, "--port", &PORT.to_string()])
            .args(["--protected-mode", "no", "--save", "", "--appendonly", "no"])
            .args(["--maxmemory-policy", "noeviction", "--daemonize", "no"])
            .arg("--dir")
            .arg(&self.dir)
            .arg("--logfile")
            .arg(&log)
            .args(extra)
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        self.server = Some(cmd.spawn().map_err(|e| format!("spawn the server: {e}"))?);
        let client = redis::Client::open(self.url()).map_err(|e| e.to_string())?;
        let until = Instant::now() + Duration::from_secs(10);
        while Instant::now() < until {
            if let Ok(mut c) = client.get_connection_with_timeout(Duration::from_millis(300))
                && redis::cmd("PING").query::<String>(&mut c).is_ok()
            {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err(format!(
            "the server in namespace {} did not answer: {}",
            self.name,
            std::fs::read_to_string(&log).unwrap_or_default()
        ))
    }

    /// The URL from the host side.
    pub fn url(&self) -> String {
        format!("redis://{}:{PORT}/", self.ns_addr)
    }

    fn rule(&self, op: &str) -> Result<(), String> {
        run(&[
            "ip",
            "netns",
            "exec",
            &self.name,
            "iptables",
            op,
            "INPUT",
            "-p",
            "tcp",
            "--dport",
            &PORT.to_string(),
            "-j",
            "DROP",
        ])
    }

    /// Blackholes the server: every packet to its port is dropped.
    pub fn partition(&mut self) -> Result<(), String> {
        self.rule("-A")?;
        self.partitioned = true;
        Ok(())
    }

    /// Removes the blackhole.
    pub fn heal(&mut self) -> Result<(), String> {
        self.rule("-D")?;
        self.partitioned = false;
        Ok(())
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        if self.partitioned {
            let _ = self.heal();
        }
        if let Some(mut c) = self.server.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = run(&["ip", "netns", "del", &self.name]);
        let _ = run(&["ip", "link", "del", &self.host_if]);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
