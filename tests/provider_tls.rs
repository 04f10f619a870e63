//! End to end on the real Docker Engine, over TLS with client certificates as real
//! docker-machine endpoints require: stunnel (requiring a client cert signed by the test CA)
//! fronts /var/run/docker.sock on 127.0.0.1; a machine is created through the shim against
//! the fake docker-machine with that endpoint and the certs in its StorePath; its credentials
//! come through the protocol; bollard connects with them (and is refused with a stranger's
//! client cert), runs a container from a locally built image, and the machine is removed.
//! Fails (never skips) when Docker or stunnel is missing while `CI` is set.

mod docker_engine;
mod provider_support;
mod test_certs;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use bollard::query_parameters::{
    CreateContainerOptionsBuilder, CreateImageOptionsBuilder, LogsOptionsBuilder,
    RemoveContainerOptionsBuilder,
};
use bollard::{Docker, API_DEFAULT_VERSION};
use docker_engine::SOCKET;
use drover::provider::plugin::Plugin;
use drover::provider::protocol::CreateParams;
use drover::provider::{Call, Endpoint, Provider};
use futures_util::StreamExt;
use provider_support::*;
use serde_json::json;
use test_certs::{leaf, machine_tls, make_ca, stunnel_binary, stunnel_front};

const IMAGE: &str = "drover-test-provider-busybox";

fn unavailable(what: &str) {
    if std::env::var_os("CI").is_some() {
        panic!("{what} (CI is set: this test must run; see fixtures/setup/provider.sh)");
    }
    eprintln!("skipping: {what}");
}

async fn local_docker() -> Option<Docker> {
    if !docker_engine::engine_available() {
        return None;
    }
    let d = Docker::connect_with_socket(docker_engine::SOCKET, 30, API_DEFAULT_VERSION).ok()?;
    d.ping().await.ok().map(|_| d)
}

