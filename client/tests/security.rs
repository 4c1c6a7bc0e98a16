//! TLS and credentials end to end against Debian's redis-server (built with TLS) on a TLS
//! port, with certificates this test generates with the openssl CLI: the Rust transport and
//! `lease-run` connect over `rediss://` with a CA file and a client certificate (mutual TLS,
//! `tls-auth-clients yes`), a server certificate from another CA is refused with a clear
//! error, and `lease-run` takes the password from the environment or a file, never passing
//! it on to CMD. The ACL user is docs/security.md's elector recipe.
//!
//! The server also listens on a plain loopback port: the test guard uses it to see the server
//! is up; every connection under test goes to the TLS port.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use redis_lease_client::{ConnectOptions, RedisTransport, Transport};
use testsupport::{free_port, RedisServer, ServerOptions};

const BIN: &str = env!("CARGO_BIN_EXE_lease-run");
/// docs/security.md's elector recipe (same text as tests/acl.rs in the module crate).
const ELECTOR: &str = "resetkeys resetchannels -@all +lease.acquire +lease.renew +lease.release +lease.get +wait ~leases:*";

/// openssl is needed; outside CI a missing one skips the test with a reason, in CI it fails.
fn have_openssl() -> bool {
    let ok = Command::new("openssl")
        .arg("version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "openssl CLI missing in CI (scripts/setup installs it)"
        );
        eprintln!("SKIP: openssl CLI not found (run scripts/setup)");
    }
    ok
}

fn openssl(dir: &Path, args: &[&str]) {
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

/// A CA, and a leaf certificate signed by it (`usage`: serverAuth or clientAuth).
fn make_ca(dir: &Path, name: &str) {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.crt"),
            "-days",
            "2",
            "-subj",
            &format!("/CN={name}"),
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ],
    );
}

fn make_leaf(dir: &Path, ca: &str, name: &str, usage: &str) {
    let ext = dir.join(format!("{name}.ext"));
    std::fs::write(
        &ext,
        format!(
            "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n\
             extendedKeyUsage={usage}\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n"
        ),
    )
    .unwrap();
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.csr"),
            "-subj",
            &format!("/CN={name}"),
        ],
    );
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &format!("{name}.csr"),
            "-CA",
            &format!("{ca}.crt"),
            "-CAkey",
            &format!("{ca}.key"),
            "-CAcreateserial",
            "-out",
            &format!("{name}.crt"),
            "-days",
            "2",
            "-extfile",
            &format!("{name}.ext"),
        ],
    );
}

struct Tls {
    dir: tempfile::TempDir,
    server: RedisServer,
    tls_port: u16,
}

impl Tls {
    fn path(&self, f: &str) -> PathBuf {
        self.dir.path().join(f)
    }
    fn url(&self, user: &str) -> String {
        format!("rediss://{user}127.0.0.1:{}/", self.tls_port)
    }
    /// CA file and client certificate of the test PKI.
    fn opts(&self) -> ConnectOptions {
        ConnectOptions {
            ca_cert_file: Some(self.path("ca.crt")),
            cert_file: Some(self.path("client.crt")),
            key_file: Some(self.path("client.key")),
            ..Default::default()
        }
    }
}

