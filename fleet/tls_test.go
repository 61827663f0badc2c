package fleet

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	neturl "net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/supervisor/eventlog"
)

// tlsFiles writes a CA and a certificate it signed for 127.0.0.1 (server
// and client use: a node's embedded server, its routes and its own
// client), as PEM files in dir; other is a certificate of another CA.
type tlsFiles struct{ ca, cert, key, otherCert, otherKey string }

func writeTLS(t *testing.T, dir string) tlsFiles {
	t.Helper()
	newCA := func(name string) (*x509.Certificate, *ecdsa.PrivateKey, []byte) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
			IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
		if err != nil {
			t.Fatal(err)
		}
		cert, err := x509.ParseCertificate(der)
		if err != nil {
			t.Fatal(err)
		}
		return cert, key, der
	}
	leaf := func(ca *x509.Certificate, caKey *ecdsa.PrivateKey, serial int64) ([]byte, []byte) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "orchestrd node"},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
			IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
			KeyUsage:    x509.KeyUsageDigitalSignature,
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kb, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})
	}
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ca, caKey, caDER := newCA("orchestrd test CA")
	cert, key := leaf(ca, caKey, 2)
	other, otherKey, _ := newCA("another CA")
	ocert, okey := leaf(other, otherKey, 3)
	return tlsFiles{
		ca:   write("ca.pem", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})),
		cert: write("node.pem", cert), key: write("node-key.pem", key),
		otherCert: write("other.pem", ocert), otherKey: write("other-key.pem", okey),
	}
}

// TestTLS: nodes with tls_cert, tls_key and tls_ca speak TLS on their
// client ports, their routes and their own clients, verifying each other
// against the CA: a job still crosses from one node to another. A client
// without TLS, one without a certificate and one with a certificate of
// another CA are refused.
func TestTLS(t *testing.T) {
	t.Parallel()
	files := writeTLS(t, t.TempDir())
	r := newRuns()
	ns := startClusterWith(t, testHeartbeat, r, func(c *Config) {
		c.TLSCert, c.TLSKey, c.TLSCA = files.cert, files.key, files.ca
	}, nodeSpec{}, nodeSpec{lanes: []string{"gpu"}, slots: 1})
	a, b := ns[0], ns[1]
	id := submit(t, a, api.JobSpec{Lane: "gpu", Command: "echo"})
	if rec := waitEnd(t, a, id); rec.State != api.StateSucceeded || rec.Node != b.name || rec.Output != outputBytes(id) {
		t.Fatalf("a job across TLS: %s on %q, %d bytes of output", rec.State, rec.Node, len(rec.Output))
	}

	login := loginOpts(t, a.f.cfg.Credentials)
	url := a.f.URL()
	try := func(what string, opts ...nats.Option) {
		t.Helper()
		opts = append(append(opts, login...), nats.Timeout(5*time.Second), nats.NoReconnect())
		if nc, err := nats.Connect(url, opts...); err == nil {
			nc.Close()
			t.Fatalf("%s connected", what)
		}
	}
	// The server's first words say TLS is required, before anything is
	// sent in the clear.
	u, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	info, err := bufio.NewReader(conn).ReadString('\n')
	conn.Close()
	if err != nil || !strings.HasPrefix(info, "INFO ") || !strings.Contains(info, `"tls_required":true`) {
		t.Fatalf("the server's INFO: %q, %v", info, err)
	}
	try("a client without a certificate", nats.RootCAs(files.ca))
	try("a client with another CA's certificate", nats.RootCAs(files.ca), nats.ClientCert(files.otherCert, files.otherKey))
	// The same credentials with the CA's certificate: the refusals above
	// were TLS's.
	// nats.go's 2 s for the connection and TLS handshake is a loaded
	// machine's scheduling delay (a loaded CI run: i/o timeout).
	nc, err := nats.Connect(url, append(login, nats.RootCAs(files.ca), nats.ClientCert(files.cert, files.key), nats.Timeout(testWait))...)
	if err != nil {
		t.Fatalf("a client with the CA's certificate: %v", err)
	}
	if !nc.TLSRequired() {
		t.Fatal("the server does not require TLS")
	}
	if _, err := nc.TLSConnectionState(); err != nil {
		t.Fatalf("the connection is not TLS: %v", err)
	}
	nc.Close()

	// A node on an external NATS reached by a tls:// URL (a's server
	// here), with the CA and its certificate: it joins, and a job it
	// takes in crosses to b and back.
	keyHome := filepath.Dir(a.f.cfg.Credentials)
	for _, n := range []string{"x", "y"} {
		if _, err := AddNode(keyHome, n, nil, filepath.Join(keyHome, n+".creds"), false); err != nil {
			t.Fatal(err)
		}
	}
	xcfg := Config{Enabled: true, Name: "x", URL: "tls://" + u.Host, Credentials: filepath.Join(keyHome, "x.creds"),
		Heartbeat: api.Duration{Duration: testHeartbeat}, TLSCA: files.ca, TLSCert: files.cert, TLSKey: files.key}
	x := startNode(t, xcfg, newFakeLocal("x", nil, 0, r), filepath.Join(t.TempDir(), "x"))
	waitFor(t, "x learns the fleet's lanes", func() bool { return x.f.Serves("gpu") })
	id = submit(t, x, api.JobSpec{Lane: "gpu", Command: "echo"})
	if rec := waitEnd(t, x, id); rec.State != api.StateSucceeded || rec.Node != b.name || rec.Output != outputBytes(id) {
		t.Fatalf("a job from the external TLS node: %s on %q, %d bytes of output", rec.State, rec.Node, len(rec.Output))
	}
	// Without tls_ca the system's roots decide, and they do not know the
	// test CA: refused at the start, saying why.
	ycfg := xcfg
	ycfg.Name, ycfg.TLSCA, ycfg.Credentials = "y", "", filepath.Join(keyHome, "y.creds")
	bus, err := eventlog.Open(eventlog.Options{Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer bus.Close()
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	ycfg.StartTimeout.Duration = testWait
	f, err := Start(ctx, Options{Config: ycfg, Home: filepath.Join(t.TempDir(), "y"), Local: newFakeLocal("y", nil, 0, r), Bus: bus, Logger: zerolog.Nop()})
	if err == nil {
		f.Close(ctx)
		t.Fatal("a node without the CA connected to a server its roots do not know")
	}
	t.Logf("refused: %v", err)
	if !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("the refusal does not say why: %v", err)
	}
}
