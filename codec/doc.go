// Package codec encrypts task payloads at rest: message bodies on every
// broker (broker.Options.Codec) and the payload columns of every ledger
// (ledger.WithCodec): task arguments, step outputs, effect results and task
// results.
//
// # Envelope encryption
//
// AEAD seals each payload with AES-256-GCM under a data key. A data key is
// random, used for a bounded number of payloads or time
// (Options.DataKeyUses, Options.DataKeyTTL), and travels with every
// payload wrapped by a key-encryption key that a KeyProvider holds: the
// static Keyring (keys from SWITCHYARD_ENCRYPTION_KEYS) or a key service
// (AWS KMS, Vault transit, GCP KMS …) behind the two-method KeyProvider
// interface, called once per data key rather than once per payload.
//
// # Format
//
//	'S','Y','E' | version 1 |
//	uvarint len + key ID | uvarint len + wrapped data key |
//	nonce (12 bytes) | AES-GCM ciphertext and tag (16 bytes)
//
// GCM authenticates the header (so key ID and wrapped key cannot be
// swapped) and the caller's additional data (the task ID, and kind and
// tenant for arguments), which is not stored: a payload moved to another
// task or another column does not open. The overhead is about 100 bytes
// per payload with the Keyring (more with a key service's wrapped keys).
//
// # Key rotation
//
// Every payload names the key that wrapped its data key. Add the new key
// first in the keyring (it becomes the active key for new data keys) and
// keep the old ones as long as payloads sealed under them may be read
// (the broker's queues and dead letters, the ledger's retention). AEAD.Reseal
// re-encrypts one payload under the active key.
//
// # Errors
//
// A payload that can never be opened (tampered, truncated, sealed under a
// key the provider does not have, or plaintext when AcceptPlaintext is off)
// gives a permanent error matching broker.ErrUndecodable (and ErrAuth,
// ErrUnknownKey, ErrMalformed or ErrNotSealed): Broker dead-letters the
// message with reason undecodable, and the runtime dead-letters a task
// whose step output or effect result does not open. A key service that
// fails gives a transient error.
package codec
