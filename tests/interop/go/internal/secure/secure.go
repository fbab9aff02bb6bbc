// Package secure holds the TLS and SASL flags every interop program takes
// (tests/interop/test_go_secure.py):
//
//	franz -tls-ca ca.pem -sasl-mechanism SCRAM-SHA-512 -sasl-user dave -sasl-password ... produce
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
	tlsCA = flag.String("tls-ca", "", "PEM file of the CA the broker's certificate chains to: connect with TLS")
	// Mechanism is PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, or "" for no SASL.
	Mechanism = flag.String("sasl-mechanism", "", "PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512: log in with SASL")
	User      = flag.String("sasl-user", "", "SASL user name")
	Password  = flag.String("sasl-password", "", "SASL password")
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
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
}

// UnknownMechanism stops the program with a usage error.
func UnknownMechanism() {
	report.Fail("usage", fmt.Errorf("unknown -sasl-mechanism %q", *Mechanism))
}
