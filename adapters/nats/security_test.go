package nats

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"

	"github.com/switchyard-dev/switchyard/broker"
)

// TestAuth_PrivateServer: user/password and token credentials work against
// a server that requires them, and a wrong password fails without showing
// it.
func TestAuth_PrivateServer(t *testing.T) {
	t.Parallel()
	srv := startPrivateServerWith(t, []natsgo.Option{natsgo.UserInfo("alice", "s3cret-pw")}, "--user", "alice", "--pass", "s3cret-pw")
	host := strings.TrimPrefix(srv.URL(), "nats://")
	ctx := ctxT(t, 30*time.Second)

	good := "nats://alice:s3cret-pw@" + host + "/?namespace=" + testNamespace(t)
	b := openBroker(t, good, nil)
	rs := mustPublish(t, b, &broker.Message{Lane: "l", Kind: "k"})
	if ds := receive(t, b, broker.ReceiveRequest{Lane: "l", Max: 1, Wait: 5 * time.Second}); len(ds) != 1 || ds[0].ID != rs[0].ID {
		t.Fatal("round trip with credentials failed")
	}

	_, err := broker.OpenDriver(ctx, "nats://alice:wr0ng-pw@"+host+"/?connect_timeout=2s")
	if err == nil {
		t.Fatal("opened with a wrong password")
	}
	if strings.Contains(err.Error(), "wr0ng-pw") || strings.Contains(err.Error(), "s3cret-pw") {
		t.Errorf("the error shows a password: %v", err)
	}
	if !errors.Is(err, broker.ErrPermanent) {
		t.Errorf("authorization failure: %v, want permanent", err)
	}
}

// TestTLS_PrivateServer: tls_ca makes the driver verify a server that
// requires TLS; without the CA it refuses the server's certificate.
func TestTLS_PrivateServer(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	caFile, certFile, keyFile := writeTestCerts(t, dir)
	pool := x509.NewCertPool()
	caPEM, _ := os.ReadFile(caFile)
	pool.AppendCertsFromPEM(caPEM)
	srv := startPrivateServerWith(t, []natsgo.Option{natsgo.Secure(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})},
		"--tls", "--tlscert", certFile, "--tlskey", keyFile)
	host := strings.TrimPrefix(srv.URL(), "nats://")

	b := openBroker(t, "nats://"+host+"/?namespace="+testNamespace(t)+"&tls_ca="+caFile, nil)
	rs := mustPublish(t, b, &broker.Message{Lane: "l", Kind: "k"})
	if ds := receive(t, b, broker.ReceiveRequest{Lane: "l", Max: 1, Wait: 5 * time.Second}); len(ds) != 1 || ds[0].ID != rs[0].ID {
		t.Fatal("round trip over TLS failed")
	}
	if _, err := broker.OpenDriver(ctxT(t, 10*time.Second), "nats://"+host+"/?tls=true&connect_timeout=2s"); err == nil {
		t.Fatal("opened a TLS server whose certificate no trusted CA signed")
	}
}

// writeTestCerts writes a CA and a server certificate for 127.0.0.1.
func writeTestCerts(t *testing.T, dir string) (caFile, certFile, keyFile string) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "switchyard test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTpl, caTpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(key)
	caFile, certFile, keyFile = filepath.Join(dir, "ca.pem"), filepath.Join(dir, "server.pem"), filepath.Join(dir, "server-key.pem")
	for f, b := range map[string][]byte{
		caFile:   pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		certFile: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyFile:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	} {
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return caFile, certFile, keyFile
}
