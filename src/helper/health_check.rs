//! `health-check`: waits until a service accepts a TCP connection.
//!
//! As upstream's helper: the address comes from the environment variable ending in `_TCP_ADDR`
//! (the executor sets `WAIT_FOR_SERVICE_TCP_ADDR`), the ports from every variable ending in
//! `_TCP_PORT` (or from `--port`). Each port is dialled in parallel, once a second with a
//! one-second connect timeout, and the command succeeds as soon as **one** port accepts. It
//! never gives up on its own: the executor bounds it with `wait_for_services_timeout` and
//! removes the container. No address or no port is an error (exit 1).

use std::net::{TcpStream, ToSocketAddrs};
use std::sync::mpsc;
use std::time::Duration;

/// What to probe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// Host name or IP.
    pub addr: String,
    /// Ports, in the order found.
    pub ports: Vec<String>,
}

/// Errors of the health check.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum HealthCheckError {
    /// Nothing to probe.
    #[error("No HOST or PORT found")]
    NoTarget,
}

/// The target from `KEY=VALUE` environment pairs plus `--port` values (which replace the
/// environment's ports when given).
pub fn target_from_env<I>(env: I, ports_flag: &[String]) -> Result<Target, HealthCheckError>
where
    I: IntoIterator<Item = (String, String)>,
{
    let mut addr = String::new();
    let mut ports = Vec::new();
    for (k, v) in env {
        if k.ends_with("_TCP_ADDR") {
            addr = v;
        } else if k.ends_with("_TCP_PORT") {
            ports.push(v);
        }
    }
    if !ports_flag.is_empty() {
        ports = ports_flag.to_vec();
    }
    if addr.is_empty() || ports.is_empty() {
        return Err(HealthCheckError::NoTarget);
    }
    Ok(Target { addr, ports })
}

fn try_connect(host_port: &str) -> bool {
    let Ok(addrs) = host_port.to_socket_addrs() else {
        return false;
    };
    addrs
        .into_iter()
        .any(|a| TcpStream::connect_timeout(&a, Duration::from_secs(1)).is_ok())
}

/// Dials every port until one accepts; prints `waiting for TCP connection to <addr:port>...`
/// per port on `out`. Returns the port that answered.
pub fn wait(target: &Target, out: &mut dyn std::io::Write) -> String {
    let (tx, rx) = mpsc::channel();
    for port in &target.ports {
        let host_port = format!("{}:{port}", target.addr);
        let _ = writeln!(out, "waiting for TCP connection to {host_port}...");
        let tx = tx.clone();
        let port = port.clone();
        std::thread::spawn(move || loop {
            if try_connect(&host_port) {
                let _ = tx.send(port);
                return;
            }
            std::thread::sleep(Duration::from_secs(1));
        });
    }
    drop(tx);
    // Only ends when a port answers (the threads never stop otherwise).
    rx.recv().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn target_needs_an_address_and_a_port() {
        let t = target_from_env(
            env(&[
                ("WAIT_FOR_SERVICE_TCP_ADDR", "abc"),
                ("WAIT_FOR_SERVICE_80_TCP_PORT", "80"),
                ("WAIT_FOR_SERVICE_8080_TCP_PORT", "8080"),
                ("PATH", "/bin"),
            ]),
            &[],
        )
        .unwrap();
        assert_eq!(t.addr, "abc");
        assert_eq!(t.ports, vec!["80", "8080"]);
        assert_eq!(
            target_from_env(env(&[("WAIT_FOR_SERVICE_TCP_ADDR", "abc")]), &[]),
            Err(HealthCheckError::NoTarget)
        );
        let t = target_from_env(env(&[("X_TCP_ADDR", "h")]), &["5432".into()]).unwrap();
        assert_eq!(t.ports, vec!["5432"]);
    }

    #[test]
    fn first_open_port_wins() {
        let open = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let open_port = open.local_addr().unwrap().port().to_string();
        // A port nobody listens on: bind, read the number, close.
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let closed_port = closed.local_addr().unwrap().port().to_string();
        drop(closed);
        let target = Target {
            addr: "127.0.0.1".into(),
            ports: vec![closed_port, open_port.clone()],
        };
        let mut out = Vec::new();
        assert_eq!(wait(&target, &mut out), open_port);
        let out = String::from_utf8(out).unwrap();
        assert!(out.contains(&format!(
            "waiting for TCP connection to 127.0.0.1:{open_port}..."
        )));
    }
}
