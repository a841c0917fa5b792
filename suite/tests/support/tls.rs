//! A `redis-server` that only speaks TLS, with a CA, a server certificate and
//! a client certificate made by `openssl` at test time.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use super::process::Process;
use super::{redis_cli_bin, redis_server_bin};

/// `openssl` extension sections for the three certificates. The CA is a
/// proper v3 CA and the leaves are v3 end-entity certificates: rustls
/// (webpki) rejects v1 certificates and CA certificates used as leaves.
const OPENSSL_CNF: &str = "\
[req]
distinguished_name = dn
prompt = no
[dn]
CN = unused
[ca]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash
[server]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1,DNS:localhost
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
[client]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature
extendedKeyUsage = clientAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
";

/// A TLS-only `redis-server` (`--port 0 --tls-port <free>`) on 127.0.0.1,
/// killed on drop; its log is printed when the test panics.
///
/// Certificates (EC P-256, valid 30 days, made fresh for every server):
/// `ca.crt` (self-signed CA), `server.crt` (SAN `IP:127.0.0.1`,
/// `DNS:localhost`, `serverAuth`) and `client.crt` (`clientAuth`), both signed
/// by the CA; keys are unencrypted PKCS#8 PEM.
pub struct TlsRedis {
    process: Process,
    /// The TLS port.
    pub port: u16,
    mutual: bool,
}

impl TlsRedis {
    /// Starts a server that accepts clients with or without a certificate
    /// (`--tls-auth-clients optional`), and waits (up to 10 s) until it
    /// answers PING over TLS.
    ///
    /// # Panics
    /// When `openssl` or `redis-server` fails, or it does not answer in time.
    pub fn start() -> TlsRedis {
        Self::start_inner(false)
    }

    /// Like [`TlsRedis::start`] but for mutual TLS: clients must present a
    /// certificate signed by the CA (`--tls-auth-clients yes`).
    pub fn start_mutual() -> TlsRedis {
        Self::start_inner(true)
    }

    fn start_inner(mutual: bool) -> TlsRedis {
        let process = Process::new("TLS redis-server");
        make_certs(process.dir());
        let mut s = TlsRedis {
            port: process.port,
            process,
            mutual,
        };
        s.spawn();
        s
    }

    /// Starts the process and waits (up to 10 s) until it answers PING over
    /// TLS (checked with `redis-cli`, which needs no TLS in the test crate).
    fn spawn(&mut self) {
        let d = self.process.dir().to_owned();
        let mut cmd = Command::new(redis_server_bin());
        cmd.args(["--port", "0"])
            .args(["--tls-port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--tls-cert-file")
            .arg(d.join("server.crt"))
            .arg("--tls-key-file")
            .arg(d.join("server.key"))
            .arg("--tls-ca-cert-file")
            .arg(d.join("ca.crt"))
            .args([
                "--tls-auth-clients",
                if self.mutual { "yes" } else { "optional" },
            ])
            .arg("--dir")
            .arg(&d)
            .arg("--logfile")
            .arg(self.process.log_path());
        self.process.spawn(cmd, |port| {
            let out = cli(&d, port, true, &["PING"]);
            out.status.success() && String::from_utf8_lossy(&out.stdout).trim() == "PONG"
        });
    }

    /// `rediss://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("rediss://127.0.0.1:{}", self.port)
    }

    /// Whether clients must present a certificate.
    pub fn is_mutual(&self) -> bool {
        self.mutual
    }

    /// Path of the CA certificate (PEM).
    pub fn ca_path(&self) -> PathBuf {
        self.process.dir().join("ca.crt")
    }

    /// Path of the client certificate (PEM).
    pub fn client_cert_path(&self) -> PathBuf {
        self.process.dir().join("client.crt")
    }

    /// Path of the client key (PKCS#8 PEM).
    pub fn client_key_path(&self) -> PathBuf {
        self.process.dir().join("client.key")
    }

