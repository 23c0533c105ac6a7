"""Certificates made for a test run (never committed), and TLS clients."""
import ssl


def make_certs(d):
    """A CA with two server certificates (for localhost and 127.0.0.1), one
    for another name, and a client certificate, and a client certificate
    from another CA, written as PEM files into d."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)

    def write(name, key, cert):
        (d / f"{name}.key").write_bytes(key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption()))
        (d / f"{name}.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))

    def make(cn, issuer=None, ca=False, san=None):
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
        ikey, iname = (key, subject) if issuer is None else issuer
        b = (x509.CertificateBuilder().subject_name(subject).issuer_name(iname)
             .public_key(key.public_key()).serial_number(x509.random_serial_number())
             .not_valid_before(now - datetime.timedelta(hours=1))
             .not_valid_after(now + datetime.timedelta(days=2))
             .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
        if ca:
            b = b.add_extension(x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=True,
                crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
            b = b.add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                                critical=False)
        else:
            b = b.add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                ikey.public_key()), critical=False)
        if san is not None:
            b = b.add_extension(x509.SubjectAlternativeName(san), critical=False)
        cert = b.sign(ikey, hashes.SHA256())
        write(cn, key, cert)
        return key, subject

    ca = make("ca", ca=True)
    other = make("other-ca", ca=True)
    for name in ("server", "server2"):  # (server2: its successor, for a rotation)
        make(name, ca, san=[x509.DNSName("localhost"),
                            x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
    make("client", ca)
    make("stranger", other)
    # (signed by the CA, but for another name only: a name check fails)
    make("elsewhere", ca, san=[x509.DNSName("queue.example")])


def tls_args(certs, mtls=False, name="server"):
    args = ["--tls-cert", str(certs / f"{name}.pem"), "--tls-key", str(certs / f"{name}.key")]
    if mtls:
        args += ["--tls-client-ca", str(certs / "ca.pem")]
    return args


def client_ctx(certs, cert=None):
    ctx = ssl.create_default_context(cafile=str(certs / "ca.pem"))
    if cert is not None:
        ctx.load_cert_chain(str(certs / f"{cert}.pem"), str(certs / f"{cert}.key"))
    return ctx


def tls_connect(srv, certs, cert=None) -> ssl.SSLSocket:
    return client_ctx(certs, cert).wrap_socket(srv.connect(), server_hostname="localhost")
