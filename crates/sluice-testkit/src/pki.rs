//! Test certificates, made with rcgen when first asked for: a CA, a
//! server certificate for 127.0.0.1 and localhost, client certificates
//! (two valid ones, an expired one, one signed by another CA), written
//! out in the directory layout qemu, libnbd, nbdkit and `sluice serve
//! --tls-certificates` read (`ca-cert.pem`, `server-cert.pem`,
//! `server-key.pem`; a client's `client-cert.pem`, `client-key.pem`).
//!
//! Leaf certificates carry no key-usage extension (only an extended key
//! usage): qemu then assumes the usages it wants, which an ECDSA key
//! could not honestly claim.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use rcgen::{
    date_time_ymd, BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, PublicKeyData, SignatureAlgorithm, PKCS_RSA_SHA256,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// One certificate and its key.
#[derive(Debug)]
pub struct Identity {
    /// The certificate, DER.
    pub cert: CertificateDer<'static>,
    /// PEM of the certificate and of its PKCS#8 key.
    pub cert_pem: String,
    pub key_pem: String,
    key_der: Vec<u8>,
}

impl Identity {
    /// The private key (PKCS#8), for a rustls configuration.
    pub fn key(&self) -> PrivateKeyDer<'static> {
        PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.key_der.clone()))
    }

    /// The certificate chain (just this certificate).
    pub fn chain(&self) -> Vec<CertificateDer<'static>> {
        vec![self.cert.clone()]
    }
}

/// The whole set, in a temporary directory that lives as long as it.
#[derive(Debug)]
pub struct Pki {
    dir: tempfile::TempDir,
    /// The CA every valid certificate is signed by.
    pub ca: Identity,
    /// A CA nobody trusts.
    pub other_ca: Identity,
    /// The server's certificate (CN and SANs 127.0.0.1, localhost).
    pub server: Identity,
    /// Valid client certificates, CN=client1 and CN=client2.
    pub client1: Identity,
    pub client2: Identity,
    /// CN=client1, expired in 2020.
    pub expired: Identity,
    /// CN=client1, signed by `other_ca`.
    pub rogue: Identity,
}

/// Client directories [`Pki::client`] knows.
pub const CLIENTS: [&str; 6] = [
    "client1",
    "client2",
    "expired",
    "rogue",
    "nocert",
    "untrusted",
];

impl Pki {
    /// The process-wide set (made once; key generation is not free).
    pub fn shared() -> &'static Self {
        static PKI: OnceLock<Pki> = OnceLock::new();
        PKI.get_or_init(Self::new)
    }

    /// A fresh set.
    pub fn new() -> Self {
        let (ca, issuer) = make_ca("sluice test CA");
        let (other_ca, other_issuer) = make_ca("some other CA");
        let client = ExtendedKeyUsagePurpose::ClientAuth;
        let server = leaf(
            &issuer,
            "localhost",
            &["127.0.0.1", "localhost"],
            ExtendedKeyUsagePurpose::ServerAuth,
            false,
        );
        let pki = Self {
            dir: tempfile::Builder::new()
                .prefix("sluice-pki-")
                .tempdir()
                .expect("create certificate directory"),
            client1: leaf(&issuer, "client1", &[], client.clone(), false),
            client2: leaf(&issuer, "client2", &[], client.clone(), false),
            expired: leaf(&issuer, "client1", &[], client.clone(), true),
            rogue: leaf(&other_issuer, "client1", &[], client, false),
            ca,
            other_ca,
            server,
        };
        pki.write_out();
        pki
    }

    fn write_out(&self) {
        let write = |dir: &str, files: &[(&str, &str)]| {
            let d = self.dir.path().join(dir);
            std::fs::create_dir_all(&d).expect("create certificate directory");
            for (name, pem) in files {
                std::fs::write(d.join(name), pem).expect("write certificate");
            }
        };
        let ca = self.ca.cert_pem.as_str();
        write(
            "server",
            &[
                ("ca-cert.pem", ca),
                ("server-cert.pem", &self.server.cert_pem),
                ("server-key.pem", &self.server.key_pem),
            ],
        );
        for (who, id) in [
            ("client1", &self.client1),
            ("client2", &self.client2),
            ("expired", &self.expired),
            ("rogue", &self.rogue),
        ] {
            write(
                who,
                &[
                    ("ca-cert.pem", ca),
                    ("client-cert.pem", &id.cert_pem),
                    ("client-key.pem", &id.key_pem),
                ],
            );
        }
        write("nocert", &[("ca-cert.pem", ca)]);
        write("untrusted", &[("ca-cert.pem", &self.other_ca.cert_pem)]);
    }

    /// The server's directory: `ca-cert.pem`, `server-cert.pem`,
    /// `server-key.pem`.
    pub fn server(&self) -> PathBuf {
        self.dir.path().join("server")
    }

    /// A client's directory (one of [`CLIENTS`]): `ca-cert.pem` of the CA
    /// it trusts (`untrusted` trusts only the other CA), and, except for
    /// `nocert` and `untrusted`, `client-cert.pem` and `client-key.pem`.
    pub fn client(&self, who: &str) -> PathBuf {
        assert!(CLIENTS.contains(&who), "no client directory {who}");
        self.dir.path().join(who)
    }

    /// The directory holding all of the above.
    pub fn root(&self) -> &Path {
        self.dir.path()
    }
}

