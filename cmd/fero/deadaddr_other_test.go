//go:build !unix

package main

import "testing"

// deadAddr is freeAddr where a socket cannot be bound without listening.
func deadAddr(t *testing.T) string { return freeAddr(t) }
