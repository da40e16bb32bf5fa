// Package seal encrypts sensitive job params: for one agent (X25519 key
// agreement with a one-time key, HKDF-SHA256, AES-256-GCM), so a command
// stored in the commands stream holds only what that agent can open; and
// at rest under a cluster key (AES-256-GCM), so the controllers that may
// run a job can read it back while nothing stored holds it in clear. Both
// bind the ciphertext to its context (job, step, node, param) through the
// AEAD's additional data, so it cannot be replayed into another job.
package seal

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/ecdh"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
)

// KeySize is the size of a cluster key.
const KeySize = 32

var b64 = base64.RawStdEncoding

// KeyPair is an agent's sealing key pair.
type KeyPair struct {
	priv *ecdh.PrivateKey
}

// NewKeyPair makes a fresh key pair (kept in memory only: a restarted
// agent registers a new public key, and commands are sealed at dispatch).
func NewKeyPair() (*KeyPair, error) {
	k, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("seal key: %w", err)
	}
	return &KeyPair{priv: k}, nil
}

// Public is the public key as the agent registers it.
func (k *KeyPair) Public() string { return b64.EncodeToString(k.priv.PublicKey().Bytes()) }

// To seals plaintext for the holder of the public key pub.
func To(pub string, plaintext, context []byte) (string, error) {
	raw, err := b64.DecodeString(pub)
	if err != nil {
		return "", fmt.Errorf("seal: public key: %w", err)
	}
	peer, err := ecdh.X25519().NewPublicKey(raw)
	if err != nil {
		return "", fmt.Errorf("seal: public key: %w", err)
	}
	eph, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		return "", fmt.Errorf("seal: %w", err)
	}
	shared, err := eph.ECDH(peer)
	if err != nil {
		return "", fmt.Errorf("seal: %w", err)
	}
	aead, err := boxAEAD(shared, eph.PublicKey().Bytes(), raw)
	if err != nil {
		return "", err
	}
	out := append([]byte{}, eph.PublicKey().Bytes()...)
	return b64.EncodeToString(seal(aead, out, plaintext, context)), nil
}

// Open opens what To sealed for this key pair.
func (k *KeyPair) Open(sealed string, context []byte) ([]byte, error) {
	raw, err := b64.DecodeString(sealed)
	if err != nil || len(raw) < 32 {
		return nil, errors.New("open sealed value: malformed")
	}
	peer, err := ecdh.X25519().NewPublicKey(raw[:32])
	if err != nil {
		return nil, fmt.Errorf("open sealed value: %w", err)
	}
	shared, err := k.priv.ECDH(peer)
	if err != nil {
		return nil, fmt.Errorf("open sealed value: %w", err)
	}
	aead, err := boxAEAD(shared, raw[:32], k.priv.PublicKey().Bytes())
	if err != nil {
		return nil, err
	}
	return open(aead, raw[32:], context)
}

func boxAEAD(shared, ephPub, peerPub []byte) (cipher.AEAD, error) {
	key, err := hkdf.Key(sha256.New, shared, append(append([]byte{}, ephPub...), peerPub...), "grid seal v1", 32)
	if err != nil {
		return nil, fmt.Errorf("seal: %w", err)
	}
	return gcm(key)
}

// Box encrypts at rest under a cluster key.
type Box struct {
	aead cipher.AEAD
}

// NewBox returns a box for a KeySize-byte key.
func NewBox(key []byte) (*Box, error) {
	if len(key) != KeySize {
		return nil, fmt.Errorf("cluster key is %d bytes, want %d", len(key), KeySize)
	}
	a, err := gcm(key)
	if err != nil {
		return nil, err
	}
	return &Box{aead: a}, nil
}

// NewKey makes a random cluster key.
func NewKey() []byte {
	k := make([]byte, KeySize)
	_, _ = rand.Read(k)
	return k
}

// Seal encrypts plaintext bound to context.
func (b *Box) Seal(plaintext, context []byte) []byte { return seal(b.aead, nil, plaintext, context) }

// Open decrypts what Seal encrypted with the same context.
func (b *Box) Open(ciphertext, context []byte) ([]byte, error) {
	return open(b.aead, ciphertext, context)
}

func gcm(key []byte) (cipher.AEAD, error) {
	blk, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("seal: %w", err)
	}
	return cipher.NewGCM(blk)
}

func seal(a cipher.AEAD, dst, plaintext, context []byte) []byte {
	nonce := make([]byte, a.NonceSize())
	_, _ = rand.Read(nonce)
	dst = append(dst, nonce...)
	return a.Seal(dst, nonce, plaintext, context)
}

func open(a cipher.AEAD, data, context []byte) ([]byte, error) {
	if len(data) < a.NonceSize() {
		return nil, errors.New("open sealed value: malformed")
	}
	p, err := a.Open(nil, data[:a.NonceSize()], data[a.NonceSize():], context)
	if err != nil {
		return nil, errors.New("open sealed value: wrong key or context")
	}
	return p, nil
}
