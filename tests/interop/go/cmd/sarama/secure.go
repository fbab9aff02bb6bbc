package main

// Optional TLS and SASL for every client the scenarios make (tests/interop/test_go_secure.py):
//
//	sarama -tls-ca ca.pem -sasl-mechanism SCRAM-SHA-512 -sasl-user dave -sasl-password ... produce
//
// Without these flags the client connects in plaintext, as before. SCRAM is
// github.com/xdg-go/scram, as sarama's own examples do it.

import (
	"crypto/sha256"
	"crypto/sha512"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"os"

	"github.com/IBM/sarama"
	"github.com/xdg-go/scram"

	"odradek/interop/internal/report"
)

var (
	tlsCA        = flag.String("tls-ca", "", "PEM file of the CA the broker's certificate chains to: connect with TLS")
	saslMech     = flag.String("sasl-mechanism", "", "PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512: log in with SASL")
	saslUser     = flag.String("sasl-user", "", "SASL user name")
	saslPassword = flag.String("sasl-password", "", "SASL password")
)

// secure sets the TLS and SASL settings the flags ask for (none without them).
func secure(c *sarama.Config) {
	if *tlsCA != "" {
		pem, err := os.ReadFile(*tlsCA)
		report.Check("read -tls-ca", err)
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			report.Fail("read -tls-ca", fmt.Errorf("no certificate in %s", *tlsCA))
		}
		c.Net.TLS.Enable = true
		c.Net.TLS.Config = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	if *saslMech == "" {
		return
	}
	c.Net.SASL.Enable = true
	c.Net.SASL.Handshake = true
	c.Net.SASL.User, c.Net.SASL.Password = *saslUser, *saslPassword
	switch *saslMech {
	case "PLAIN":
		c.Net.SASL.Mechanism = sarama.SASLTypePlaintext
	case "SCRAM-SHA-256":
		c.Net.SASL.Mechanism = sarama.SASLTypeSCRAMSHA256
		c.Net.SASL.SCRAMClientGeneratorFunc = func() sarama.SCRAMClient {
			return &scramClient{hash: scram.HashGeneratorFcn(sha256.New)}
		}
	case "SCRAM-SHA-512":
		c.Net.SASL.Mechanism = sarama.SASLTypeSCRAMSHA512
		c.Net.SASL.SCRAMClientGeneratorFunc = func() sarama.SCRAMClient {
			return &scramClient{hash: scram.HashGeneratorFcn(sha512.New)}
		}
	default:
		report.Fail("usage", fmt.Errorf("unknown -sasl-mechanism %q", *saslMech))
	}
}

// scramClient is sarama's SCRAMClient on xdg-go/scram.
type scramClient struct {
	hash scram.HashGeneratorFcn
	conv *scram.ClientConversation
}

func (s *scramClient) Begin(user, password, authzID string) error {
	client, err := s.hash.NewClient(user, password, authzID)
	if err != nil {
		return err
	}
	s.conv = client.NewConversation()
	return nil
}

func (s *scramClient) Step(challenge string) (string, error) { return s.conv.Step(challenge) }

func (s *scramClient) Done() bool { return s.conv.Done() }
