//! Test certificates made with the openssl CLI: a CA and leaf certificates signed by it, as
//! docker-machine's store and a machine's TLS Engine endpoint use them.

use std::path::Path;
use std::process::Command;

/// Runs `openssl ARGS` in `dir`; panics with its stderr when it fails.
pub fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run openssl");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Makes the key `key` and the certificate `cert` in `dir`, signed by the CA `ca` (`<ca>.pem` and
/// `<ca>-key.pem` in `dir`), with the OpenSSL extension lines `ext`.
pub fn leaf(dir: &Path, ca: &str, key: &str, cert: &str, ext: &str) {
    std::fs::write(dir.join("ext.cnf"), ext).expect("ext");
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            key,
            "-out",
            "leaf.csr",
            "-subj",
            "/O=drover-test",
        ],
    );
    let (ca_cert, ca_key) = (format!("{ca}.pem"), format!("{ca}-key.pem"));
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "leaf.csr",
            "-CA",
            &ca_cert,
            "-CAkey",
            &ca_key,
            "-CAcreateserial",
            "-out",
            cert,
            "-days",
            "2",
            "-extfile",
            "ext.cnf",
        ],
    );
}

/// Makes a self-signed CA `<name>.pem` / `<name>-key.pem` in `dir`.
pub fn make_ca(dir: &Path, name: &str) {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            &format!("{name}-key.pem"),
            "-out",
            &format!("{name}.pem"),
            "-days",
            "2",
            "-subj",
            &format!("/O={name}"),
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ],
    );
}

/// What a docker-machine TLS machine needs: in `store_certs` the store's CA and the client
/// certificate (what docker-machine bootstraps), in `tls` a copy of that CA and the server
/// certificate the machine's Engine presents (SAN 127.0.0.1).
/// A CA named `ca` and a server certificate for `localhost` and 127.0.0.1 signed by it, in
/// `dir`: (`server.pem`, `server-key.pem`), as an HTTPS server under test presents them.
#[allow(dead_code)] // only the GitLab TLS tests serve HTTPS
pub fn localhost_server(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    make_ca(dir, "ca");
    leaf(
        dir,
        "ca",
        "server-key.pem",
        "server.pem",
        "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n",
    );
    (dir.join("server.pem"), dir.join("server-key.pem"))
}

#[allow(dead_code)] // not every test binary that includes this module makes machines
pub fn machine_tls(store_certs: &Path, tls: &Path) {
    std::fs::create_dir_all(store_certs).expect("mkdir certs");
    make_ca(store_certs, "ca");
    leaf(
        store_certs,
        "ca",
        "key.pem",
        "cert.pem",
        "extendedKeyUsage=clientAuth\nbasicConstraints=CA:FALSE\n",
    );
    std::fs::create_dir_all(tls).expect("mkdir");
    for f in ["ca.pem", "ca-key.pem"] {
        std::fs::copy(store_certs.join(f), tls.join(f)).expect("copy");
    }
    leaf(
        tls,
        "ca",
        "server-key.pem",
        "server.pem",
        "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n",
    );
}

/// A child process killed (and reaped) when dropped.
#[allow(dead_code)]
pub struct Killed(pub std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The stunnel executable (`stunnel4` or `stunnel`), if installed.
#[allow(dead_code)]
pub fn stunnel_binary() -> Option<&'static str> {
    ["stunnel4", "stunnel"].into_iter().find(|b| {
        Command::new("which")
            .arg(b)
            .stdout(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })
}

/// A machine's TLS Engine endpoint: `stunnel` on a free 127.0.0.1 port, presenting
/// `tls/server.pem` and requiring a client certificate from `tls/ca.pem` (as made by
/// [`machine_tls`]), in front of the Engine's unix `socket`. Returns once it listens.
#[allow(dead_code)]
pub async fn stunnel_front(stunnel: &str, tls: &Path, socket: &str) -> (Killed, u16) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port");
    let conf = tls.join("stunnel.conf");
    std::fs::write(
        &conf,
        format!(
            "foreground = yes\npid =\noutput = {log}\n[docker]\naccept = 127.0.0.1:{port}\nconnect = {socket}\ncert = {d}/server.pem\nkey = {d}/server-key.pem\nCAfile = {d}/ca.pem\nrequireCert = yes\nverifyChain = yes\n",
            log = tls.join("stunnel.log").display(),
            d = tls.display(),
        ),
    )
    .expect("stunnel.conf");
    let proxy = Killed(
        Command::new(stunnel)
            .arg(&conf)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start stunnel"),
    );
    let start = std::time::Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(15),
            "stunnel did not listen"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    (proxy, port)
}
