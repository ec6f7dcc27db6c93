// Package base is another package's struct, embedded by the requests of
// package embedded.
package base

// Ref names a document: its ID is the key of the requests that embed it.
type Ref struct {
	ID string `msgpack:"id" fero:"key"`
}
