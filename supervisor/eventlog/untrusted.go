package eventlog

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
)

// Ident is how an event carries a name someone else chose (a secret an
// executor asks for, a request's type): the name itself when it is a plain
// identifier (1 to 64 of A-Z a-z 0-9 _ . - : /), else only its length and
// a hash ("(37 bytes, sha256 3f2a1b…)"), so that what an agent or a job
// wrote never reaches the log as text, whatever it holds (a secret it
// read, a line break, a terminal escape), and the 3 a.m. reader can still
// tell two of them apart.
func Ident(s string) string {
	if plain(s) {
		return s
	}
	return Digest([]byte(s))
}

// Digest describes bytes by their length and hash only:
// "(N bytes, sha256 HHHHHHHHHHHHHHHH)" (the first 16 hex digits).
func Digest(b []byte) string {
	h := sha256.Sum256(b)
	return "(" + strconv.Itoa(len(b)) + " bytes, sha256 " + hex.EncodeToString(h[:8]) + ")"
}

func plain(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == '_' || c == '.' || c == '-' || c == ':' || c == '/':
		default:
			return false
		}
	}
	return true
}
