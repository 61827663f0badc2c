package api

import (
	"crypto/rand"
	"encoding/hex"
)

// RandomHex is n random bytes (crypto/rand) as 2n lowercase hex digits:
// the one way ids' random parts, tokens and keys are made. crypto/rand's
// Read does not fail (since Go 1.24 it ends the program instead).
func RandomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
