// Package secure holds the TLS and SASL flags every interop program takes
// (tests/interop/test_go_secure.py):
//
//	franz -tls-ca ca.pem -sasl-mechanism SCRAM-SHA-512 -sasl-user dave -sasl-password ... produce
//	franz -tls-ca ca.pem -tls-cert client.crt -tls-key client.key produce    (mutual TLS)
//
// Without them a client connects in plaintext. Each program turns Mechanism, User and
// Password into its client's own SASL settings.
package secure

import (
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"os"

	"odradek/interop/internal/report"
)

var (
	tlsCA   = flag.String("tls-ca", "", "PEM file of the CA the broker's certificate chains to: connect with TLS")
	tlsCert = flag.String("tls-cert", "", "PEM certificate (chain) of this client, for mutual TLS")
	tlsKey  = flag.String("tls-key", "", "PEM private key of -tls-cert")
	// Mechanism is PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER, or "" for no SASL.
	Mechanism = flag.String("sasl-mechanism", "", "PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER: log in with SASL")
	User      = flag.String("sasl-user", "", "SASL user name")
	Password  = flag.String("sasl-password", "", "SASL password")
	Token     = flag.String("sasl-token", "", "OAUTHBEARER: the token (a JWT)")
)

// TLSConfig is the TLS the flags ask for: nil without -tls-ca.
func TLSConfig() *tls.Config {
	if *tlsCA == "" {
		return nil
	}
	pem, err := os.ReadFile(*tlsCA)
	report.Check("read -tls-ca", err)
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		report.Fail("read -tls-ca", fmt.Errorf("no certificate in %s", *tlsCA))
	}
	config := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if *tlsCert != "" {
		pair, err := tls.LoadX509KeyPair(*tlsCert, *tlsKey)
		report.Check("read -tls-cert and -tls-key", err)
		config.Certificates = []tls.Certificate{pair}
	}
	return config
}

// UnknownMechanism stops the program with a usage error.
func UnknownMechanism() {
	report.Fail("usage", fmt.Errorf("unknown -sasl-mechanism %q", *Mechanism))
}
