//! The GitLab simulator as a process, for soak harnesses: serves until killed and prints its
//! URL on the first line of stdout. Drive it through `/_sim/…` (see the library docs).
//!
//! Usage: `gitlab-sim [--listen ADDR] [--runner-token TOKEN]… [--registration-token TOKEN]…
//! [--tls-cert PEM --tls-key PEM]`

use std::net::SocketAddr;

fn usage(message: &str) -> ! {
    eprintln!("gitlab-sim: {message}");
    eprintln!(
        "usage: gitlab-sim [--listen ADDR] [--runner-token T]... [--registration-token T]... [--tls-cert PEM --tls-key PEM]"
    );
    std::process::exit(2);
}

#[tokio::main]
async fn main() {
    let mut listen: SocketAddr = "127.0.0.1:0".parse().expect("literal address");
    let (mut runners, mut registration, mut cert, mut key) = (vec![], vec![], None, None);
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || {
            args.next()
                .unwrap_or_else(|| usage(&format!("{arg} needs a value")))
        };
        match arg.as_str() {
            "--listen" => {
                listen = value()
                    .parse()
                    .unwrap_or_else(|e| usage(&format!("--listen: {e}")))
            }
            "--runner-token" => runners.push(value()),
            "--registration-token" => registration.push(value()),
            "--tls-cert" => cert = Some(value()),
            "--tls-key" => key = Some(value()),
            other => usage(&format!("unknown argument {other}")),
        }
    }
    let tls = match (cert, key) {
        (Some(cert), Some(key)) => Some(gitlab_sim::TlsFiles {
            cert: cert.into(),
            key: key.into(),
        }),
        (None, None) => None,
        _ => usage("--tls-cert and --tls-key go together"),
    };
    let sim = match gitlab_sim::Sim::start_on(listen, tls).await {
        Ok(sim) => sim,
        Err(e) => {
            eprintln!("gitlab-sim: cannot start: {e}");
            std::process::exit(1);
        }
    };
    for t in &runners {
        sim.add_runner(t);
    }
    for t in &registration {
        sim.add_registration_token(t);
    }
    println!("{}", sim.url());
    let _ = tokio::signal::ctrl_c().await;
}
