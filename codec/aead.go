package codec

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
)

// Errors of Open. Each is wrapped in a permanent *broker.Error of kind
// broker.ErrUndecodable.
var (
	// ErrAuth: the payload does not authenticate: it was changed, or it was
	// sealed for another task (other additional data), or under a key with
	// the same ID but other bytes.
	ErrAuth = errors.New("codec: payload does not authenticate (tampered, moved, or wrong key)")
	// ErrUnknownKey: the payload names a key the KeyProvider does not have.
	ErrUnknownKey = errors.New("codec: unknown key")
	// ErrMalformed: the payload has the sealed header but is truncated or
	// of an unknown version.
	ErrMalformed = errors.New("codec: malformed sealed payload")
	// ErrNotSealed: the payload is not sealed (plaintext written before
	// encryption was turned on, or by a publisher without it) and
	// Options.AcceptPlaintext is off.
	ErrNotSealed = errors.New("codec: payload is not sealed")
)

var magic = []byte{'S', 'Y', 'E'}

const (
	version   = 1
	nonceSize = 12
	keySize   = 32
	maxField  = 4096 // key ID and wrapped key lengths
)

// DataKey is a data key a KeyProvider made: Plain encrypts payloads;
// Wrapped (Plain encrypted under the provider's key KeyID) travels with
// them.
type DataKey struct {
	KeyID   string
	Plain   []byte // 32 bytes
	Wrapped []byte
}

// KeyProvider holds the key-encryption keys. Implement it over a key
// service to keep them there (AWS KMS GenerateDataKey and Decrypt map onto
// it directly); Keyring keeps them in memory.
type KeyProvider interface {
	// NewDataKey returns a fresh random 32-byte data key and its wrapped
	// form under the active key. An error is treated as transient unless
	// it is a classified permanent one.
	NewDataKey(ctx context.Context) (DataKey, error)
	// UnwrapDataKey returns the data key wrapped under key keyID. It
	// returns an error matching ErrUnknownKey for a key it does not have
	// and ErrAuth for a wrapped key that does not authenticate; any other
	// error is treated as transient (the service may answer later).
	UnwrapDataKey(ctx context.Context, keyID string, wrapped []byte) ([]byte, error)
}

// Options tune an AEAD. A nil *Options means every default.
type Options struct {
	// DataKeyUses is how many payloads one data key seals before a new
	// one is made. Defaults to 1<<20 (well below AES-GCM's 2^32 limit for
	// random nonces).
	DataKeyUses int
	// DataKeyTTL is how long one data key seals payloads. Defaults to 1h.
	DataKeyTTL time.Duration
	// CacheSize bounds the unwrapped data keys kept for Open. Defaults to
	// 1024.
	CacheSize int
	// AcceptPlaintext makes Open return a payload without the sealed
	// header as it is, instead of failing with ErrNotSealed: for turning
	// encryption on while queues and the ledger still hold plaintext. It
	// lets anyone who can write to the broker inject unauthenticated
	// payloads: turn it off once the old payloads are gone. Defaults to
	// false.
	AcceptPlaintext bool
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time
}

// AEAD is the AES-GCM envelope codec. It implements broker.Codec and is
// safe for concurrent use.
type AEAD struct {
	p    KeyProvider
	opts Options

	mu     sync.Mutex
	cur    *dataKey // sealing key, nil until the first Seal
	opened map[string]cipher.AEAD
}

type dataKey struct {
	header []byte // magic, version, key ID, wrapped key
	keyID  string
	gcm    cipher.AEAD
	uses   int
	until  time.Time
}

var _ broker.Codec = (*AEAD)(nil)