/// Certificates (ca: signs server and client; other-ca: signs nothing here) and a TLS server
/// that requires client certificates, with the elector ACL user (password `elector-pw`).
fn tls_server() -> Option<Tls> {
    if !have_openssl() {
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    make_ca(dir.path(), "ca");
    make_ca(dir.path(), "other-ca");
    make_leaf(dir.path(), "ca", "server", "serverAuth");
    make_leaf(dir.path(), "ca", "client", "clientAuth");
    let (server, tls_port) = tls_server_in(dir.path(), ELECTOR);
    Some(Tls {
        dir,
        server,
        tls_port,
    })
}

/// A TLS server with the certificates in `dir` (made by `tls_server`'s steps) and the user
/// `elector` (password `elector-pw`) under `rules`.
fn tls_server_in(dir: &Path, rules: &str) -> (RedisServer, u16) {
    let tls_port = free_port();
    let p = |f: &str| dir.join(f).display().to_string();
    let opts = ServerOptions::default().extra_args(&[
        "--tls-port",
        &tls_port.to_string(),
        "--tls-cert-file",
        &p("server.crt"),
        "--tls-key-file",
        &p("server.key"),
        "--tls-ca-cert-file",
        &p("ca.crt"),
        "--tls-auth-clients",
        "yes",
    ]);
    // Debian's build has TLS; the newer server used elsewhere in the suite may not.
    let server = RedisServer::start_with_bin("redis-server", opts);
    let mut admin = server.connection();
    let mut c = redis::cmd("ACL");
    c.arg("SETUSER").arg("elector").arg("on").arg(">elector-pw");
    for r in rules.split_whitespace() {
        c.arg(r);
    }
    c.query::<()>(&mut admin).unwrap();
    (server, tls_port)
}

/// docs/security.md's quorum-mode elector recipe (the same text as QUORUM_ELECTOR in
/// client/tests/quorum_redis.rs).
const QUORUM_ELECTOR: &str = "resetkeys resetchannels -@all +lease.acquire +lease.renew +lease.release +lease.get +wait +lease.raise +info ~leases:*";

/// Quorum mode over mutual TLS with the least-privilege user (issue 27): three TLS servers of
/// one PKI, the CA file, client certificate and credentials applied to every node. Would
/// catch: the quorum transport ignoring ConnectOptions (no client certificate: the servers
/// refuse the handshake; no credentials: NOAUTH), or a recipe lacking what quorum mode sends.
#[test]
fn quorum_mode_over_mutual_tls_with_the_elector_user_leads_on_every_node() {
    use redis_lease_client::{Elector, ElectorConfig, QuorumControl};
    if !have_openssl() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    make_ca(dir.path(), "ca");
    make_leaf(dir.path(), "ca", "server", "serverAuth");
    make_leaf(dir.path(), "ca", "client", "clientAuth");
    let nodes: Vec<(RedisServer, u16)> = (0..3)
        .map(|_| tls_server_in(dir.path(), QUORUM_ELECTOR))
        .collect();
    let urls: Vec<String> = nodes
        .iter()
        .map(|(_, port)| format!("rediss://elector@127.0.0.1:{port}/"))
        .collect();
    let opts = ConnectOptions {
        ca_cert_file: Some(dir.path().join("ca.crt")),
        cert_file: Some(dir.path().join("client.crt")),
        key_file: Some(dir.path().join("client.key")),
        password: Some("elector-pw".into()),
        ..Default::default()
    };
    let cfg = ElectorConfig::new(&urls[0], "leases:tlsq", Duration::from_secs(2)).with_owner("tq");
    let mut e =
        Elector::with_nodes_options(cfg.clone(), &urls, QuorumControl::Correct, &opts).unwrap();
    let rx = e.subscribe();
    let h = e.handle();
    rt().block_on(async move {
        let j =
            tokio::spawn(async move { e.run(|ctx| async move { ctx.cancelled().await }).await });
        let end = Instant::now() + Duration::from_secs(10);
        let token = loop {
            if let Some(t) = rx.borrow().token() {
                break t;
            }
            assert!(Instant::now() < end, "no reign over TLS in quorum mode");
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        for (srv, _) in &nodes {
            let mut c = srv.connection();
            let v: Option<(String, u64, u64)> = redis::cmd("LEASE.GET")
                .arg("leases:tlsq")
                .query(&mut c)
                .unwrap();
            let (owner, t, _) = v.expect("held on every node");
            assert!(owner.starts_with("tq#"), "{owner}");
            assert_eq!(t, token, "one raised token on every node");
        }
        println!("quorum reign {token} over mutual TLS on 3 nodes as user elector");
        h.resign();
        let _ = j.await;
    });
    // Without the client certificate the servers refuse every node: no reign, a clear error.
    let bare = ConnectOptions {
        ca_cert_file: opts.ca_cert_file.clone(),
        password: opts.password.clone(),
        ..Default::default()
    };
    let mut e = Elector::with_nodes_options(cfg, &urls, QuorumControl::Correct, &bare).unwrap();
    let rx = e.subscribe();
    let h = e.handle();
    rt().block_on(async move {
        let j =
            tokio::spawn(async move { e.run(|ctx| async move { ctx.cancelled().await }).await });
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert!(
            rx.borrow().token().is_none(),
            "led without a client certificate"
        );
        h.resign();
        let _ = j.await;
    });
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Would catch: no TLS support in the client build, CA/client-certificate files ignored.
#[test]
fn transport_over_mutual_tls_runs_the_election_commands() {
    let Some(t) = tls_server() else { return };
    let mut opts = t.opts();
    opts.password = Some("elector-pw".into());
    let mut tr =
        RedisTransport::with_options(&t.url("elector@"), &opts, Duration::from_secs(5)).unwrap();
    rt().block_on(async {
        assert_eq!(tr.get("leases:tls").await.unwrap(), None);
        let got = tr
            .acquire("leases:tls", "me", Duration::from_secs(5), None, None)
            .await
            .unwrap();
        let token = got.value.expect("granted over TLS");
        assert!(tr.release("leases:tls", "me", token).await.unwrap());
        println!("granted token {token} over mutual TLS as user elector");
        // The ACL user's limits hold over TLS too.
        let e = tr.get("other:key").await.expect_err("outside ~leases:*");
        assert!(
            format!("{e}").contains("NOPERM") || format!("{e:?}").contains("NoPerm"),
            "{e:?}"
        );
    });
}

/// Would catch: certificate verification off (any server accepted), or an error that does
/// not say what is wrong.
#[test]
fn a_server_certificate_from_another_ca_is_refused_with_a_clear_error() {
    let Some(t) = tls_server() else { return };
    let mut opts = t.opts();
    opts.ca_cert_file = Some(t.path("other-ca.crt"));
    opts.password = Some("elector-pw".into());
    let mut tr =
        RedisTransport::with_options(&t.url("elector@"), &opts, Duration::from_secs(5)).unwrap();
    let e = rt()
        .block_on(tr.get("leases:x"))
        .expect_err("wrong CA must fail");
    println!("wrong CA: {e}");
    let text = e.to_string();
    assert!(
        text.contains("certificate") && (text.contains("UnknownIssuer") || text.contains("issuer")),
        "the error must say the certificate's issuer is unknown: {text}"
    );
    assert!(e.kind.is_unreachable(), "{e:?}");
}

/// Would catch: a server that does not require client certificates while the recipe says so
/// (a test PKI mistake), i.e. that the mutual part of mutual TLS is really exercised.
#[test]
fn mutual_tls_without_a_client_certificate_is_refused() {
    let Some(t) = tls_server() else { return };
    let opts = ConnectOptions {
        ca_cert_file: Some(t.path("ca.crt")),
        password: Some("elector-pw".into()),
        ..Default::default()
    };
    let mut tr =
        RedisTransport::with_options(&t.url("elector@"), &opts, Duration::from_secs(5)).unwrap();
    let e = rt()
        .block_on(tr.get("leases:x"))
        .expect_err("no client certificate");
    println!("no client certificate: {e}");
    // Only the server's log says why (TLS 1.3 reports the refusal after the handshake).
    let log = t.server.log();
    assert!(
        log.contains("certificate") || log.contains("Error accepting"),
        "{log}"
    );
}

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

fn lease_run(args: &[&str], env: &[(&str, &str)], within: Duration) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let (out, err) = (dir.path().join("out"), dir.path().join("err"));
    let mut cmd = Command::new(BIN);
    cmd.args(args)
        .env_remove("LEASE_REDIS_PASSWORD")
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    let end = Instant::now() + within;
    let code = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st.code();
        }
        if Instant::now() > end {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Run {
        code,
        stdout: std::fs::read_to_string(out).unwrap_or_default(),
        stderr: std::fs::read_to_string(err).unwrap_or_default(),
    }
}

const CHILD: &str = "echo \"token=$LEASE_TOKEN password=${LEASE_REDIS_PASSWORD:-absent}\"";

/// `lease-run --redis rediss://...` leads against a TLS server (done means of issue 19), as
/// the least-privilege elector user, with the password from the environment; CMD does not
/// inherit that password.
#[test]
fn lease_run_leads_over_mutual_tls_with_the_password_from_the_environment() {
    let Some(t) = tls_server() else { return };
    let (ca, cert, key) = (t.path("ca.crt"), t.path("client.crt"), t.path("client.key"));
    let url = t.url("elector@");
    let r = lease_run(
        &[
            "--redis",
            &url,
            "--key",
            "leases:run",
            "--ttl",
            "5s",
            "--tls-ca-cert-file",
            ca.to_str().unwrap(),
            "--tls-cert-file",
            cert.to_str().unwrap(),
            "--tls-key-file",
            key.to_str().unwrap(),
            "--",
            "sh",
            "-c",
            CHILD,
        ],
        &[("LEASE_REDIS_PASSWORD", "elector-pw")],
        Duration::from_secs(30),
    );
    println!("stdout: {}stderr: {}", r.stdout, r.stderr);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let token: u64 = r
        .stdout
        .split("token=")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no token in {:?}", r.stdout));
    assert!(token > 0);
    assert!(
        r.stdout.contains("password=absent"),
        "CMD must not inherit the password: {}",
        r.stdout
    );
    assert!(
        !r.stderr.contains("elector-pw"),
        "the password must never be logged"
    );
}

/// The password from a file (trailing newline stripped), and the refusals: env and file
/// both set, a wrong CA (clear error in the log, CMD never runs), TLS files on a plain URL.
#[test]
fn lease_run_password_file_and_clear_refusals() {
    let Some(t) = tls_server() else { return };
    let (ca, cert, key) = (t.path("ca.crt"), t.path("client.crt"), t.path("client.key"));
    let pwfile = t.path("pw");
    std::fs::write(&pwfile, "elector-pw\n").unwrap();
    std::fs::set_permissions(&pwfile, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let url = t.url("elector@");
    let tls = |ca: &Path| -> Vec<String> {
        [
            "--tls-ca-cert-file",
            ca.to_str().unwrap(),
            "--tls-cert-file",
            cert.to_str().unwrap(),
            "--tls-key-file",
            key.to_str().unwrap(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    let args = |ca: &Path, extra: &[&str]| -> Vec<String> {
        let mut a: Vec<String> = ["--redis", &url, "--key", "leases:file", "--ttl", "5s"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        a.extend(tls(ca));
        a.extend(extra.iter().map(|s| s.to_string()));
        a.extend(["--", "sh", "-c", CHILD].iter().map(|s| s.to_string()));
        a
    };
    let pw = pwfile.to_str().unwrap();
    let a = args(&ca, &["--redis-password-file", pw]);
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let r = lease_run(&a, &[], Duration::from_secs(30));
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(r.stdout.contains("token="), "{}", r.stdout);

    // Both sources: usage error, before any connection.
    let r = lease_run(
        &a,
        &[("LEASE_REDIS_PASSWORD", "x")],
        Duration::from_secs(10),
    );
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert!(r.stderr.contains("keep one"), "{}", r.stderr);

    // Wrong CA: lease-run keeps retrying (a server may rotate certificates) and says why;
    // CMD never runs.
    let other = t.path("other-ca.crt");
    let a = args(&other, &["--redis-password-file", pw]);
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let r = lease_run(&a, &[], Duration::from_secs(3));
    println!("wrong CA, lease-run log: {}", r.stderr);
    assert_eq!(r.code, None, "still retrying after 3 s");
    assert!(r.stdout.is_empty(), "CMD ran: {}", r.stdout);
    assert!(
        r.stderr.contains("UnknownIssuer") || r.stderr.contains("certificate"),
        "{}",
        r.stderr
    );

    // TLS files on a plain URL: usage error.
    let plain = format!("redis://127.0.0.1:{}/", t.server.port);
    let r = lease_run(
        &[
            "--redis",
            &plain,
            "--key",
            "leases:p",
            "--tls-ca-cert-file",
            ca.to_str().unwrap(),
            "--",
            "true",
        ],
        &[],
        Duration::from_secs(10),
    );
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert!(r.stderr.contains("not rediss://"), "{}", r.stderr);
}
