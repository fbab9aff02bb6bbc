package main

// The TLS and SASL of internal/secure's flags as franz-go options, for every client the
// scenarios make (none without the flags).

import (
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"odradek/interop/internal/secure"
)

// securityOpts is the TLS and SASL options the flags ask for (none without them).
func securityOpts() []kgo.Opt {
	var opts []kgo.Opt
	if cfg := secure.TLSConfig(); cfg != nil {
		opts = append(opts, kgo.DialTLSConfig(cfg))
	}
	user, pass := *secure.User, *secure.Password
	switch *secure.Mechanism {
	case "":
	case "PLAIN":
		opts = append(opts, kgo.SASL(plain.Auth{User: user, Pass: pass}.AsMechanism()))
	case "SCRAM-SHA-256":
		opts = append(opts, kgo.SASL(scram.Auth{User: user, Pass: pass}.AsSha256Mechanism()))
	case "SCRAM-SHA-512":
		opts = append(opts, kgo.SASL(scram.Auth{User: user, Pass: pass}.AsSha512Mechanism()))
	case "OAUTHBEARER":
		opts = append(opts, kgo.SASL(oauth.Auth{Token: *secure.Token}.AsMechanism()))
	default:
		secure.UnknownMechanism()
	}
	return opts
}