// New returns an AEAD over p. o may be nil.
func New(p KeyProvider, o *Options) (*AEAD, error) {
	if p == nil {
		return nil, broker.Invalidf("codec: nil key provider")
	}
	var c Options
	if o != nil {
		c = *o
	}
	if c.DataKeyUses <= 0 {
		c.DataKeyUses = 1 << 20
	}
	if c.DataKeyTTL <= 0 {
		c.DataKeyTTL = time.Hour
	}
	if c.CacheSize <= 0 {
		c.CacheSize = 1024
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return &AEAD{p: p, opts: c, opened: map[string]cipher.AEAD{}}, nil
}

// Seal encrypts plaintext, binding aad.
func (a *AEAD) Seal(ctx context.Context, plaintext, aad []byte) ([]byte, error) {
	k, err := a.sealingKey(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]byte, len(k.header), len(k.header)+nonceSize+len(plaintext)+k.gcm.Overhead())
	copy(out, k.header)
	nonce := out[len(out) : len(out)+nonceSize]
	if _, err := rand.Read(nonce); err != nil {
		return nil, broker.Errorf("codec: seal", broker.Transient, "random nonce: %w", err)
	}
	out = out[:len(out)+nonceSize]
	return k.gcm.Seal(out, nonce, plaintext, additional(k.header, aad)), nil
}

func (a *AEAD) sealingKey(ctx context.Context) (*dataKey, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.opts.Now()
	if k := a.cur; k != nil && k.uses < a.opts.DataKeyUses && now.Before(k.until) {
		k.uses++
		return k, nil
	}
	dk, err := a.p.NewDataKey(ctx)
	if err != nil {
		return nil, broker.Wrap("codec: new data key", broker.Transient, err)
	}
	if len(dk.Plain) != keySize || dk.KeyID == "" || len(dk.KeyID) > maxField || len(dk.Wrapped) > maxField {
		return nil, broker.Errorf("codec: new data key", broker.Permanent,
			"the key provider returned a %d-byte data key with a %d-byte key ID and a %d-byte wrapped key; want 32, 1–%d and at most %d",
			len(dk.Plain), len(dk.KeyID), len(dk.Wrapped), maxField, maxField)
	}
	gcm, err := newGCM(dk.Plain)
	if err != nil {
		return nil, err
	}
	h := append([]byte(nil), magic...)
	h = append(h, version)
	h = binary.AppendUvarint(h, uint64(len(dk.KeyID)))
	h = append(h, dk.KeyID...)
	h = binary.AppendUvarint(h, uint64(len(dk.Wrapped)))
	h = append(h, dk.Wrapped...)
	a.cur = &dataKey{header: h, keyID: dk.KeyID, gcm: gcm, uses: 1, until: now.Add(a.opts.DataKeyTTL)}
	return a.cur, nil
}

// Open decrypts what Seal made with the same aad.
func (a *AEAD) Open(ctx context.Context, sealed, aad []byte) ([]byte, error) {
	if !IsSealed(sealed) {
		if a.opts.AcceptPlaintext {
			return sealed, nil
		}
		return nil, undecodable("", ErrNotSealed)
	}
	h, err := parseHeader(sealed)
	if err != nil {
		return nil, err
	}
	gcm, err := a.unwrap(ctx, h)
	if err != nil {
		return nil, err
	}
	rest := sealed[len(h.raw):]
	nonce, ct := rest[:nonceSize], rest[nonceSize:]
	pt, err := gcm.Open(nil, nonce, ct, additional(h.raw, aad))
	if err != nil {
		return nil, undecodable(h.keyID, ErrAuth)
	}
	return pt, nil
}

func (a *AEAD) unwrap(ctx context.Context, h header) (cipher.AEAD, error) {
	ck := h.keyID + "\x00" + string(h.wrapped)
	a.mu.Lock()
	gcm := a.opened[ck]
	if gcm == nil && a.cur != nil && bytes.Equal(a.cur.header, h.raw) {
		gcm = a.cur.gcm
	}
	a.mu.Unlock()
	if gcm != nil {
		return gcm, nil
	}
	plain, err := a.p.UnwrapDataKey(ctx, h.keyID, h.wrapped)
	switch {
	case errors.Is(err, ErrUnknownKey), errors.Is(err, ErrAuth):
		return nil, undecodable(h.keyID, err)
	case err != nil:
		return nil, broker.Wrap("codec: unwrap data key", broker.Transient, err)
	case len(plain) != keySize:
		return nil, undecodable(h.keyID, fmt.Errorf("%w: the data key is %d bytes", ErrAuth, len(plain)))
	}
	if gcm, err = newGCM(plain); err != nil {
		return nil, err
	}
	a.mu.Lock()
	if len(a.opened) >= a.opts.CacheSize {
		clear(a.opened)
	}
	a.opened[ck] = gcm
	a.mu.Unlock()
	return gcm, nil
}

