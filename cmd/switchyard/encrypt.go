package main

import (
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/codec"
)

// envCodec returns the payload codec configured by SWITCHYARD_ENCRYPTION_KEYS
// (see codec.EnvKeys), or nil when it is unset. Set on the broker's
// options, it seals message bodies and, through the root package and
// admin, the ledger's payloads too.
func envCodec() (broker.Codec, error) {
	a, err := codec.FromEnv(nil)
	if a == nil || err != nil {
		return nil, err // a nil *AEAD must not become a non-nil Codec
	}
	return a, nil
}
