package codec

import (
	"context"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"os"
	"strings"

	"github.com/switchyard-dev/switchyard/broker"
)

// EnvKeys is the environment variable FromEnv reads: comma-separated
// "keyID:base64key" pairs, the active key first, e.g.
//
//	SWITCHYARD_ENCRYPTION_KEYS="2026-12:3q2+7w…=,2026-06:q83v…="
//
// Keys are 32 random bytes (AES-256; 16 and 24 are accepted), standard or
// URL base64 with or without padding; `openssl rand -base64 32` makes one.
// Key IDs are 1–64 characters of letters, digits and "_.:-" (not ",").
const EnvKeys = "SWITCHYARD_ENCRYPTION_KEYS"

// Key is a key-encryption key of a Keyring.
type Key struct {
	ID     string
	Secret []byte
}

// Keyring is a KeyProvider over keys held in memory. It wraps data keys
// with AES-GCM under its active key (the first) and unwraps with the key a
// payload names, so payloads sealed under older keys still open.
type Keyring struct {
	active string
	keys   map[string]cipher.AEAD
}

var _ KeyProvider = (*Keyring)(nil)

// NewKeyring returns a keyring; keys[0] is the active key.
func NewKeyring(keys ...Key) (*Keyring, error) {
	if len(keys) == 0 {
		return nil, broker.Invalidf("codec: a keyring needs at least one key")
	}
	r := &Keyring{active: keys[0].ID, keys: map[string]cipher.AEAD{}}
	for _, k := range keys {
		if err := validKeyID(k.ID); err != nil {
			return nil, err
		}
		if _, dup := r.keys[k.ID]; dup {
			return nil, broker.Invalidf("codec: key ID %q appears twice", k.ID)
		}
		switch len(k.Secret) {
		case 16, 24, 32:
		default:
			// Never quote the secret.
			return nil, broker.Invalidf("codec: key %q is %d bytes; want 32 (or 16, 24)", k.ID, len(k.Secret))
		}
		gcm, err := newGCM(k.Secret)
		if err != nil {
			return nil, err
		}
		r.keys[k.ID] = gcm
	}
	return r, nil
}

func validKeyID(id string) error {
	if id == "" || len(id) > 64 {
		return broker.Invalidf("codec: key ID %q must be 1–64 characters", id)
	}
	if err := broker.ValidateName("key ID", id); err != nil {
		return broker.Invalidf("codec: %v", err)
	}
	return nil
}

// ParseKeys parses EnvKeys' format into a keyring.
func ParseKeys(s string) (*Keyring, error) {
	var keys []Key
	for i, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		id, b64, ok := strings.Cut(part, ":")
		if !ok {
			// The part may be a bare secret: do not quote it.
			return nil, broker.Invalidf("codec: key %d is not keyID:base64key", i+1)
		}
		secret, err := decodeBase64(strings.TrimSpace(b64))
		if err != nil {
			return nil, broker.Invalidf("codec: key %q is not valid base64", id)
		}
		keys = append(keys, Key{ID: strings.TrimSpace(id), Secret: secret})
	}
	return NewKeyring(keys...)
}

func decodeBase64(s string) ([]byte, error) {
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil {
			return b, nil
		}
	}
	return nil, fmt.Errorf("not base64")
}

// ActiveKeyID returns the ID of the key new data keys are wrapped under.
func (r *Keyring) ActiveKeyID() string { return r.active }

// NewDataKey implements KeyProvider.
func (r *Keyring) NewDataKey(context.Context) (DataKey, error) {
	plain := make([]byte, keySize)
	if _, err := rand.Read(plain); err != nil {
		return DataKey{}, err
	}
	kek := r.keys[r.active]
	nonce := make([]byte, nonceSize, nonceSize+keySize+kek.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return DataKey{}, err
	}
	wrapped := kek.Seal(nonce, nonce, plain, []byte("switchyard data key\x00"+r.active))
	return DataKey{KeyID: r.active, Plain: plain, Wrapped: wrapped}, nil
}

// UnwrapDataKey implements KeyProvider.
func (r *Keyring) UnwrapDataKey(_ context.Context, keyID string, wrapped []byte) ([]byte, error) {
	kek := r.keys[keyID]
	if kek == nil {
		return nil, ErrUnknownKey
	}
	if len(wrapped) < nonceSize {
		return nil, ErrAuth
	}
	plain, err := kek.Open(nil, wrapped[:nonceSize], wrapped[nonceSize:], []byte("switchyard data key\x00"+keyID))
	if err != nil {
		return nil, ErrAuth
	}
	return plain, nil
}

// FromEnv returns an AEAD over the keyring in EnvKeys, or nil and no error
// when EnvKeys is unset or empty (encryption off). o may be nil.
func FromEnv(o *Options) (*AEAD, error) {
	s := strings.TrimSpace(os.Getenv(EnvKeys))
	if s == "" {
		return nil, nil
	}
	r, err := ParseKeys(s)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", EnvKeys, err)
	}
	return New(r, o)
}