// Reseal re-encrypts sealed (with aad) under a fresh data key of the
// active key when it was sealed under another key ID, and reports whether
// it did. A plaintext payload accepted by AcceptPlaintext is sealed.
func (a *AEAD) Reseal(ctx context.Context, sealed, aad []byte) ([]byte, bool, error) {
	k, err := a.sealingKey(ctx)
	if err != nil {
		return nil, false, err
	}
	if id, err := KeyID(sealed); err == nil && id == k.keyID {
		return sealed, false, nil
	}
	pt, err := a.Open(ctx, sealed, aad)
	if err != nil {
		return nil, false, err
	}
	out, err := a.Seal(ctx, pt, aad)
	return out, err == nil, err
}

// IsSealed reports whether b is sealed (IsSealed). broker.Broker does not
// seal such a body again: a dead letter that did not open, re-published as
// stored, keeps its one layer.
func (a *AEAD) IsSealed(b []byte) bool { return IsSealed(b) }

// IsSealed reports whether b starts with the sealed header's magic bytes.
// Task arguments and step outputs are JSON and never do.
func IsSealed(b []byte) bool { return bytes.HasPrefix(b, magic) }

// KeyID returns the ID of the key that wrapped sealed's data key.
func KeyID(sealed []byte) (string, error) {
	if !IsSealed(sealed) {
		return "", undecodable("", ErrNotSealed)
	}
	h, err := parseHeader(sealed)
	return h.keyID, err
}

type header struct {
	raw     []byte // magic to wrapped key
	keyID   string
	wrapped []byte
	n       int // header length including the nonce
}

func parseHeader(b []byte) (header, error) {
	var h header
	if len(b) < len(magic)+1 {
		return h, undecodable("", ErrMalformed)
	}
	if b[len(magic)] != version {
		return h, undecodable("", fmt.Errorf("%w: version %d is not supported", ErrMalformed, b[len(magic)]))
	}
	r := b[len(magic)+1:]
	field := func() ([]byte, bool) {
		n, w := binary.Uvarint(r)
		if w <= 0 || n > maxField || n > uint64(len(r)-w) {
			return nil, false
		}
		f := r[w : w+int(n)]
		r = r[w+int(n):]
		return f, true
	}
	id, ok1 := field()
	wrapped, ok2 := field()
	if !ok1 || !ok2 || len(id) == 0 || len(r) < nonceSize+16 {
		return h, undecodable("", fmt.Errorf("%w: truncated", ErrMalformed))
	}
	h.keyID, h.wrapped = string(id), wrapped
	h.raw = b[:len(b)-len(r)]
	h.n = len(h.raw) + nonceSize
	return h, nil
}

// additional is GCM's additional data: the header, then the caller's.
func additional(header, aad []byte) []byte {
	out := make([]byte, 0, len(header)+8+len(aad))
	out = binary.AppendUvarint(out, uint64(len(header)))
	out = append(out, header...)
	return append(out, aad...)
}

func newGCM(key []byte) (cipher.AEAD, error) {
	blk, err := aes.NewCipher(key)
	if err != nil {
		return nil, broker.Errorf("codec", broker.Permanent, "%w", err)
	}
	gcm, err := cipher.NewGCM(blk)
	if err != nil {
		return nil, broker.Errorf("codec", broker.Permanent, "%w", err)
	}
	return gcm, nil
}

func undecodable(keyID string, err error) error {
	if keyID != "" {
		err = fmt.Errorf("key %q: %w", keyID, err)
	}
	return &broker.Error{Op: "codec: open", Class: broker.Permanent, Kind: broker.ErrUndecodable, Err: err}
}
