package api

import (
	"strconv"
	"strings"
)

// Count is n things for a person, the noun in the plural unless n is 1:
// "1 job", "2 jobs", "0 entries", "3 patches". The one way the CLI and the
// daemon's messages count.
func Count(n int, noun string) string {
	s := strconv.Itoa(n) + " "
	if n == 1 || n == -1 {
		return s + noun
	}
	return s + Plural(noun)
}

// Plural is noun's plural by English's regular rules (what Count counts).
func Plural(noun string) string {
	switch {
	case noun == "":
		return noun
	case strings.HasSuffix(noun, "y") && len(noun) > 1 && !strings.ContainsRune("aeiou", rune(noun[len(noun)-2])):
		return noun[:len(noun)-1] + "ies"
	case strings.HasSuffix(noun, "s"), strings.HasSuffix(noun, "x"), strings.HasSuffix(noun, "ch"), strings.HasSuffix(noun, "sh"):
		return noun + "es"
	}
	return noun + "s"
}