    /// The CA certificate, PEM.
    pub fn ca_pem(&self) -> Vec<u8> {
        std::fs::read(self.ca_path()).expect("read ca.crt")
    }

    /// The client certificate, PEM.
    pub fn client_cert_pem(&self) -> Vec<u8> {
        std::fs::read(self.client_cert_path()).expect("read client.crt")
    }

    /// The client key, PKCS#8 PEM.
    pub fn client_key_pem(&self) -> Vec<u8> {
        std::fs::read(self.client_key_path()).expect("read client.key")
    }

    /// Runs `redis-cli --tls` with the CA and the client certificate against
    /// this server and returns its stdout, trimmed.
    ///
    /// # Panics
    /// When `redis-cli` fails (its stderr is in the message).
    pub fn cli(&self, args: &[&str]) -> String {
        let out = self.cli_output(true, args);
        assert!(
            out.status.success(),
            "redis-cli {args:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// Runs `redis-cli --tls --cacert <ca>` (plus `--cert`/`--key` when
    /// `client_cert`) against this server, whatever comes of it.
    pub fn cli_output(&self, client_cert: bool, args: &[&str]) -> Output {
        cli(self.process.dir(), self.port, client_cert, args)
    }

    pub fn log(&self) -> String {
        self.process.log()
    }

    /// Kills the server (SIGKILL) and waits for it to exit.
    pub fn stop(&mut self) {
        self.process.stop();
    }

    /// Starts it again on the same port with the same certificates.
    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
    }
}

/// `redis-cli --tls --cacert <dir>/ca.crt` (plus the client certificate when
/// `client_cert`) against 127.0.0.1:`port`, whatever comes of it.
fn cli(dir: &Path, port: u16, client_cert: bool, args: &[&str]) -> Output {
    let mut cmd = Command::new(redis_cli_bin());
    cmd.args(["--tls", "-h", "127.0.0.1", "-p", &port.to_string()])
        .arg("--cacert")
        .arg(dir.join("ca.crt"));
    if client_cert {
        cmd.arg("--cert")
            .arg(dir.join("client.crt"))
            .arg("--key")
            .arg(dir.join("client.key"));
    }
    cmd.args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run redis-cli (is it on the PATH? or set RILLKIT_REDIS_CLI)")
}

/// Makes `ca.{crt,key}`, `server.{crt,key}` and `client.{crt,key}` in `dir`
/// (see [`TlsRedis`] for what they are). The server certificate names
/// `127.0.0.1` and `localhost`, so one set serves every server on this host
/// (e.g. all the nodes of a [`TlsCluster`](super::cluster::TlsCluster)).
///
/// # Panics
/// When `openssl` fails.
pub fn make_certs(dir: &Path) {
    std::fs::write(dir.join("openssl.cnf"), OPENSSL_CNF).expect("write openssl.cnf");
    let openssl = |args: &[&str]| {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .stdin(Stdio::null())
            .output()
            .expect("run openssl (is it on the PATH?)");
        assert!(
            out.status.success(),
            "openssl {args:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let new_key = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
    ];
    let req = |extra: &[&str]| {
        let mut a = vec!["req", "-config", "openssl.cnf"];
        a.extend_from_slice(&new_key);
        a.extend_from_slice(extra);
        openssl(&a);
    };
    req(&[
        "-x509",
        "-extensions",
        "ca",
        "-days",
        "30",
        "-subj",
        "/CN=rillkit test CA",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
    ]);
    for (name, serial, cn) in [
        ("server", "2", "/CN=localhost"),
        ("client", "3", "/CN=rillkit test client"),
    ] {
        let (key, csr, crt) = (
            format!("{name}.key"),
            format!("{name}.csr"),
            format!("{name}.crt"),
        );
        req(&["-new", "-subj", cn, "-keyout", &key, "-out", &csr]);
        openssl(&[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-set_serial",
            serial,
            "-days",
            "30",
            "-extfile",
            "openssl.cnf",
            "-extensions",
            name,
            "-out",
            &crt,
        ]);
    }
}
