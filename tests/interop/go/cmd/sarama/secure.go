package main

// The TLS and SASL of internal/secure's flags as sarama settings (none without the
// flags). SCRAM is github.com/xdg-go/scram, as sarama's own examples do it.

import (
	"crypto/sha256"
	"crypto/sha512"

	"github.com/IBM/sarama"
	"github.com/xdg-go/scram"

	"odradek/interop/internal/secure"
)

// secureConfig sets the TLS and SASL settings the flags ask for (none without them).
func secureConfig(c *sarama.Config) {
	if cfg := secure.TLSConfig(); cfg != nil {
		c.Net.TLS.Enable = true
		c.Net.TLS.Config = cfg
	}
	if *secure.Mechanism == "" {
		return
	}
	c.Net.SASL.Enable = true
	c.Net.SASL.Handshake = true
	c.Net.SASL.User, c.Net.SASL.Password = *secure.User, *secure.Password
	switch *secure.Mechanism {
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
	case "OAUTHBEARER":
		c.Net.SASL.Mechanism = sarama.SASLTypeOAuth
		c.Net.SASL.TokenProvider = staticToken(*secure.Token)
	default:
		secure.UnknownMechanism()
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

// staticToken is sarama's AccessTokenProvider for the -sasl-token flag's JWT.
type staticToken string

func (t staticToken) Token() (*sarama.AccessToken, error) {
	return &sarama.AccessToken{Token: string(t)}, nil
}