/// Builds the test image from the host's static busybox, never pulling.
async fn ensure_image(docker: &Docker) {
    if docker
        .inspect_image(&format!("{IMAGE}:latest"))
        .await
        .is_ok()
    {
        return;
    }
    let busybox = ["/bin/busybox", "/usr/bin/busybox"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .expect("busybox-static is installed (fixtures/setup/provider.sh)");
    let root = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir_all(root.path().join("bin")).expect("mkdir");
    std::fs::copy(&busybox, root.path().join("bin/busybox")).expect("copy busybox");
    std::os::unix::fs::symlink("busybox", root.path().join("bin/sh")).expect("symlink");
    let tar = Command::new("tar")
        .args(["-C"])
        .arg(root.path())
        .args(["-cf", "-", "."])
        .output()
        .expect("tar");
    assert!(tar.status.success());
    let opts = CreateImageOptionsBuilder::new()
        .from_src("-")
        .repo(IMAGE)
        .tag("latest")
        .build();
    let mut s = docker.create_image(
        Some(opts),
        Some(bollard::body_full(tar.stdout.into())),
        None,
    );
    while let Some(r) = s.next().await {
        r.expect("docker import");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_machine_end_to_end_on_the_real_engine() {
    let Some(local) = local_docker().await else {
        return unavailable("Docker Engine unreachable at /var/run/docker.sock");
    };
    let Some(stunnel) = stunnel_binary() else {
        return unavailable("stunnel4 is not installed");
    };
    let world = FakeWorld::new();
    let certs = world.store().join("certs");
    let tls = world.dir.path().join("tls");
    // The store's CA and client cert (what docker-machine bootstraps), and the server cert
    // the machine's Engine presents (what provisioning installs), SAN 127.0.0.1.
    machine_tls(&certs, &tls);
    // A stranger: a client cert from another CA, which the endpoint must refuse.
    make_ca(&tls, "rogue");
    leaf(
        &tls,
        "rogue",
        "rogue-client-key.pem",
        "rogue-client.pem",
        "extendedKeyUsage=clientAuth\n",
    );

    let (_proxy, port) = stunnel_front(stunnel, &tls, SOCKET).await;

    // The machine: created through the shim; the fake copies the certs into its StorePath
    // as provisioning does.
    world.set_faults(json!({"copy_certs": true}));
    let p = Plugin::new(world.shim(&[]));
    let suffix = format!("{:08x}", rand::random::<u32>());
    let name = format!("drover-test-provider-tls-{suffix}");
    let url = format!("tcp://127.0.0.1:{port}");
    p.create(
        &CreateParams {
            name: name.clone(),
            driver: "none".into(),
            options: vec![format!("url={url}")],
            options_with_name: vec![],
        },
        &Call::new(),
    )
    .await
    .expect("create");
    assert!(p.exists(&name, &Call::new()).await.expect("exists"));
    assert!(
        p.can_connect(&name, &Call::new())
            .await
            .expect("can_connect"),
        "docker-machine config's TLS check through stunnel"
    );
    let Endpoint::TcpTls {
        host,
        cert_dir,
        tls_verify,
    } = p
        .credentials(&name, &Call::new())
        .await
        .expect("credentials")
    else {
        panic!("expected a TLS endpoint");
    };
    assert_eq!(host, url);
    assert!(tls_verify);
    let cert_dir = PathBuf::from(cert_dir);
    assert_eq!(cert_dir, world.machine_dir(&name));

    // A stranger's client certificate is refused by the endpoint.
    let rogue = Docker::connect_with_ssl(
        &host,
        &tls.join("rogue-client-key.pem"),
        &tls.join("rogue-client.pem"),
        &cert_dir.join("ca.pem"),
        20,
        API_DEFAULT_VERSION,
    )
    .expect("client");
    assert!(
        rogue.ping().await.is_err(),
        "the endpoint accepted a foreign client cert"
    );

    let docker = Docker::connect_with_ssl(
        &host,
        &cert_dir.join("key.pem"),
        &cert_dir.join("cert.pem"),
        &cert_dir.join("ca.pem"),
        120,
        API_DEFAULT_VERSION,
    )
    .expect("TLS client");
    docker.ping().await.expect("ping over TLS");
    ensure_image(&docker).await;
    let cname = format!("drover-test-provider-tls-{suffix}");
    let body = bollard::models::ContainerCreateBody {
        image: Some(format!("{IMAGE}:latest")),
        cmd: Some(vec![
            "/bin/busybox".into(),
            "echo".into(),
            format!("hello from {name}"),
        ]),
        ..Default::default()
    };
    docker
        .create_container(
            Some(CreateContainerOptionsBuilder::new().name(&cname).build()),
            body,
        )
        .await
        .expect("create container");
    let run = async {
        docker
            .start_container(
                &cname,
                None::<bollard::query_parameters::StartContainerOptions>,
            )
            .await?;
        let mut wait = docker.wait_container(
            &cname,
            None::<bollard::query_parameters::WaitContainerOptions>,
        );
        while let Some(w) = wait.next().await {
            w?;
        }
        let mut logs = docker.logs(
            &cname,
            Some(LogsOptionsBuilder::new().stdout(true).stderr(true).build()),
        );
        let mut text = String::new();
        while let Some(l) = logs.next().await {
            text.push_str(&l?.to_string());
        }
        Ok::<_, bollard::errors::Error>(text)
    };
    let outcome = run.await;
    let _ = local
        .remove_container(
            &cname,
            Some(RemoveContainerOptionsBuilder::new().force(true).build()),
        )
        .await;
    let text = outcome.expect("run the container over TLS");
    assert_eq!(text.trim(), format!("hello from {name}"));

    assert!(p.remove(&name, &Call::new()).await.expect("remove").existed);
    assert!(!p.exists(&name, &Call::new()).await.expect("exists"));
    assert!(!world.machine_dir(&name).exists());
    p.shutdown(Duration::from_secs(5)).await;
}
