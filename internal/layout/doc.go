// Package layout holds the floor test: it reads `go list` and fails when a
// package imports one on a higher floor (see floors_test.go and
// ARCHITECTURE.md, "Where things live"). It has no code of its own.
package layout