impl Default for Pki {
    fn default() -> Self {
        Self::new()
    }
}

fn make_ca(name: &str) -> (Identity, Issuer<'static, KeyPair>) {
    let key = KeyPair::generate().expect("generate a CA key");
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params.distinguished_name.push(DnType::CommonName, name);
    let cert = params.self_signed(&key).expect("self-sign the CA");
    let id = Identity {
        cert: cert.der().clone(),
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
        key_der: key.serialize_der(),
    };
    (id, Issuer::new(params, key))
}

fn leaf(
    issuer: &Issuer<'_, KeyPair>,
    cn: &str,
    sans: &[&str],
    usage: ExtendedKeyUsagePurpose,
    expired: bool,
) -> Identity {
    let key = KeyPair::generate().expect("generate a key");
    let sans = sans.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    let mut params = CertificateParams::new(sans).expect("certificate parameters");
    params.distinguished_name.push(DnType::CommonName, cn);
    params.extended_key_usages = vec![usage];
    if expired {
        params.not_before = date_time_ymd(2019, 1, 1);
        params.not_after = date_time_ymd(2020, 1, 1);
    }
    let cert = params.signed_by(&key, issuer).expect("sign a certificate");
    Identity {
        cert: cert.der().clone(),
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
        key_der: key.serialize_der(),
    }
}

/// An RSA key of any size (rcgen makes only 2048, 3072 and 4096 bits).
struct RsaKey {
    /// The public key as a certificate carries it (PKCS#1 DER).
    public: Vec<u8>,
    /// The private key, PKCS#8 PEM.
    pem: String,
}

impl RsaKey {
    fn generate(bits: usize) -> Self {
        use rsa::pkcs1::EncodeRsaPublicKey;
        use rsa::pkcs8::{EncodePrivateKey, LineEnding};
        let key = rsa::PrivateKey::new(&mut getrandom::SysRng, bits)
            .unwrap_or_else(|e| panic!("generate an RSA key of {bits} bits: {e}"));
        let public = key
            .to_public_key()
            .to_pkcs1_der()
            .expect("encode an RSA public key")
            .as_bytes()
            .to_vec();
        let pem = key
            .to_pkcs8_pem(LineEnding::LF)
            .expect("encode an RSA private key")
            .to_string();
        Self { public, pem }
    }
}

impl PublicKeyData for RsaKey {
    fn der_bytes(&self) -> &[u8] {
        &self.public
    }

    fn algorithm(&self) -> &'static SignatureAlgorithm {
        &PKCS_RSA_SHA256
    }
}

/// Writes RSA certificates into `dir` in the layout qemu and the NBD URI's
/// `tls-certificates=` read: `server/` holds `ca-cert.pem`,
/// `server-cert.pem` (127.0.0.1 and localhost) and `server-key.pem`, an
/// RSA key of `server_key_bits`; `client/` holds `ca-cert.pem`,
/// `client-cert.pem` (CN=client1) and `client-key.pem`. Every key may
/// sign and encipher, as qemu wants of RSA keys; a key of a size TLS
/// refuses (1024 bits) still gets its certificate.
pub fn write_rsa_pki(dir: &Path, server_key_bits: usize) {
    let ca_key = RsaKey::generate(2048);
    let ca_signer = KeyPair::from_pem(&ca_key.pem).expect("load the CA's RSA key");
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    params
        .distinguished_name
        .push(DnType::CommonName, "sluice test RSA CA");
    let ca_pem = params
        .self_signed(&ca_signer)
        .expect("self-sign the CA")
        .pem();
    let issuer = Issuer::new(params, ca_signer);
    let leaf = |cn: &str, sans: &[&str], usage: ExtendedKeyUsagePurpose, key: &RsaKey| {
        let sans = sans.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        let mut params = CertificateParams::new(sans).expect("certificate parameters");
        params.distinguished_name.push(DnType::CommonName, cn);
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![usage];
        params
            .signed_by(key, &issuer)
            .expect("sign a certificate")
            .pem()
    };
    let server_key = RsaKey::generate(server_key_bits);
    let server_cert = leaf(
        "localhost",
        &["127.0.0.1", "localhost"],
        ExtendedKeyUsagePurpose::ServerAuth,
        &server_key,
    );
    let client_key = RsaKey::generate(2048);
    let client_cert = leaf(
        "client1",
        &[],
        ExtendedKeyUsagePurpose::ClientAuth,
        &client_key,
    );
    for (who, cert, key) in [
        ("server", &server_cert, &server_key),
        ("client", &client_cert, &client_key),
    ] {
        let d = dir.join(who);
        std::fs::create_dir_all(&d).expect("create certificate directory");
        for (name, pem) in [
            ("ca-cert.pem".to_owned(), ca_pem.as_str()),
            (format!("{who}-cert.pem"), cert.as_str()),
            (format!("{who}-key.pem"), key.pem.as_str()),
        ] {
            std::fs::write(d.join(name), pem).expect("write certificate");
        }
    }
}
