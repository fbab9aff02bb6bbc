package main

// Optional TLS and SASL for every client the scenarios make (tests/interop/test_go_secure.py):
//
//	franz -tls-ca ca.pem -sasl-mechanism SCRAM-SHA-512 -sasl-user dave -sasl-password ... produce
//
// Without these flags the client connects in plaintext, as before.

import (
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"os"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"odradek/interop/internal/report"
)

var (
	tlsCA        = flag.String("tls-ca", "", "PEM file of the CA the broker's certificate chains to: connect with TLS")
	saslMech     = flag.String("sasl-mechanism", "", "PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512: log in with SASL")
	saslUser     = flag.String("sasl-user", "", "SASL user name")
	saslPassword = flag.String("sasl-password", "", "SASL password")
)

// securityOpts is the TLS and SASL options the flags ask for (none without them).
func securityOpts() []kgo.Opt {
	var opts []kgo.Opt
	if *tlsCA != "" {
		pem, err := os.ReadFile(*tlsCA)
		report.Check("read -tls-ca", err)
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			report.Fail("read -tls-ca", fmt.Errorf("no certificate in %s", *tlsCA))
		}
		opts = append(opts, kgo.DialTLSConfig(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}))
	}
	switch *saslMech {
	case "":
	case "PLAIN":
		opts = append(opts, kgo.SASL(plain.Auth{User: *saslUser, Pass: *saslPassword}.AsMechanism()))
	case "SCRAM-SHA-256":
		opts = append(opts, kgo.SASL(scram.Auth{User: *saslUser, Pass: *saslPassword}.AsSha256Mechanism()))
	case "SCRAM-SHA-512":
		opts = append(opts, kgo.SASL(scram.Auth{User: *saslUser, Pass: *saslPassword}.AsSha512Mechanism()))
	default:
		report.Fail("usage", fmt.Errorf("unknown -sasl-mechanism %q", *saslMech))
	}
	return opts
}
